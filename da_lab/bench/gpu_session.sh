#!/bin/bash
# One device session's GPU work as a background chain on the GPU machine (it stays warm ~30 s
# between calls, so the chain outlives each call), polled by `wait` calls back to back.
#   run(carry=[".gpu/a"], "python3 .gpu/a/unpack.py .gpu/a /tmp/site")
#   run(carry=[".gpu/b"], "python3 .gpu/b/unpack.py .gpu/b /tmp/site && bash da_lab/bench/gpu_session.sh start")
#   run("bash da_lab/bench/gpu_session.sh wait")        # again until it prints CHAIN DONE
# STEPS (default below) names the chain's steps, run in order: a step that fails is logged and
# the chain goes on. Each step's JSON and log land in /tmp/g and come back in $OUT/results.tgz.
set -e
export PYTHONPATH=/tmp/site:/tmp/code HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 \
       VLLM_USE_FLASHINFER_SAMPLER=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
G=/tmp/g
STEPS=${STEPS:-"tests gemma4 grouped_bench qwen36 bench64k"}

big_batch() {  # 64k x 8 fits an H200, not an H100 (80 GB): 64k x 4 there
  python3 -c "import torch; print(8 if torch.cuda.get_device_properties(0).total_memory > 100e9 else 4)"
}

step() {
  local name=$1; shift
  echo "[$(date +%T)] $name: $*" >> $G/chain.log
  if (cd /tmp/code && timeout ${STEP_TIMEOUT:-900} "$@") > $G/$name.log 2>&1; then
    echo "[$(date +%T)] $name ok" >> $G/chain.log
  else
    echo "[$(date +%T)] $name FAILED ($?)" >> $G/chain.log
  fi
}

run_step() {
  local s=$1
  case $s in
  tests)         # the three correctness runs side by side (small models: they share the GPU)
                 for t in gpu_tests hybrid_tests grouped_tests; do run_step $t & done
                 wait ;;
  gpu_tests)     step gpu_tests python3 -m da_lab.checks.gpu_tests --out $G/gpu-tests.json \
                   --raw $G/gpu-raw --timeout 300 ;;
  hybrid_tests)  step hybrid_tests python3 -m da_lab.checks.gpu_tests \
                   --models gemma4-dummy,qwen35-dummy --out $G/gpu-tests-hybrid.json \
                   --raw $G/gpu-raw-hybrid --timeout 400 ;;
  grouped_tests) step grouped_tests python3 -m da_lab.checks.gpu_tests \
                   --models tiny,llama-1b-dummy --runners v2,v1 --graphs eager,piecewise \
                   --grouped-read all --out $G/gpu-tests-grouped.json --raw $G/gpu-raw-grouped \
                   --timeout 400 ;;
  grouped_bench) local b=16,64; [ "$(big_batch)" = 4 ] && b=16,32   # 64 x 64k: H200 only
                 step grouped_bench python3 -m da_lab.cli bench --models llama-8b-dummy \
                   --contexts 65536 --batches $b --shared 64 \
                   --modes focus,focus_grouped,stock_kept,stock_kept_pairs --decode-steps 32 \
                   --repeats 2 --profile-steps 2 --budget-seconds 560 --no-plot \
                   --out $G/bench-shared-grouped-64k-focus.json ;;
  bench64k)      step bench64k python3 -m da_lab.cli bench --models llama-8b-dummy \
                   --contexts 65536 --batches "$(big_batch)" --modes stock,global,focus,stock_kept \
                   --budget-seconds 560 --out $G/bench-64k.json ;;
  gemma4|qwen36) local m=gemma4-31b-dummy; [ $s = qwen36 ] && m=qwen36-27b-dummy
                 step $s python3 -m da_lab.cli bench --models $m \
                   --modes stock,global,focus_paper,focus,local --focus-fraction 0.12 \
                   --contexts 32768 --batches 1,8 --decode-steps 32 --repeats 2 \
                   --profile-steps 2 --max-seconds 150 --budget-seconds 560 --overlap-import \
                   --out $G/bench-hybrid-$s.json ;;
  *) echo "unknown step $s" >> $G/chain.log ;;
  esac
}

chain() {
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > $G/device.txt
  for s in $STEPS; do run_step $s; done
  touch $G/chain.done
}

case "$1" in
start)
  rm -rf /tmp/code $G && mkdir -p /tmp/code $G
  cp -r da_lab widgets tools tests pyproject.toml README.md /tmp/code/
  (cd /tmp/code && python3 -m pip install -q --no-deps --no-build-isolation --no-compile -e . \
     > $G/install.log 2>&1) || { cat $G/install.log; exit 1; }
  STEPS="$STEPS" setsid nohup bash "$0" chain > $G/chain.out 2>&1 < /dev/null &
  sleep 20; cat $G/chain.log $G/device.txt 2>/dev/null || true ;;
chain) chain ;;
wait)
  for i in $(seq 1 ${WAIT:-540}); do [ -f $G/chain.done ] && break; sleep 1; done
  cat $G/chain.log; tail -3 $G/*.log 2>/dev/null | tail -40
  # One file back (the device returns at most 8): every result and log so far.
  (cd $G && tar czf "$OUT/results.tgz" --exclude='*.safetensors' . 2>/dev/null) || true
  [ -f $G/chain.done ] && echo CHAIN DONE || true ;;
*) echo "usage: $0 start|wait"; exit 2 ;;
esac
