#!/bin/bash
# Every committed SmolLM2 eval rescored with today's answer rule (da_lab.training.eval.eval_rescore),
# from the prompts it ran on, written again in a temporary folder: smollm2_gpu.sh `prompts`
# (seed 7100001: both dialects, the hand-written file, the needle set) and the 2026-12-03 fresh
# sets (seed 7100002). Evals of the earlier people-and-towns task find no prompts and say so.
#   PATH=.venv/bin:$PATH bash da_lab/bench/models/rescore_committed.sh > bench/results/rescore-2026-12-07.txt
set -e
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
G=$T PAPER_SETS=1 bash da_lab/bench/models/smollm2_gpu.sh prompts
for split in train:in-domain-fresh heldout:held-out-domains-fresh; do
    python -m da_lab.training.eval.eval_prompts --n 500 --split "${split%%:*}" --set "${split#*:}" \
        --by-domain --seed 7100002 >> "$T/prompts.jsonl"
done
for f in bench/results/eval-smollm2-*.json* bench/results/eval-previous-delta-*.json* \
         bench/results/eval-zeroshot-*.json*; do
    echo "== $f"
    python -m da_lab.training.eval.eval_rescore "$f" "$T/prompts.jsonl"
done
