#!/bin/bash
# SmolLM2-DA on the H200 (issue 26): train the LoRA on the many-domain task, then evaluate it
# through vLLM 0.26 with the hook on three sets in one engine run (in-domain and held-out-domain
# generated prompts, n=500 each, and the hand-written file), with the ablations, then the
# shipped (previous) delta on the same prompts without the base model and ablations.
#   da_lab/bench/models/smollm2_gpu.sh train    # -> $G/train.log, $G/smollm2-da/{delta.safetensors,training.json}
#   da_lab/bench/models/smollm2_gpu.sh eval     # -> $G/eval-new.json, $G/eval-old.json, $G/eval.log
#   da_lab/bench/models/smollm2_gpu.sh blocks   # the shipped delta at block sizes $BLOCKS -> $G/eval-bs*.json
#                                        # (run `prompts` first; PAPER_SETS=1 for the paper's sets)
#   da_lab/bench/models/smollm2_gpu.sh chain    # train, the new delta at 32 (both dialects) and at 16
#                                        # (the paper's sets), then the shipped delta at 16
#                                        # (OLD16=0: not)
#                                        # -> $G/eval-new.json, eval-new-bs16.json, eval-bs16.json
#   da_lab/bench/models/smollm2_gpu.sh fresh    # the shipped delta on fresh-seed prompts -> $G/eval-fresh.json
#                                        # (FRESH_SEED, default 7100002; FRESH_NAME, default
#                                        # fresh: the sets' suffix and the file's name)
# BUDGET (train seconds, default 370), LR (default 8e-4), WARMUP (steps, default 20), MIX
# (p_local,p_multi of training samples, default nl_gen.TRAIN_MIX), PAPER (share of samples in
# the paper's protocol, default 0; issue 40), EXTRA=1 (also the training-only domains,
# finetune --extra-domains), PAPER_DRILLS=1 (paper samples are drills as often as the card's,
# finetune --paper-drills). FRESH="7100002:fresh 7100003:confirm": chain also runs `fresh` on
# those seeds after the evals at 32. PAPER_SETS=1: the eval also runs every set in
# the paper's protocol (same documents and questions), N_NEEDLE long-text needle prompts
# (default 36), and the base model zero-shot on the paper-protocol sets ($G/eval-zeroshot.json);
# MAX_TOKENS (default: the eval's); ZEROSHOT=0 leaves the zero-shot run out. OLD=0
# skips the previous delta's run, BASE=0 the base model's (it does not change with the delta:
# its figures stand from an earlier run).
# Runs from a copy of the repository's da_lab (cd there first); G=/tmp/g26 by default.
set -e
G=${G:-/tmp/g26}
mkdir -p "$G"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export VLLM_ENABLE_V1_MULTIPROCESSING=0
old_model() {   # the previous delta ($G/old, where `eval` keeps it) merged into $G/old-da
    python -c "from da_lab.models import smollm2 as S; print(S.build('smollm2-da', '$G/old-da', delta='$G/old/delta.safetensors'))" >> "$G/eval.log" 2>&1
}
case "$1" in
train)
    python -m da_lab.training.trainer.finetune --device cuda --seed "${SEED:-11}" \
        --init da_lab/assets/smollm2-da/delta.safetensors --lr "${LR:-8e-4}" --warmup "${WARMUP:-20}" \
        ${MIX:+--mix "$MIX"} --paper "${PAPER:-0}" ${BATCH_TOKENS:+--batch-tokens "$BATCH_TOKENS"} \
        $([ "${EXTRA:-0}" = 1 ] && echo --extra-domains) \
        $([ "${PAPER_DRILLS:-0}" = 1 ] && echo --paper-drills) \
        --time-budget-s "${BUDGET:-370}" --eval-n 96 --probe-n 32 --eval-every 120 \
        --out "$G/smollm2-da" > "$G/train.log" 2>&1
    touch "$G/train.done" ;;
prompts)
    python -m da_lab.training.eval.eval_prompts --n 500 --split train --set in-domain --by-domain \
        > "$G/prompts.jsonl"
    python -m da_lab.training.eval.eval_prompts --n 500 --split heldout --set held-out-domains \
        --by-domain >> "$G/prompts.jsonl"
    sed 's/"set": "/"set": "hand-written\//' bench/data/handwritten-prompts.jsonl \
        >> "$G/prompts.jsonl"
    if [ "${PAPER_SETS:-0}" = 1 ]; then
        python -m da_lab.training.eval.eval_prompts --n 500 --split train --set paper/in-domain \
            --by-domain --protocol paper > "$G/paper.jsonl"
        python -m da_lab.training.eval.eval_prompts --n 500 --split heldout \
            --set paper/held-out-domains --by-domain --protocol paper >> "$G/paper.jsonl"
        sed 's/"set": "/"protocol": "paper", "set": "paper\/hand-written\//' \
            bench/data/handwritten-prompts.jsonl >> "$G/paper.jsonl"
        python -m da_lab.training.eval.eval_needle --n "${N_NEEDLE:-36}" \
            | sed 's/"set": "needle"/"set": "paper\/needle"/' >> "$G/paper.jsonl"
        cat "$G/paper.jsonl" >> "$G/prompts.jsonl"
    fi
    ;;
blocks)
    # The shipped delta (MODEL: another model, TAG: its files' prefix) at each KV block size in
    # BLOCKS (default "32 16"), one engine a size, on the prompts `prompts` wrote (PROMPTS: a
    # file of them, default all of them): the paper's spans are rounded out to whole blocks.
    for bs in ${BLOCKS:-32 16}; do
        python -m da_lab.cli eval --model "${MODEL:-smollm2-da}" --prompts "${PROMPTS:-$G/prompts.jsonl}" \
            --ablations --no-base --max-tokens "${MAX_TOKENS:-128}" --wave 128 --block-size "$bs" \
            --json --out "$G/eval-${TAG:-}bs$bs.json" > /dev/null 2>> "$G/eval.log"
    done
    touch "$G/eval.done" ;;
eval)
    [ "${PROMPTS_READY:-0}" = 1 ] || bash "$0" prompts     # chain: written already
    mkdir -p "$G/old"
    cp da_lab/assets/smollm2-da/delta.safetensors "$G/old/delta.safetensors"
    cp "$G/smollm2-da/delta.safetensors" "$G/smollm2-da/training.json" da_lab/assets/smollm2-da/
    python -m da_lab.cli eval --model smollm2-da --prompts "$G/prompts.jsonl" --ablations \
        $([ "${BASE:-1}" = 0 ] && echo --no-base) \
        ${MAX_TOKENS:+--max-tokens "$MAX_TOKENS"} \
        --wave 128 --json --out "$G/eval-new.json" > /dev/null 2> "$G/eval.log"
    if [ "${PAPER_SETS:-0}" = 1 ] && [ "${ZEROSHOT:-1}" = 1 ]; then
        python -m da_lab.cli eval --model smollm2 --prompts "$G/paper.jsonl" --no-base \
            ${MAX_TOKENS:+--max-tokens "$MAX_TOKENS"} \
            --wave 128 --json --out "$G/eval-zeroshot.json" > /dev/null 2>> "$G/eval.log"
    fi
    if [ "${OLD:-1}" = 0 ]; then touch "$G/eval.done"; exit 0; fi
    old_model
    python -m da_lab.cli eval --model "$G/old-da" --prompts "$G/prompts.jsonl" --no-base \
        --wave 128 --json --out "$G/eval-old.json" > /dev/null 2>> "$G/eval.log"
    touch "$G/eval.done" ;;
chain)
    # One background job for a whole device session (the wait calls only collect), each eval
    # written as soon as it ends, most needed first (a session cut short keeps the head): a
    # continued delta (train), at 32 in both dialects, at 16 on the paper's sets, then the
    # shipped delta at 16 on the paper's sets.
    PAPER_SETS=1 bash "$0" prompts &     # CPU work, beside the GPU's training
    p=$!
    bash "$0" train
    wait "$p"
    PROMPTS_READY=1 PAPER_SETS=1 BASE=0 OLD=0 ZEROSHOT=0 MAX_TOKENS=128 bash "$0" eval
    for f in ${FRESH:-}; do            # seed:name, the new delta (now in the assets)
        FRESH_SEED=${f%%:*} FRESH_NAME=${f#*:} bash "$0" fresh
    done
    TAG=new- PROMPTS="$G/paper.jsonl" BLOCKS=16 bash "$0" blocks
    # `eval` put the new delta into the assets: the shipped one is $G/old/delta.safetensors.
    # OLD16=0 leaves it out (its figures stand from an earlier run).
    if [ "${OLD16:-1}" = 1 ]; then
        old_model
        MODEL="$G/old-da" PROMPTS="$G/paper.jsonl" BLOCKS=16 bash "$0" blocks
    fi
    touch "$G/chain.done" ;;
fresh)
    # The shipped delta on prompts no decision was made on: a fresh held-out seed
    # (FRESH_SEED, default 7100002), both dialects on held-out domains and the paper's format
    # on the training domains.
    s=${FRESH_SEED:-7100002} n=${FRESH_NAME:-fresh}
    python -m da_lab.training.eval.eval_prompts --n 500 --split heldout --seed $s \
        --set held-out-domains-$n --by-domain > "$G/$n.jsonl"
    python -m da_lab.training.eval.eval_prompts --n 500 --split heldout --seed $s \
        --set paper/held-out-domains-$n --by-domain --protocol paper >> "$G/$n.jsonl"
    python -m da_lab.training.eval.eval_prompts --n 500 --split train --seed $s \
        --set paper/in-domain-$n --by-domain --protocol paper >> "$G/$n.jsonl"
    python -m da_lab.cli eval --model smollm2-da --prompts "$G/$n.jsonl" --no-base \
        --max-tokens "${MAX_TOKENS:-128}" --wave 128 --json --out "$G/eval-$n.json" \
        > /dev/null 2>> "$G/eval.log"
    touch "$G/eval.done" ;;
*) echo "usage: $0 train|prompts|blocks|eval|chain|fresh" >&2; exit 2 ;;
esac
