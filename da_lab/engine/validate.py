"""Checks on what a user hands the Lab, before anything reaches the engine.

Each failure is a ValueError that names the field, so a notebook cell or the CLI can show one
clear line instead of wrong tokens or a stalled engine later.
"""

from __future__ import annotations

import json
from pathlib import Path

from da_lab.core.layout import DAPrompt


def model_max_positions(model: str | Path) -> int | None:
    """The model's `max_position_embeddings` from its config.json, if it says."""
    try:
        cfg = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    n = cfg.get("text_config", cfg).get("max_position_embeddings")
    return int(n) if isinstance(n, int) and n > 0 else None


def max_model_len(model: str | Path, num_blocks: int, block_size: int,
                  requested: int | None) -> int:
    """The engine's max_model_len: `requested`, or what the KV cache holds; never more than the
    model's positions (a default is clamped, an explicit value that is too large refused)."""
    limit = model_max_positions(model)
    if requested is not None:
        if requested < 1:
            raise ValueError(f"max_model_len must be at least 1, not {requested}")
        if limit is not None and requested > limit:
            raise ValueError(f"max_model_len {requested} is more than the model's "
                             f"max_position_embeddings {limit}")
        return requested
    default = (num_blocks - 1) * block_size
    return min(default, limit) if limit is not None else default


# A hybrid model's sliding-window and state groups take their blocks from the same pool as its
# global ones, and vLLM sizes each sliding group for its window plus a prefill chunk: with the
# plain default of 64 blocks it would hold 288 tokens of da-tiny-hybrid. The Lab gives a hybrid
# the context its `num_blocks` would hold for a plain model, in a pool this many times larger.
HYBRID_POOL = 8


def pool_blocks(model: str | Path, num_blocks: int, requested_len: int | None) -> int:
    """The KV blocks to ask vLLM for: `num_blocks`, or for a hybrid model whose context was
    left to the blocks (`requested_len` None), HYBRID_POOL times as many."""
    return num_blocks * HYBRID_POOL if requested_len is None and is_hybrid(model) else num_blocks


def check_prompt_type(prompt) -> None:
    """A DAPrompt or token ids; text must be encoded first (vLLM's error would come from deep
    inside it)."""
    from numbers import Integral

    if isinstance(prompt, DAPrompt):
        return
    if isinstance(prompt, str | bytes) or not hasattr(prompt, "__iter__") or \
            iter(prompt) is prompt:       # an iterator would be used up by this check
        raise TypeError(f"prompt must be a DAPrompt or a list of token ids, not "
                        f"{type(prompt).__name__}; for text use lab.encode(text)")
    bad = next((x for x in prompt if isinstance(x, bool) or not isinstance(x, Integral)), None)
    if bad is not None:
        raise TypeError(f"prompt token ids must be ints, not {type(bad).__name__} ({bad!r:.40})")


def tag_pair(pair) -> tuple[int, str]:
    """(output index, tag text) of a director tag, refused when it isn't one (1.7 is no
    index, None no tag)."""
    from numbers import Integral

    try:
        at, text = pair
    except (TypeError, ValueError):
        raise ValueError(f"tags: each tag is (output index, tag text), not {pair!r:.60}") from None
    if isinstance(at, bool) or not isinstance(at, Integral):
        raise ValueError(f"tags: output index {at!r:.40} must be a whole number")
    if not isinstance(text, str) or not text:
        raise ValueError(f"tags: the tag at output {at} must be tag text such as '<local>', "
                         f"not {text!r:.40}")
    return int(at), text


def check_prompt(prompt, block_size: int, max_model_len: int, max_tokens) -> list[int]:
    """The prompt's token ids, after checking its layout and length against the engine."""
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, not {max_tokens!r}")
    ids = list(prompt.token_ids if isinstance(prompt, DAPrompt) else prompt)
    if not ids:
        raise ValueError("prompt: no token ids")
    if isinstance(prompt, DAPrompt):
        lay = prompt.layout
        if lay.block_size != block_size:
            raise ValueError(f"prompt layout.block_size is {lay.block_size} but the engine's "
                             f"block size is {block_size}: build the prompt for {block_size} "
                             "(lab.seed_prompt() or build_prompt(block_size=...))")
        if lay.prompt_len != len(ids):
            raise ValueError(f"prompt layout.prompt_len is {lay.prompt_len} but the prompt has "
                             f"{len(ids)} token ids")
    if len(ids) + max_tokens > max_model_len:
        raise ValueError(f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) is more than "
                         f"the engine's max_model_len {max_model_len}")
    return ids


def check_tags(script: list, max_tokens: int) -> None:
    """Director tags: [(output index, token ids)], sorted. Each must start at >= 0, not overlap
    the next, and close with a token to spare (the mode changes the step after '>')."""
    for at, tag_ids in script:
        if at < 0:
            raise ValueError(f"tags: output index {at} is negative")
        if at + len(tag_ids) >= max_tokens:
            raise ValueError(f"tags: the tag at output {at} is {len(tag_ids)} tokens long and "
                             f"must close before the last of max_tokens={max_tokens} outputs")
    for (a, tag_ids), (b, _) in zip(script, script[1:], strict=False):
        if a + len(tag_ids) > b:
            raise ValueError(f"director tags overlap: the tag at output {a} is "
                             f"{len(tag_ids)} tokens long, the next starts at {b}")


def check_request_id(da_id, requests: dict) -> None:
    if not isinstance(da_id, str) or not da_id:
        raise ValueError(f"request_id must be a non-empty str, not {da_id!r}")
    r = requests.get(da_id)
    if r is not None and not r["finished"]:
        raise ValueError(f"request_id {da_id!r} is still running; abort it or pick another id")


def model_config(path: str | Path) -> dict:
    """A local model folder's config (its text config for a multimodal one)."""
    cfg_file = Path(path) / "config.json"
    if not cfg_file.exists():
        raise FileNotFoundError(f"{path}: no config.json; --model takes a local Hugging Face "
                                "model folder (nothing is downloaded)")
    cfg = json.loads(cfg_file.read_text())
    return cfg.get("text_config", cfg)


def _window_everywhere(cfg: dict) -> bool:
    """Every layer has a sliding window (Mistral-style); Qwen2 configs carry a sliding_window
    value but switch it off with use_sliding_window; layer_types name the sliding ones."""
    sw = cfg.get("sliding_window")
    if not sw or cfg.get("layer_types") or cfg.get("sliding_window_pattern"):
        return False
    if str(cfg.get("model_type", "")).startswith(("gemma2", "gemma3", "gemma4", "cohere2")):
        return False          # interleaved local/global layers by the architecture itself
    return bool(cfg.get("use_sliding_window", cfg.get("model_type") != "qwen2"))


def is_hybrid(path: str | Path) -> bool:
    """Global attention layers beside sliding-window or linear-attention ones (Gemma 3/4,
    Qwen 3.5, Qwen3-Next): DA masks the global ones only."""
    types = set(model_config(path).get("layer_types") or ())
    return bool(types - {"full_attention"}) and "full_attention" in types


def precheck_model(path: str | Path) -> None:
    """Refuse models the hook can't serve before paying for an engine start (the hook checks
    every layer again when vLLM builds the KV cache, by its real kind)."""
    cfg = model_config(path)
    name = Path(path).name
    if cfg.get("kv_lora_rank") or cfg.get("q_lora_rank"):
        raise ValueError(f"{name}: MLA attention (kv_lora_rank) is not supported by the DA hook")
    if _window_everywhere(cfg):
        raise ValueError(f"{name}: every layer has a sliding window (sliding_window="
                         f"{cfg['sliding_window']}) and none is global: DA masks global "
                         "attention layers, so there is nothing for it to mask")
    types = set(cfg.get("layer_types") or ["full_attention"])
    if "full_attention" not in types:
        raise ValueError(f"{name}: no global attention layer (layer_types {sorted(types)}): "
                         "DA masks global attention layers, so there is nothing for it to mask")
