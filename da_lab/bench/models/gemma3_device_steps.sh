#!/bin/bash
# The device calls of a Gemma3-DA run (issue 58), one step per call, back to back (the GPU
# machine stays warm ~30 s and keeps ignored files between calls while warm):
#   a            carry .gpu/a            vLLM 0.26's _C (Hopper) -> /tmp/site
#   b            carry .gpu/b            vLLM's Python tree, FA3, small deps; installs the lab
#   piece        carry .smol/g3/partK    one GGUF part a call (K = 1..6), kept in /tmp/g3
#   build_chain  carry .smol/g3/part7    the last part, then join + check the GGUF, build gemma3
#                and .smol/g3/site       into the cache, start `gemma3_gpu.sh chain` in the
#                                        background
#   wait_chain   (nothing)               wait up to WAIT s (default 540), send back what is done
#                                        (train.log, eval.log, the delta, training.json,
#                                        evals.tar.gz: the eval-*.json written so far);
#                                        repeat until it prints CHAIN DONE
# The parts, here: python -m da_lab.bench.models.smollm2_parts split .smol/g3 --model gemma3 \
#   --part-mb 36.2 (seven parts of 36.2 MB: each call's tree is ~27 MB of 64 MiB; a larger
#   tree needs smaller parts, and more of them: 64 MiB - tree - 1 MB each).
# Needs the hook that masks hybrid models (issue 55) for `eval` and `permute`: without it the
# DA runs are refused (the hook refuses sliding-window layers): the evals fail (eval.log says
# so), the chain still ends, and the delta and training.json come back all the same.
set -e
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
PP=/tmp/site:/tmp/gsite:/tmp/code
G=${G:-/tmp/g58}
code() {   # this checkout's code, where the daemons run from (each call's tree is a fresh copy)
  rm -rf /tmp/code && mkdir -p /tmp/code && cp -r da_lab bench widgets pyproject.toml README.md /tmp/code/
}
case "$1" in
a) python3 .gpu/a/unpack.py .gpu/a /tmp/site ;;
b) python3 .gpu/b/unpack.py .gpu/b /tmp/site
   code
   (cd /tmp/code && PYTHONPATH=/tmp/site python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3) ;;
piece) mkdir -p /tmp/g3 && cp -r .smol/g3/part* /tmp/g3/ && ls -la /tmp/g3/* ;;
build_chain)
  [ -d /tmp/code ] || code
  mkdir -p /tmp/g3 /tmp/gsite && cp -r .smol/g3/part* /tmp/g3/ && cp -r .smol/g3/site/* /tmp/gsite/
  (cd /tmp/code && PYTHONPATH=$PP python3 -m da_lab.bench.models.smollm2_parts join /tmp/g3 --model gemma3 --build)
  cd /tmp/code && PYTHONPATH=$PP G=$G setsid nohup bash da_lab/bench/models/gemma3_gpu.sh chain > /tmp/chain.out 2>&1 < /dev/null &
  sleep 30; tail -3 $G/train.log; cat /tmp/chain.out ;;
wait_chain)
  for i in $(seq 1 ${WAIT:-540}); do [ -f $G/chain.done ] && break; sleep 1; done
  tail -4 $G/train.log 2>/dev/null || true; tail -8 $G/eval.log 2>/dev/null || true
  cat /tmp/chain.out; ls -la $G
  cp $G/train.log $G/eval.log "$OUT/" 2>/dev/null || true
  if [ -f $G/train.done ]; then cp $G/gemma3-da/delta.safetensors $G/gemma3-da/training.json "$OUT/"; fi
  # at most 8 files come back: the evals travel as one archive
  (cd $G && ls eval-*.json >/dev/null 2>&1 && tar czf "$OUT/evals.tar.gz" eval-*.json) || true
  [ -f $G/chain.done ] && echo CHAIN DONE || true ;;
*) echo "usage: $0 a|b|piece|build_chain|wait_chain" >&2; exit 2 ;;
esac
