"""What the page decodes is the run: every shipped trace, encoded once per step by the kernel's
side (packets.py) and decoded by the page's (static/store.js) in Chromium, equals the records'
own JSON (`StepRecord.to_json()`), the numbers derived from them equal `RequestStep`'s, and the
physical KV map the page replays equals `Trace.kv_map` after every step, forward and back.
Packets that overlap what the page has or leave a gap are refused, never applied twice."""

import base64
import json

import pytest
from da_lab_widgets.packets import MAGIC, RunEncoder, runs
from page_lab import SHIPPED, TRACES, open_page, write_page

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
      for (const k of ["staged_row", "kept_logical", "built_row"]) if (h[k]) o[k] = arr(h[k]);
      if (h.built_seq_len !== null) o.built_seq_len = h.built_seq_len;
      o.derived = [h.blocks_total, h.blocks_kept, h.attn_seq_len, h.blocks_read,
                   arr(h.kernel_row), arr(h.read_row)];
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
    for h, r in zip(d["requests"], rec.requests, strict=True):
        if r.hooked:
            h["derived"] = [r.blocks_total, r.blocks_kept, r.attn_seq_len, r.blocks_read,
                            None if r.kernel_row is None else r.kernel_row.tolist(),
                            None if r.read_row is None else r.read_row.tolist()]
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
