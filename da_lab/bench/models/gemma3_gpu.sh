#!/bin/bash
# Gemma3-DA on one H100/H200 (issue 58): train a LoRA delta on Gemma 3 270M within a time
# budget, then evaluate it through vLLM 0.26 with the hook (which must mask hybrid models: the
# global layers' KV-cache group only, issue 55).
#   da_lab/bench/models/gemma3_gpu.sh train    # -> $G/train.log, $G/gemma3-da/{delta.safetensors,training.json}
#   da_lab/bench/models/gemma3_gpu.sh prompts  # the eval sets -> $G/paper.jsonl, $G/card.jsonl,
#                                       # $G/long.jsonl, $G/pairs.jsonl (CPU work)
#   da_lab/bench/models/gemma3_gpu.sh eval     # the new delta on every set -> $G/eval-gemma3-*.json
#   da_lab/bench/models/gemma3_gpu.sh permute  # content, not position: both real models on the
#                                       # paper's held-out-domains set, documents permuted
#                                       # -> $G/eval-permute-{gemma3,smollm2}.json
#   da_lab/bench/models/gemma3_gpu.sh chain    # prompts beside train, then eval, then permute
# BUDGET (train seconds from the start, default 480: eight minutes), LR (default 4e-4), WARMUP
# (default 20), RANK (default 32: a 15.2 MB delta), ALPHA (default 64), PAPER (share of samples
# in the paper's protocol, default 0.7), LONG (share of long-text steps, default 0.25),
# LONG_TOKENS (default 4000,8000), PAIRS (share of two-document samples, default 0.25),
# BATCH_TOKENS (default 32768), SEED (default 41), N (prompts per generated set, default 300),
# N_NEEDLE (long texts, one and two parts each, default 36), MAX_TOKENS (default 160).
# Runs from a copy of the repository (cd there first); G=/tmp/g58 by default.
set -e
G=${G:-/tmp/g58}
mkdir -p "$G"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export VLLM_ENABLE_V1_MULTIPROCESSING=0
eval_set() {   # model, prompts file, output name, extra flags
    python -m da_lab.cli eval --model "$1" --prompts "$2" --max-tokens "${MAX_TOKENS:-160}" \
        --wave 128 --json --out "$G/$3.json" ${4:-} > /dev/null 2>> "$G/eval.log"
}
case "$1" in
train)
    python -m da_lab.training.trainer.finetune --base gemma3 --device cuda --seed "${SEED:-41}" \
        --rank "${RANK:-32}" --alpha "${ALPHA:-64}" --lr "${LR:-4e-4}" --warmup "${WARMUP:-20}" \
        --paper "${PAPER:-0.7}" --paper-drills --long "${LONG:-0.25}" \
        --long-tokens "${LONG_TOKENS:-4000,8000}" --pairs "${PAIRS:-0.25}" --extra-domains \
        --batch-tokens "${BATCH_TOKENS:-32768}" --time-budget-s "${BUDGET:-480}" \
        ${INIT:+--init "$INIT"} --eval-n 96 --probe-n 32 --eval-every 120 \
        --out "$G/gemma3-da" > "$G/train.log" 2>&1
    touch "$G/train.done" ;;
prompts)
    n=${N:-300}
    for split in heldout train; do
        set_name=$([ $split = heldout ] && echo held-out-domains || echo in-domain)
        python -m da_lab.training.eval.eval_prompts --n "$n" --split $split --protocol paper \
            --set "paper/$set_name" --by-domain
    done > "$G/paper.jsonl"
    python -m da_lab.training.eval.eval_prompts --n "$n" --split heldout --set held-out-domains \
        --by-domain > "$G/card.jsonl"
    sed 's/"set": "/"protocol": "paper", "set": "paper\/hand-written\//' \
        bench/data/handwritten-prompts.jsonl >> "$G/paper.jsonl"
    sed 's/"set": "/"set": "hand-written\//' bench/data/handwritten-prompts.jsonl \
        >> "$G/card.jsonl"
    # The paper's segments in Gemma's own tokens: one-part needles and two-part questions.
    python -m da_lab.training.eval.eval_needle --model gemma3 --n "${N_NEEDLE:-36}" \
        --two "${N_NEEDLE:-36}" --tokens 4000,12000 > "$G/long.jsonl"
    python -m da_lab.training.eval.eval_prompts --n "$n" --split heldout --protocol paper \
        --set paper/pairs-held-out-domains --generator nl_pairs > "$G/pairs.jsonl"
    python -m da_lab.training.eval.eval_prompts --n 200 --split heldout --protocol paper \
        --set paper/held-out-domains > "$G/permute.jsonl"
    touch "$G/prompts.done" ;;
eval)
    # The new delta merged into the cache's gemma3-da (the shipped one stays in the assets).
    python -c "from da_lab.models import gemma3 as M; print(M.build('gemma3-da', '$G/gemma3-da-model', delta='$G/gemma3-da/delta.safetensors'))" >> "$G/eval.log" 2>&1
    m="$G/gemma3-da-model"
    eval_set "$m" "$G/paper.jsonl" eval-gemma3-paper --ablations
    eval_set "$m" "$G/long.jsonl" eval-gemma3-long --ablations
    eval_set "$m" "$G/pairs.jsonl" eval-gemma3-pairs
    eval_set "$m" "$G/card.jsonl" eval-gemma3-card
    [ "${ZEROSHOT:-1}" = 1 ] && eval_set gemma3 "$G/paper.jsonl" eval-gemma3-zeroshot --no-base
    touch "$G/eval.done" ;;
permute)
    eval_set "$G/gemma3-da-model" "$G/permute.jsonl" eval-permute-gemma3 "--permute --no-base"
    eval_set smollm2-da "$G/permute.jsonl" eval-permute-smollm2 "--permute --no-base"
    touch "$G/permute.done" ;;
chain)
    bash "$0" prompts > "$G/prompts.log" 2>&1 &      # CPU work, beside the GPU's training
    p=$!
    bash "$0" train
    wait "$p"
    # An eval that fails (no hybrid hook yet: issue 55) is said in eval.log; the chain ends.
    bash "$0" eval || echo "eval failed: see eval.log" >> "$G/eval.log"
    bash "$0" permute || echo "permute failed: see eval.log" >> "$G/eval.log"
    touch "$G/chain.done" ;;
*) echo "usage: $0 train|prompts|eval|permute|chain" >&2; exit 2 ;;
esac
