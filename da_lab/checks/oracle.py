"""The oracle: a Hugging Face transformers forward of the same weights with the KV blocks the
hook hid masked out explicitly, position by position.

Tokens generated under a mask wrote K/V computed with that mask, so after `<global>` the engine
matches a reference that replays each position's mask (the hook's mask history), not the
unmasked run. One forward over prompt + response with a per-row mask reproduces exactly that:
row p's hidden states at every layer see only the keys the engine let position p see.

Hybrid models (sliding-window or linear-attention layers beside a few global ones: Gemma 3/4,
Qwen 3.5/3.6) are masked as the paper masks them (its §2.3, §B): in the global (full-attention)
layers only. Their reference runs an attention function registered with transformers
(`HYBRID_ATTN`) that reads each layer's kind from `config.layer_types` and adds the DA mask in
full-attention layers alone; sliding layers keep the sliding-window causal mask transformers
builds for them, linear-attention (Gated DeltaNet) layers never call an attention function.
A plain full-attention model (the Llamas) keeps the explicit 4D mask of before, unchanged.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

HYBRID_ATTN = "da_lab_hybrid"     # the attention function (and mask factory) of hybrid models
FULL = "full_attention"
_DA_MASK: list = [None]           # the additive DA mask of the forward in progress (hybrid)


@dataclass
class OracleResult:
    engine_tokens: list[int]
    forced: set[int]                # output indices the director wrote (not the model's choice)
    masked_tokens: list[int]        # reference greedy argmax with the hook's mask history
    unmasked_tokens: list[int]      # reference greedy argmax with plain causal attention
    top2_gap: list[float]           # masked reference: logit gap between best and second best

    def _diff(self, ref: list[int]) -> list[int]:
        return [i for i, (a, b) in enumerate(zip(self.engine_tokens, ref, strict=False))
                if a != b and i not in self.forced]

    @property
    def compared(self) -> int:
        return len(self.engine_tokens) - len(self.forced)

    @property
    def mismatches_masked(self) -> list[int]:
        """Output indices where the engine's own choice differs from the masked reference."""
        return self._diff(self.masked_tokens)

    @property
    def mismatches_unmasked(self) -> list[int]:
        return self._diff(self.unmasked_tokens)


def mask_matrix(n_tokens: int, history: list[tuple[int, int, tuple[int, ...] | None]],
                block_size: int) -> np.ndarray:
    """Boolean (n_tokens x n_tokens) 'row may attend to column' from the hook's history.

    Each history entry says: query positions [start, stop) saw the logical blocks `kept`
    (None = all). Positions not covered (never run as queries) keep plain causal rows.
    """
    allow = np.tril(np.ones((n_tokens, n_tokens), dtype=bool))
    block_of = np.arange(n_tokens) // block_size
    for start, stop, kept in history:
        if kept is None:
            continue
        visible = np.isin(block_of, np.asarray(kept))
        for p in range(start, min(stop, n_tokens)):
            allow[p] &= visible
    return allow


def layer_kinds(config) -> list[str]:
    """Each decoder layer's kind ("full_attention", "sliding_attention", "linear_attention",
    ...) from a transformers config (its text config for a multimodal one); all
    "full_attention" for a model that names none (Llama)."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    kinds = getattr(cfg, "layer_types", None)
    return list(kinds) if kinds else [FULL] * cfg.num_hidden_layers


def is_hybrid(config) -> bool:
    return any(k != FULL for k in layer_kinds(config))


def _layer_kind(module) -> str:
    """The kind of the layer an attention call comes from: its config's layer_types at its
    layer_idx; else a sliding layer says so (is_sliding / sliding_window)."""
    cfg, idx = getattr(module, "config", None), getattr(module, "layer_idx", None)
    if cfg is not None and idx is not None:
        return layer_kinds(cfg)[idx]
    if getattr(module, "is_sliding", False) or getattr(module, "sliding_window", None):
        return "sliding_attention"
    return FULL


def _hybrid_attention(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention, with the DA mask added in full-attention layers only."""
    import torch

    eager = sys.modules[type(module).__module__].eager_attention_forward
    da = _DA_MASK[0]
    if da is not None and _layer_kind(module) == FULL:
        da = da[:, :, :, : key.shape[-2]].to(query.device)
        attention_mask = da if attention_mask is None else torch.minimum(
            attention_mask[:, :, :, : key.shape[-2]], da)
    return eager(module, query, key, value, attention_mask, **kwargs)


def register_hybrid() -> None:
    """Register `HYBRID_ATTN` with transformers (idempotent): the attention function above and
    eager's mask factory, so transformers builds each layer kind's own causal mask for it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(HYBRID_ATTN, _hybrid_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(HYBRID_ATTN, eager_mask)


def load_reference(model_path: str, device: str = "cpu", dtype: str = "float32"):
    """The same weights with eager attention (explicit 4D masks), on `device`, in `dtype`:
    float32 (the exact reference) or bfloat16 (the engine's own precision on a GPU, so a
    bf16 engine's near-ties can be judged against a same-precision replay). A hybrid model
    gets `HYBRID_ATTN` (eager, the DA mask in its global layers only)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    attn = "eager"
    if is_hybrid(AutoConfig.from_pretrained(model_path)):
        register_hybrid()
        attn = HYBRID_ATTN
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype),
                                                 attn_implementation=attn)
    return model.to(device).eval()


def disagreement_gaps(engine_tokens: list[int], ref_tokens: list[int], gaps: list[float],
                      forced: set[int] = frozenset()) -> list[float]:
    """The reference's top-2 gap at every position the engine chose differently (forced
    positions left out): how close to a tie each disagreement was."""
    return [float(gaps[i]) for i, (a, b) in enumerate(zip(engine_tokens, ref_tokens, strict=False))
            if a != b and i not in forced]


def forward_logits(model, ids, add):
    """float32 logits on the CPU of one forward over `ids` with the additive mask `add`: as
    the attention mask of every layer (full-attention models), or in the global layers only
    (hybrid models, through `HYBRID_ATTN`; every other layer keeps its own mask)."""
    import torch

    with torch.no_grad():
        if model.config._attn_implementation != HYBRID_ATTN:
            return model(input_ids=ids, attention_mask=add).logits[0].float().cpu()
        _DA_MASK[0] = add
        try:
            return model(input_ids=ids).logits[0].float().cpu()
        finally:
            _DA_MASK[0] = None


def check(model, prompt_ids: list[int], output_ids: list[int],
          history: list[tuple[int, int, tuple[int, ...] | None]], block_size: int,
          forced: set[int] = frozenset()) -> OracleResult:
    """Replay prompt + output[:-1] through the reference with and without the mask history.

    Director-forced positions are fed like any token but not compared: the model did not
    choose them."""
    import torch

    seq = list(prompt_ids) + list(output_ids[:-1])
    n = len(seq)
    p0 = next(model.parameters())
    dev, dtype = p0.device, p0.dtype
    ids = torch.tensor([seq], device=dev)
    res = {}
    for name, allow in (("masked", mask_matrix(n, history, block_size)),
                        ("unmasked", np.tril(np.ones((n, n), dtype=bool)))):
        # Additive mask in the model's dtype: 0 where allowed, the dtype's min elsewhere (4D
        # masks are used as given by transformers' eager attention).
        add = torch.zeros((1, 1, n, n), dtype=dtype)
        add[0, 0][~torch.from_numpy(allow)] = torch.finfo(dtype).min
        logits = forward_logits(model, ids, add.to(dev))
        rows = logits[len(prompt_ids) - 1:]
        res[name] = rows.argmax(-1).tolist()
        if name == "masked":
            top2 = rows.topk(2, dim=-1).values
            res["gap"] = (top2[:, 0] - top2[:, 1]).tolist()
    return OracleResult(list(output_ids), set(forced), res["masked"], res["unmasked"], res["gap"])



def reference_logits(model, prompt_ids: list[int], output_ids: list[int],
                     history: list[tuple[int, int, tuple[int, ...] | None]] | None,
                     block_size: int):
    """The reference's float32 logits (CPU tensor, one row per output position: the
    distribution output i was chosen from) with prompt + output[:-1] replayed under `history`
    (None: plain causal attention): what `check` computes, kept whole for the logprob verdict
    (checks/logprob_verdict.py)."""
    import torch

    seq = list(prompt_ids) + list(output_ids[:-1])
    n = len(seq)
    allow = (np.tril(np.ones((n, n), dtype=bool)) if history is None
             else mask_matrix(n, history, block_size))
    p0 = next(model.parameters())
    add = torch.zeros((1, 1, n, n), dtype=p0.dtype)
    add[0, 0][~torch.from_numpy(allow)] = torch.finfo(p0.dtype).min
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seq], device=p0.device),
                       attention_mask=add.to(p0.device)).logits[0]
    return logits[len(prompt_ids) - 1:].float().cpu()


def from_logits(output_ids: list[int], forced: set[int], masked_rows,
                unmasked_rows=None) -> OracleResult:
    """`check`'s result from `reference_logits` rows (no unmasked rows: no unmasked tokens)."""
    top2 = masked_rows.topk(2, dim=-1).values
    return OracleResult(list(output_ids), set(forced), masked_rows.argmax(-1).tolist(),
                        [] if unmasked_rows is None else unmasked_rows.argmax(-1).tolist(),
                        (top2[:, 0] - top2[:, 1]).tolist())
