"""What `da-lab bench` measures: its models, modes and DA prompts (pure), and the local model
folders the children load. Needs neither vLLM nor torch."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

MODELS = ("tiny", "llama-8b-dummy")
MODES = ("stock", "focus", "global", "stock_kept", "local", "global_recording")
DEFAULT_MODES = ("stock", "focus", "global", "stock_kept", "local")
STOCK_MODES = ("stock", "stock_kept")
FOCUS_CHUNKS = (2, 7)           # the director writes "<focus C2,C7>"
N_CHUNKS = 16
TAGS = {"focus": "<focus C2,C7>", "local": "<local>"}

# Llama-3-8B shapes (dummy weights: nothing is downloaded; vLLM's load_format="dummy").
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
    "torch_dtype": "bfloat16", "initializer_range": 0.02,
}
LLAMA_VOCAB = 128256


def bench_layout(context: int, block_size: int, *, fraction: float = 0.15,
                 response_tokens: int = 0, n_chunks: int = N_CHUNKS):
    """The Layout of a `context`-token DA prompt whose FOCUS on C2,C7 keeps ~`fraction` of the
    blocks when `response_tokens` have been generated (the middle of the timed window).

    One head (sink) block, n_chunks chunks of whole blocks, a tail of 1..block_size tokens.
    Under FOCUS the kernel reads head + C2 + C7 + everything from the tail on (tail, response,
    the step's query block), so C2 and C7 are sized to make that `fraction` of all blocks; the
    other chunks share the rest evenly.
    """
    from da_lab.core.layout import Layout

    bs = block_size
    chunk_total = -(-context // bs) - 2
    if chunk_total < n_chunks:
        raise ValueError(f"context {context} is too short for {n_chunks} chunks of whole "
                         f"{bs}-token blocks (needs >= {(n_chunks + 2) * bs} tokens)")
    total = -(-(context + response_tokens) // bs)
    tail_and_after = total - 1 - chunk_total
    focused = round(fraction * total) - 1 - tail_and_after
    focused = max(2, min(focused, chunk_total - (n_chunks - 2)))
    rest = chunk_total - focused
    others = [rest // (n_chunks - 2) + (1 if i < rest % (n_chunks - 2) else 0)
              for i in range(n_chunks - 2)]
    sizes, it = [], iter(others)
    for cid in range(1, n_chunks + 1):
        if cid == FOCUS_CHUNKS[0]:
            sizes.append(focused // 2)
        elif cid == FOCUS_CHUNKS[1]:
            sizes.append(focused - focused // 2)
        else:
            sizes.append(next(it))
    return Layout(bs, 1, tuple(sizes), context)


def kept_fraction(layout, mode: str, seq_len: int) -> float:
    """Blocks the mask keeps / all blocks, for a decode step at `seq_len` (the mask's answer)."""
    from da_lab.core.mask import kept_blocks
    from da_lab.core.tags import Directive, parse_tag

    d = parse_tag(TAGS[mode], layout.n_chunks) if mode in TAGS else Directive()
    n = -(-seq_len // layout.block_size)
    return len(kept_blocks(d, layout, seq_len, 1)) / n


def kept_prompt_len(layout) -> int:
    """Tokens of the prompt blocks FOCUS keeps (head + C2 + C7 + tail): stock_kept's prompt."""
    bs = layout.block_size
    focused = sum(len(layout.chunk_range(c)) for c in FOCUS_CHUNKS)
    return (layout.head_blocks + focused) * bs + (layout.prompt_len - layout.tail_start * bs)


def bench_home() -> Path:
    from da_lab.engine.cache import lab_home

    return lab_home() / "bench_models"


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)


def prepare_model(name: str, max_len: int, vocab: int = LLAMA_VOCAB) -> Path:
    """A local model folder for `name` whose config allows `max_len` positions.

    tiny: the lab's embedded model (weights linked, not copied) with max_position_embeddings
    raised, since the bench goes past its 8k. llama-8b-dummy: a config.json with Llama-3-8B
    shapes and the lab's tokenizer files; the engine loads it with load_format="dummy".
    """
    from da_lab.engine.models import build_tiny_model

    tiny = build_tiny_model()
    positions = max(131072, 1 << math.ceil(math.log2(max(max_len, 2))))
    folder = bench_home() / name
    folder.mkdir(parents=True, exist_ok=True)
    tok_files = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
    for f in tok_files:
        _write_if_changed(folder / f, (tiny / f).read_text())
    cfg = json.loads((tiny / "config.json").read_text())
    if name == "tiny":
        cfg["max_position_embeddings"] = positions
        src = {f.name for f in tiny.iterdir() if f.suffix == ".safetensors"}
        for f in folder.iterdir():          # weights of an earlier default tiny model
            if f.suffix == ".safetensors" and (f.name not in src or f.resolve() !=
                                               (tiny / f.name).resolve()):
                f.unlink()
        for n in sorted(src):
            link = folder / n
            if not link.exists():
                try:
                    link.symlink_to(tiny / n)
                except OSError:
                    shutil.copyfile(tiny / n, link)
        (folder / "SOURCE").write_text(str(tiny) + "\n")
    elif name == "llama-8b-dummy":
        special = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
        cfg = dict(LLAMA_8B, vocab_size=vocab, max_position_embeddings=positions, **special)
    else:
        raise ValueError(f"unknown bench model {name!r} (known: {', '.join(MODELS)})")
    _write_if_changed(folder / "config.json", json.dumps(cfg, indent=2, sort_keys=True))
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    if tc.get("model_max_length") != positions:
        tc["model_max_length"] = positions
        _write_if_changed(folder / "tokenizer_config.json", json.dumps(tc, indent=2))
    return folder
