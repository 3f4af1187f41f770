"""What the page decodes is the run: every shipped trace, encoded once per step by the kernel's
side (packets.py) and decoded by the page's (static/store.js) in Chromium, equals the records'
own JSON (`StepRecord.to_json()`), every field store.js derives from them equals `RequestStep`'s
property of that name (their one owner; also over variants of each trace that hold what no
shipped one does), and the physical KV map the page replays equals `Trace.kv_map` after every
step, forward and back.
Packets that overlap what the page has or leave a gap are refused, never applied twice."""

import base64
import copy
import dataclasses
import json
from dataclasses import fields

import numpy as np
import pytest
from da_lab_widgets.packets import MAGIC, RunEncoder, runs
from page_lab import SHIPPED, TRACES, open_page, write_page

from da_lab.core.group_rows import GroupRow
from da_lab.core.record import RequestStep
from da_lab.trace import load

# The decoded steps as JSON, in the records' own shape (typed arrays as lists).
DECODED = """() => daLab.session.run.steps.map((r) => {
  const arr = (a) => (a ? Array.from(a) : a);
  const requests = r.requests.map((h) => {
    const o = { req: h.req };
    if (h.hooked) {
      Object.assign(o, { row: h.row, block_size: h.block_size, seq_len: h.seq_len,
        query_len: h.query_len, directive: h.directive, tag_buffer: h.tag_buffer,
        n_output_seen: h.n_output_seen, tokens_unseen: h.tokens_unseen, events: h.events });
      for (const k of ["staged_row", "kept_logical", "partial_logical", "built_row"]) {
        if (h[k]) o[k] = arr(h[k]);
      }
      if (h.built_seq_len !== null) o.built_seq_len = h.built_seq_len;
      if (h.groups) o.groups = h.groups.map((g) => ({ group: g.group, kind: g.kind,
        block_size: g.block_size, row: arr(g.row),
        ...(g.window === null ? {} : { window: g.window }) }));
    }
    if (h.new_token_ids !== null) Object.assign(o, { new_token_ids: h.new_token_ids,
      new_text: h.new_text, finished: h.finished });
    return o;
  });
  const md = r.metadata && { query_start_loc: arr(r.metadata.query_start_loc),
    seq_lens: arr(r.metadata.seq_lens), slot_mapping: arr(r.metadata.slot_mapping),
    block_table_shape: r.metadata.block_table_shape, max_seq_len: r.metadata.max_seq_len,
    backend: r.metadata.backend, runner: r.metadata.runner };
  return { step: r.step, wall_s: r.wall_s, hook_us: r.hook_us, requests, metadata: md,
           kv: r.kv, added: r.added, warnings: r.warnings };
})"""

# {block: [owners, cached]} after record i, for every block that is owned or cached
KV_AT = """(i) => { const kv = daLab.session.run.kvAt(i), out = {};
  for (let b = 0; b < kv.owners.length; b++) {
    const o = kv.sets[kv.owners[b]];
    if (o.length || kv.cached[b]) out[b] = [o, !!kv.cached[b]];
  }
  return out; }"""


def _expected(rec) -> dict:
    d = rec.to_json()
    kv = d.get("kv") or {}
    d["kv"] = {"assign": {str(k): v for k, v in (kv.get("assign") or {}).items()},
               **{k: sorted(int(b) for b in kv.get(k) or ()) for k in ("free", "cached",
                                                                         "uncached")}}
    return d


@pytest.fixture(scope="module", params=SHIPPED)
def shipped(request, browser, tmp_path_factory):
    path = TRACES / f"{request.param}.jsonl.gz"
    page = open_page(browser, write_page(path, tmp_path_factory.mktemp("pk") / "run.html"))
    yield load(path), page, page.errors
    page.close()


def test_the_page_decodes_every_record_and_the_kv_map(shipped):
    tr, page, errors = shipped
    got = page.evaluate(DECODED)
    assert len(got) == len(tr.records)
    for rec, step in zip(tr.records, got, strict=True):
        step["kv"] = {**step["kv"], **{k: sorted(step["kv"][k]) for k in ("free", "cached",
                                                                          "uncached")}}
        assert step == json.loads(json.dumps(_expected(rec))), f"step {rec.step}"
    order = list(range(len(tr.records))) + [30, 5, 39, 0, 12, -1]     # forward, then back
    for i in order:
        if i >= len(tr.records):
            continue
        want = {} if i < 0 else tr.kv_map(tr.records[i].step)
        want = {str(b): [v["owners"], v["cached"]] for b, v in want.items()
                if v["owners"] or v["cached"]}
        assert page.evaluate(KV_AT, i) == want, f"kv map after record {i}"
    assert errors == [] and page.offline_requests == []


def test_packets_continue_the_run_or_are_refused(shipped):
    tr, page, _ = shipped
    enc = RunEncoder(tr.header)
    enc.extend(tr.records)
    n = len(tr.records)
    a, b = n // 4, n // 2
    cuts = [(0, a), (a, b), (1, a + 1), (b + 1, n), (b, n)]
    packets = [base64.b64encode(enc.packet(a, b)).decode() for a, b in cuts]
    got = page.evaluate("""([header, packets]) => {
      const run = new daLab.app.Run(header);
      const bytes = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
      return [packets.map((p) => run.append(bytes(p))), run.length,
              run.steps.map((r) => r.step)]; }""", [tr.header, packets])
    assert got == [["ok", "ok", "old", "gap", "ok"], n, [r.step for r in tr.records]]


def test_a_decode_step_sends_no_block_id_and_runs_are_exact():
    assert runs([5, 6, 7, 9, -1, -1, 0, 1]).tolist() == [5, 3, 9, 1, -1, 2, 0, 2]
    assert runs([]).tolist() == []
    with pytest.raises(ValueError, match="outside int32"):
        runs([2**40])
    tr = load(TRACES / "h200_8b_64k.jsonl.gz")
    enc = RunEncoder(tr.header)
    enc.extend(tr.records)
    pkt = enc.packet()
    assert pkt[:4] == MAGIC
    # a decode step whose row did not grow carries its 2,043-block row as "keep all, 0 new"
    (text, data), rec = enc.pieces[20], tr.records[20]
    h = rec.requests[0]
    assert h.query_len == 1 and len(h.staged_row) > 2000
    assert json.loads(text)["q"][0]["sr"] == [len(h.staged_row), 0] and data.size < 16


# ---- the page's copy of RequestStep's derived fields (store.js derive()) ------------------------
# Every property of RequestStep is derived: the page must derive each one, equal, and nothing of
# its own but PAGE_ONLY. A property added to record.py and not to store.js fails here.
DERIVED = sorted(n for n, v in vars(RequestStep).items() if isinstance(v, property))
STORED = {f.name for f in fields(RequestStep)}
PAGE_ONLY = {"partial": lambda r: [] if r.partial_logical is None
             else sorted(r.partial_logical.tolist())}      # partial_logical as a Set

DERIVED_IN_PAGE = """([header, packet, names]) => {
  const run = new daLab.app.Run(header);
  run.append(Uint8Array.from(atob(packet), (c) => c.charCodeAt(0)));
  const val = (v) => (v instanceof Set ? [...v].sort((a, b) => a - b)
    : ArrayBuffer.isView(v) ? Array.from(v) : v ?? null);
  return run.steps.map((r) => r.requests.map((h) => [h.hooked, Object.keys(h).sort(),
    Object.fromEntries(names.map((n) => [n, n in h ? val(h[n]) : null]))]));
}"""


def _varied(records: list) -> list:
    """The records again with what no shipped trace holds, in turn over the hooked request
    steps: partial blocks and a `built_row` other than the kernel row; no `built_seq_len`; no
    directive and no staged row; every block hidden. Records are frozen: each varied step is
    a replaced copy."""
    out, k = [], 0
    for rec in copy.deepcopy(records):
        steps = []
        for h in rec.requests:
            if h.hooked:
                k += 1
                if k % 4 == 0:
                    part = (h.kept_logical[:1].copy() if h.kept_logical is not None
                            and len(h.kept_logical) else h.partial_logical)
                    h = dataclasses.replace(h, partial_logical=part,
                                            built_row=h.kernel_row[::-1] + 1)
                elif k % 4 == 1:
                    h = dataclasses.replace(h, built_seq_len=None)
                elif k % 4 == 2:
                    h = dataclasses.replace(h, directive=None, staged_row=None)
                else:
                    h = dataclasses.replace(h, kept_logical=np.zeros(0, dtype=np.int64))
            steps.append(h)
        out.append(dataclasses.replace(rec, requests=type(rec.requests)(steps)))
    return out


def test_the_page_derives_every_derived_field_as_request_step_does(shipped):
    tr, page, _ = shipped
    for records in (tr.records, _varied(tr.records)):
        enc = RunEncoder(tr.header)
        enc.extend(records)
        packet = base64.b64encode(enc.packet()).decode()
        names = DERIVED + sorted(PAGE_ONLY)
        got = page.evaluate(DERIVED_IN_PAGE, [tr.header, packet, names])
        for rec, steps in zip(records, got, strict=True):
            for r, (hooked, keys, derived) in zip(rec.requests, steps, strict=True):
                at = f"step {rec.step} {r.req}"
                if hooked:
                    assert set(keys) == STORED | set(DERIVED) | set(PAGE_ONLY), \
                        f"{at}: store.js derives other fields than RequestStep's properties"
                want = {n: getattr(r, n) for n in DERIVED}
                want.update({n: f(r) if r.hooked else None for n, f in PAGE_ONLY.items()})
                want = {n: v.tolist() if isinstance(v, np.ndarray) else v
                        for n, v in want.items()}
                assert derived == want, at


# ---- a hybrid model's other KV-cache groups (core/group_rows.py) -----------------------------
GROUPS_IN_PAGE = """([header, packet]) => {
  const run = new daLab.app.Run(header);
  run.append(Uint8Array.from(atob(packet), (c) => c.charCodeAt(0)));
  return run.steps.map((r) => r.requests.map((h) => (h.groups || null) && h.groups.map((g) => (
    { group: g.group, kind: g.kind, block_size: g.block_size, row: Array.from(g.row),
      ...(g.window === null ? {} : { window: g.window }) }))));
}"""


def _with_groups(records: list) -> list:
    """The records as a hybrid model's would be: each hooked step also carries a sliding
    window's row (its last blocks, rolled) and a state group's one block."""
    out = []
    for rec in records:
        steps = []
        for i, h in enumerate(rec.requests):
            if h.hooked and h.staged_row is not None:
                row = np.roll(np.asarray(h.staged_row, dtype=np.int32)[-3:], 1) + 1
                h = dataclasses.replace(h, groups=(
                    GroupRow(1, "sliding", h.block_size, row, window=64),
                    GroupRow(2, "state", 0, np.array([rec.step + i], dtype=np.int32))))
            steps.append(h)
        out.append(dataclasses.replace(rec, requests=type(rec.requests)(steps)))
    return out


def test_the_page_decodes_a_hybrid_models_group_rows(shipped):
    tr, page, _ = shipped
    records = _with_groups(tr.records)
    enc = RunEncoder(tr.header)
    enc.extend(records)
    got = page.evaluate(GROUPS_IN_PAGE, [tr.header, base64.b64encode(enc.packet()).decode()])
    want = [[None if h.groups is None else [g.to_json() for g in h.groups]
             for h in rec.requests] for rec in records]
    assert any(g is not None for step in want for g in step)
    assert got == want
