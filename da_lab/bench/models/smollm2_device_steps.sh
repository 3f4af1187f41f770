#!/bin/bash
# The device calls of a SmolLM2-DA run, one step per call, back to back (the GPU machine stays
# warm ~30 s). docs/models.md, "How it ran on the GPU machine".
#   2026-12-06, training: piece (carry .smol/p1), piece (.smol/p2), build (.smol/p3: join the
#     xz'd GGUF, build the base, start training), a (.gpu/a), b (.gpu/b), wait_train (then
#     starts the eval), wait_eval.
#   2026-12-07, the shipped delta at KV block sizes 32 and 16 on the paper's prompts: a, b
#     (ORACLE=1 also runs the GPU oracle), piece, piece, build_blocks (join, build, start
#     `prompts` + `blocks`), wait_eval.
#   2026-12-07, a continued delta, its evals and the shipped delta at 16 in one background
#     job: a, b, piece, piece, build_chain (join, build, start `smollm2_gpu.sh chain`), then
#     wait_chain until it says CHAIN DONE.
#   2026-12-07 (fourth session), the same with the training-only domains: build_chain with
#     EXTRA=1 OLD16=0; then the shipped delta on fresh-seed prompts: a, b, piece, piece,
#     build_fresh (join, build, start `smollm2_gpu.sh fresh`), wait_chain.
#   2026-12-07 (fifth session), paper drills and both fresh seeds in the chain: build_chain
#     with PAPER_DRILLS=1 FRESH="7100002:fresh 7100003:confirm", then wait_chain.
# The pieces: `python -m da_lab.bench.models.smollm2_parts split .smol/whole --part-mb 200`, `xz -6`
# its part, `split -b 30160000` into .smol/p1..p3 (p3 also holds the manifest and site/).
set -e
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
PP=/tmp/site:/tmp/gsite:/tmp/code
code() {   # this checkout's code, where the daemons run from (each call's tree is a fresh copy)
  rm -rf /tmp/code && mkdir -p /tmp/code && cp -r da_lab bench widgets pyproject.toml README.md /tmp/code/
}
base() {   # the last piece: join the xz'd GGUF and build the base model into the cache
  mkdir -p /tmp/x && cp .smol/p3/piece.* /tmp/x/ && ls -la /tmp/x
  mkdir -p /tmp/parts/part1 /tmp/gsite && cp -r .smol/p3/site/* /tmp/gsite/ && cp .smol/p3/manifest.json /tmp/parts/part1/
  cat /tmp/x/piece.aa /tmp/x/piece.ab /tmp/x/piece.ac | python3 -c "import lzma,sys,shutil; shutil.copyfileobj(lzma.open(sys.stdin.buffer), open('/tmp/parts/part1/gguf.part1','wb'))"
  (cd /tmp/code && PYTHONPATH=$PP python3 -m da_lab.bench.models.smollm2_parts join /tmp/parts --build)
}
case "$1" in
piece) mkdir -p /tmp/x && cp .smol/p*/piece.* /tmp/x/ && ls -la /tmp/x ;;
build)
  code; base
  cd /tmp/code && PYTHONPATH=$PP SEED=23 LR=4e-4 PAPER=0.5 BUDGET=${BUDGET:-700} BATCH_TOKENS=${BATCH_TOKENS:-32768} G=/tmp/g26 setsid nohup bash da_lab/bench/models/smollm2_gpu.sh train > /tmp/train.out 2>&1 < /dev/null &
  sleep 25; tail -5 /tmp/g26/train.log; cat /tmp/train.out ;;
build_blocks)
  base
  cd /tmp/code && PYTHONPATH=$PP PAPER_SETS=1 PROMPTS=/tmp/g26/paper.jsonl G=/tmp/g26 setsid nohup bash -c "bash da_lab/bench/models/smollm2_gpu.sh prompts && bash da_lab/bench/models/smollm2_gpu.sh blocks" > /tmp/eval.out 2>&1 < /dev/null &
  sleep 20; cat /tmp/eval.out; tail -3 /tmp/g26/eval.log || true ;;
build_chain)
  code; base
  cd /tmp/code && PYTHONPATH=$PP SEED=${SEED:-29} LR=${LR:-3e-4} PAPER=${PAPER:-0.6} BUDGET=${BUDGET:-400} BATCH_TOKENS=${BATCH_TOKENS:-32768} EXTRA=${EXTRA:-0} PAPER_DRILLS=${PAPER_DRILLS:-0} FRESH=${FRESH:-} OLD16=${OLD16:-1} G=/tmp/g26 setsid nohup bash da_lab/bench/models/smollm2_gpu.sh chain > /tmp/chain.out 2>&1 < /dev/null &
  sleep 25; tail -3 /tmp/g26/train.log; cat /tmp/chain.out ;;
build_fresh)
  code; base
  cd /tmp/code && PYTHONPATH=$PP G=/tmp/g26 setsid nohup bash -c "bash da_lab/bench/models/smollm2_gpu.sh fresh; touch /tmp/g26/chain.done" > /tmp/chain.out 2>&1 < /dev/null &
  sleep 20; cat /tmp/chain.out; ls -la /tmp/g26 ;;
wait_chain)
  # Waits up to WAIT seconds for the job, then sends back what it has so far (gzipped evals).
  for i in $(seq 1 ${WAIT:-540}); do [ -f /tmp/g26/chain.done ] && break; sleep 1; done
  # (`|| true`: a job without training, build_fresh, has no train.log, and set -e would stop here)
  tail -4 /tmp/g26/train.log 2>/dev/null || true; tail -8 /tmp/g26/eval.log 2>/dev/null || true
  cat /tmp/chain.out
  ls -la /tmp/g26
  cp /tmp/g26/train.log /tmp/g26/eval.log "$OUT/" 2>/dev/null || true
  if [ -f /tmp/g26/train.done ]; then cp /tmp/g26/smollm2-da/delta.safetensors /tmp/g26/smollm2-da/training.json "$OUT/"; fi
  for f in /tmp/g26/eval-*.json; do [ -f "$f" ] && gzip -c "$f" > "$OUT/$(basename "$f").gz"; done
  [ -f /tmp/g26/chain.done ] && echo CHAIN DONE || true ;;
a) python3 .gpu/a/unpack.py .gpu/a /tmp/site; tail -2 /tmp/g26/train.log 2>/dev/null || true ;;
b) python3 .gpu/b/unpack.py .gpu/b /tmp/site
   [ -d /tmp/code ] || code
   (cd /tmp/code && PYTHONPATH=/tmp/site python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3)
   if [ "${ORACLE:-0}" = 1 ]; then
     PYTHONPATH=/tmp/site:/tmp/code python3 -m da_lab.checks.gpu_tests --out "$OUT/gpu-tests.json" --raw "$OUT/gpu-raw" --timeout 300 2>&1 | tail -15
   fi
   tail -3 /tmp/g26/train.log 2>/dev/null || true ;;
wait_train)
  for i in $(seq 1 ${WAIT:-560}); do [ -f /tmp/g26/train.done ] && break; sleep 1; done
  tail -25 /tmp/g26/train.log; cp /tmp/g26/train.log "$OUT/" || true
  [ -f /tmp/g26/train.done ] || { echo "training not done"; exit 3; }
  mkdir -p "$OUT/smollm2-da" && cp /tmp/g26/smollm2-da/* "$OUT/smollm2-da/"
  cd /tmp/code && PYTHONPATH=$PP PAPER_SETS=1 BASE=0 OLD=0 ZEROSHOT=0 MAX_TOKENS=128 G=/tmp/g26 setsid nohup bash da_lab/bench/models/smollm2_gpu.sh eval > /tmp/eval.out 2>&1 < /dev/null &
  sleep 5; echo eval started ;;
wait_eval)
  for i in $(seq 1 ${WAIT:-560}); do [ -f /tmp/g26/eval.done ] && break; sleep 1; done
  tail -20 /tmp/g26/eval.log; cat /tmp/eval.out
  cp /tmp/g26/eval.log /tmp/g26/eval-*.json "$OUT/" || true ;;
*) echo "usage: $0 piece|build|build_blocks|build_chain|build_fresh|a|b|wait_train|wait_eval|wait_chain" >&2; exit 2 ;;
esac
