"""Where RSS goes over many requests of varied prompt shapes (issue 23): a Lab with DA requests
(half of them with a `<local>` tag) or plain ones over 40 prompt shapes (1-12 chunks, 2-3 blocks
a chunk, heads of different lengths). Every 500 requests: RSS, RSS after glibc's malloc_trim(0),
and the number of objects the garbage collector tracks.

    PYTHONPATH=. python -m da_lab.bench.reliability.rss_varied {da,plain} N

Prints one tuple per 500 requests: (requests, RSS MB, RSS MB after malloc_trim, gc objects),
then which object types grew after request 500.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import os
import random
import sys

from da_lab.engine.env import LOG_TO_STDERR, apply_env

apply_env(LOG_TO_STDERR)          # before vLLM is imported
os.environ.setdefault("DA_LAB_MODEL", "da-tiny-v1")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def prompts(lab, rng: random.Random, n: int = 40) -> list:
    from da_lab.core.layout import build_prompt, seed_texts

    out = []
    for k in range(n):
        head, chunks, tail = seed_texts(rng.randint(1, 12))
        out.append(build_prompt(lab.encode, f"Variant {k} " * rng.randint(1, 20) + head, chunks,
                                tail, filler_id=lab.encode("\n")[0],
                                bos_id=lab.tokenizer.bos_token_id,
                                chunk_blocks=rng.randint(2, 3)))
    return out


def main(mode: str, n: int) -> None:
    from da_lab.engine.lab import Lab
    from da_lab.models.tiny import build_tiny_model

    lab = Lab(build_tiny_model())
    rng = random.Random(0)
    shapes = prompts(lab, rng)
    libc = ctypes.CDLL("libc.so.6")
    before = None
    for i in range(n):
        p = rng.choice(shapes)
        if mode == "da":     # a tag of 3 tokens at output 1 needs at least 5 outputs
            lab.add_request(p, tags=[(1, "<local>")] if i % 2 else [],
                            max_tokens=rng.randint(6, 10))
        else:
            lab.add_request(p.token_ids, max_tokens=rng.randint(3, 8))
        if i % 8 == 7:
            lab.run()
        if i == 500:
            gc.collect()
            before = collections.Counter(type(o).__name__ for o in gc.get_objects())
        if i % 500 == 499:
            lab.run()
            gc.collect()
            r = rss_mb()
            libc.malloc_trim(0)
            print((i + 1, round(r, 1), round(rss_mb(), 1), len(gc.get_objects())), flush=True)
    gc.collect()
    after = collections.Counter(type(o).__name__ for o in gc.get_objects())
    if before is not None:
        print("object growth after request 500:", (after - before).most_common(12))
    lab.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
