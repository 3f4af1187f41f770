"""What `da-lab bench` measures: its models, modes and DA prompts (pure). Needs neither vLLM
nor torch."""

from __future__ import annotations

# The model folders the children load (built locally: models/dummy.py).
from da_lab.models.dummy import (  # noqa: F401 - re-exported for da-lab bench
    LLAMA_8B,
    LLAMA_VOCAB,
    bench_home,
    prepare_model,
)

# Hybrid models (issue 55): the paper's two, shaped from public figures (models/hybrid_dummy.py),
# and tiny-hybrid (da-tiny-hybrid, Gemma-3-shaped) for the CPU.
HYBRID_MODELS = ("gemma4-31b-dummy", "qwen36-27b-dummy", "tiny-hybrid")
MODELS = ("tiny", "llama-8b-dummy", *HYBRID_MODELS)
MODES = ("stock", "focus", "global", "stock_kept", "local", "global_recording", "focus_paper",
         "global_grouped", "focus_grouped", "stock_kept_pairs")
DEFAULT_MODES = ("stock", "focus", "global", "stock_kept", "local")
STOCK_MODES = ("stock", "stock_kept", "stock_kept_pairs")
# The grouped read (issue 59, hook/grouped.py): the mode's rows and the flag that groups them.
# The engine runs PIECEWISE CUDA graphs (attention outside the graphs) in these modes.
GROUPED = {"global_grouped": "all", "focus_grouped": "focus"}
# What each mode does to the requests (tags, prompts) when it is a variant of another.
BASE = {"global_grouped": "global", "focus_grouped": "focus", "global_recording": "global",
        "stock_kept_pairs": "stock_kept"}


def base_mode(mode: str) -> str:
    return BASE.get(mode, mode)


FOCUS_CHUNKS = (2, 7)           # the director writes "<focus C2,C7>"
N_CHUNKS = 16
TAGS = {"focus": "<focus C2,C7>", "local": "<local>", "focus_paper": "<focus C2,C7>"}
# focus_paper: FOCUS at the paper's per-step attention ratio, ~0.5 of vanilla's (its §5.2),
# whatever --focus-fraction says (which `focus` follows: 0.12 is the paper's FOCUS steps, §6.1).
FOCUS_FRACTIONS = {"focus_paper": 0.5}


# Models the children load with load_format="dummy" (a config.json only; vLLM makes weights).
DUMMY_MODELS = ("llama-8b-dummy", "gemma4-31b-dummy", "qwen36-27b-dummy")


def model_fields(model: str, path, block_size: int) -> dict:
    """A child spec's per-model fields: load format, the engine's and the layout's block
    sizes, the vLLM arguments a hybrid config needs, its blocks outside the global groups."""
    import json
    from pathlib import Path

    from da_lab.engine.validate import is_hybrid
    from da_lab.models.hybrid_dummy import engine_kwargs

    cfg = json.loads((Path(path) / "config.json").read_text())
    engine, layout = block_sizes(cfg, block_size)
    kwargs = engine_kwargs(cfg)
    if is_hybrid(path):
        # The hook edits a hybrid model's global rows by copy, read where attention runs
        # outside CUDA graphs (hook/runners/common.check_groups): every mode of the model,
        # stock too, runs PIECEWISE graphs, so the rows compare like with like.
        kwargs.setdefault("compilation_config", {"cudagraph_mode": "PIECEWISE"})
    return {"load_format": "dummy" if model in DUMMY_MODELS else "auto", "block_size": engine,
            "layout_block_size": layout, "engine_kwargs": kwargs,
            "local_blocks": local_blocks(cfg, engine)}


def focus_fraction(mode: str, default: float) -> float:
    return FOCUS_FRACTIONS.get(mode, default)


def block_sizes(cfg: dict, block_size: int) -> tuple[int, int]:
    """(the engine's --block-size, the global layers' block size: the DA layout's unit).
    GDN hybrids: vLLM raises the block size until one attention page holds one GDN state, so
    the bench asks for that size itself; Gemma 4: the global group's blocks are larger than
    the sliding groups' (models/hybrid_dummy.attention_block_size)."""
    from da_lab.models.hybrid_dummy import attention_block_size, text_config

    t = text_config(cfg)
    engine = block_size
    if "linear_attention" in (t.get("layer_types") or []):
        engine = attention_block_size(cfg, block_size)
    return engine, attention_block_size(cfg, engine)


def local_blocks(cfg: dict, block_size: int) -> int:
    """KV blocks a request holds in the non-global groups (vLLM gives each layer kind its own
    groups of `min(layers per kind)` layers): a sliding group its window and a block either
    side, a GDN group its state's block(s)."""
    from da_lab.models.hybrid_dummy import text_config

    t = text_config(cfg)
    kinds = t.get("layer_types") or []
    counts = {k: kinds.count(k) for k in set(kinds)}
    if len(counts) < 2:
        return 0
    size = min(counts.values())
    if max(counts.values()) < 1.5 * size:       # vLLM pads to the largest count then
        size = max(counts.values())
    n = 0
    for kind, c in counts.items():
        groups = -(-c // size)
        if kind == "sliding_attention":
            n += groups * (-(-t["sliding_window"] // block_size) + 2)
        elif kind == "linear_attention":
            n += groups * 2
    return n


def bench_layout(context: int, block_size: int, *, fraction: float = 0.15,
                 response_tokens: int = 0, n_chunks: int = N_CHUNKS, spans: bool = False):
    """The Layout of a `context`-token DA prompt whose FOCUS on C2,C7 keeps ~`fraction` of the
    blocks when `response_tokens` have been generated (the middle of the timed window).

    One scaffold-head block (with the sink), n_chunks chunks of whole blocks, a tail of
    1..block_size tokens. `spans`: the paper's unpadded chunks instead, every boundary between
    two chunks (and the first chunk's start) moved half a block off the grid, so each chunk
    shares its edge blocks and FOCUS keeps them whole (rounded outward).
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
    layout = Layout(bs, 1, tuple(sizes), context)
    if not spans:
        return layout
    edges = [a for a, _ in layout.chunk_spans] + [layout.chunk_spans[-1][1]]
    edges = [e + bs // 2 for e in edges[:-1]] + edges[-1:]
    return Layout.from_spans(bs, list(zip(edges, edges[1:], strict=False)), context)


def kept_fraction(layout, mode: str, seq_len: int, tag: str | None = None) -> float:
    """Blocks the mask keeps / all blocks, for a decode step at `seq_len` (the mask's answer);
    `tag`: the request's own tag instead of the mode's."""
    from da_lab.core.mask import kept_blocks
    from da_lab.core.tags import Directive, parse_tag

    tag = tag or TAGS.get(mode)
    d = parse_tag(tag, layout.n_chunks) if tag else Directive()
    n = -(-seq_len // layout.block_size)
    return len(kept_blocks(d, layout, seq_len, 1)) / n


def kept_prompt_len(layout) -> int:
    """Tokens of the prompt blocks FOCUS keeps (head + C2 + C7 + tail, rounded outward):
    stock_kept's prompt. The prompt's last block is kept, and partial."""
    from da_lab.core.mask import kept_blocks
    from da_lab.core.tags import parse_tag

    bs, n = layout.block_size, layout.prompt_len
    kept = kept_blocks(parse_tag(TAGS["focus"], layout.n_chunks), layout, n, 1)
    return (len(kept) - 1) * bs + n - (-(-n // bs) - 1) * bs
