"""Why served GLOBAL and stock streams stalled at 64k (bench/results/serve-h200-2026-12-01.md).

    python -m da_lab.bench.timing.detokenizer_stall [--out \
        bench/results/detokenizer-stall-cpu-DATE.txt]

vLLM's frontend detokenizes each request with tokenizers' DecodeStream, primed with the whole
prompt. A step whose token leaves an incomplete UTF-8 character (a random-weights model writes
many: 128 of the lab tokenizer's 1,024 tokens are lone bytes) re-decodes everything since the
last complete character, the prompt included, until one completes. This times one step of each
kind after prompts of growing length, with the lab's own tokenizer (the dummy 8B model's).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import tokenizers


def _tokenizer() -> tokenizers.Tokenizer:
    from da_lab.models.tiny import CONFIG, write_tokenizer_files

    folder = Path(tempfile.mkdtemp(prefix="da_lab_tok."))
    write_tokenizer_files(folder, CONFIG)
    return tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))


def step_ms(tok, prompt: list[int], token: int, n: int = 30) -> float:
    """Median ms of DecodeStream.step(token) repeated n times after `prompt`."""
    stream = tokenizers.decoders.DecodeStream(ids=prompt, skip_special_tokens=True)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        stream.step(tok, token)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    args = ap.parse_args()
    tok = _tokenizer()
    lone = [i for i in range(tok.get_vocab_size()) if "\ufffd" in tok.decode([i])]
    text = tok.token_to_id("Ġthe")
    rng = random.Random(0)
    lines = [f"tokenizers {tokenizers.__version__}; {len(lone)} of {tok.get_vocab_size()} "
             "tokens decode to an incomplete character alone",
             "prompt tokens | text token ms/step | incomplete-character token ms/step"]
    for n in (1024, 9600, 65536):
        prompt = [rng.randrange(300, tok.get_vocab_size()) for _ in range(n - 1)] + [text]
        lines.append(f"{n:>13} | {step_ms(tok, prompt, text):18.3f} | "
                     f"{step_ms(tok, prompt, rng.choice(lone)):.3f}")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("$ python -m da_lab.bench.timing.detokenizer_stall "
                                  f"--out {args.out}\n"
                                  + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
