#!/usr/bin/env bash
# DA inside `vllm serve` on the H200: `vllm bench serve` against stock vLLM and against DA FOCUS
# (the director writes <focus C2,C7> at output 0 of every request), Llama-3-8B-shaped dummy
# weights, random prompts of INPUT_LEN tokens, CONCURRENCY requests at a time. Same server
# options for both; the stock server loads no plugin (VLLM_PLUGINS=none).
#
# On the GPU machine, after unpacking the vLLM bundles into /tmp/site (../shared/gpu/README.md):
#   bash tools/serve_bench_gpu.sh OUT_DIR [INPUT_LEN=65536] [OUTPUT_LEN=512] [PROMPTS=8] \
#        [CONCURRENCY=8] [MODES="stock focus"]
# Writes OUT_DIR/{bench,server}-MODE.* (bench JSON: vLLM's own result file), OUT_DIR/da-*.txt
# (the DA server's /metrics lines and /da/status). MODES may also name "global" (the layout
# alone, no tag: DA's overhead).
set -euo pipefail
OUT=${1:?usage: serve_bench_gpu.sh OUT_DIR [INPUT_LEN] [OUTPUT_LEN] [PROMPTS] [CONCURRENCY] [MODES]}
IN=${2:-65536}; OUTLEN=${3:-512}; N=${4:-8}; C=${5:-8}; MODES=${6:-stock focus}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 \
       VLLM_USE_FLASHINFER_SAMPLER=0
# The entry points (vllm.general_plugins, vllm.endpoint_plugins) live in da_lab's metadata.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || \
    python3 -m pip install --no-deps --no-build-isolation -e .
MODEL=$(python3 -c "from da_lab.bench.plan import prepare_model; print(prepare_model('llama-8b-dummy', 131072))")
MAXLEN=$(( (IN + OUTLEN + 32 + 31) / 32 * 32 ))
PORT=8000
SERVE=(python3 -m vllm.entrypoints.openai.api_server --model "$MODEL" --load-format dummy
       --block-size 32 --max-model-len "$MAXLEN" --max-num-seqs "$C" --no-enable-prefix-caching
       --disable-cascade-attn --gpu-memory-utilization 0.9 --host 127.0.0.1 --port "$PORT")
BENCH=(python3 -m vllm.entrypoints.cli.main bench serve --backend vllm
       --base-url "http://127.0.0.1:$PORT" --model "$MODEL" --tokenizer "$MODEL"
       --dataset-name random --random-input-len "$IN" --random-output-len "$OUTLEN"
       --random-range-ratio 0 --num-prompts "$N" --max-concurrency "$C" --ignore-eos --seed 0
       --percentile-metrics ttft,tpot,itl,e2el --save-result --result-dir "$OUT")

wait_up() {   # $1: server pid
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0
        kill -0 "$1" 2>/dev/null || return 1
        sleep 1
    done
    return 1
}

for mode in $MODES; do
    extra=()
    if [ "$mode" = stock ]; then
        env=(VLLM_PLUGINS=none)
    else
        env=(VLLM_PLUGINS=da_lab DA_LAB_SERVE=1)
        extra=(--extra-body "$(python3 -m da_lab.serve.bench --input-len "$IN" \
                               --output-len "$OUTLEN" --mode "$mode")")
    fi
    t0=$(date +%s)
    env "${env[@]}" "${SERVE[@]}" >"$OUT/server-$mode.log" 2>&1 &
    pid=$!
    if ! wait_up $pid; then
        echo "$mode: the server did not start; see $OUT/server-$mode.log"; tail -30 "$OUT/server-$mode.log"
        kill $pid 2>/dev/null || true; exit 1
    fi
    echo "$mode: server up in $(( $(date +%s) - t0 )) s"
    "${BENCH[@]}" "${extra[@]}" --result-filename "bench-$mode.json" 2>&1 | tee "$OUT/bench-$mode.txt" \
        | grep -E "Successful|Failed|throughput|TPOT|ITL|TTFT" || true
    if [ "$mode" != stock ]; then
        curl -s "http://127.0.0.1:$PORT/metrics" | grep '^da_lab:' >"$OUT/da-metrics-$mode.txt" || true
        curl -s "http://127.0.0.1:$PORT/da/status" >"$OUT/da-status-$mode.txt" || true
        grep -E 'blocks_(read|in_row)_total|mode_switches_total\{mode="focus"|requests_total|rejected' \
            "$OUT/da-metrics-$mode.txt" || true
    fi
    kill -TERM $pid; wait $pid || true
done
