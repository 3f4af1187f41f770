"""What each of vLLM's KV-cache spec classes is to DA, by class name (0.26 … 0.33 name them
alike; a class added later is unknown until it is placed here, and an unknown kind is refused
with its name, never guessed).

DA masks the global (full-attention) layers only, as the paper does (§2.3 "Scope and
tradeoffs", §B): sliding-window, chunked-local and linear-attention / Mamba-style state layers
have per-step costs bounded by their window or state, so vLLM reads them as it builds them.
"""

from __future__ import annotations

FULL = "full"            # global attention: DA edits its kernel rows
SLIDING = "sliding"      # a sliding window: read as vLLM builds it
CHUNKED = "chunked"      # chunked local attention (Llama 4): read as vLLM builds it
STATE = "state"          # linear attention / Mamba / GDN recurrent state: no KV rows to mask
REFUSED = "refused"      # DA can't serve an engine with such a layer (the reason says why)

# class name -> (kind, why); a subclass not listed is unknown (refused by name).
SPEC_KINDS: dict[str, tuple[str, str]] = {
    "FullAttentionSpec": (FULL, "global attention"),
    "SinkFullAttentionSpec": (REFUSED, "global attention with learned sinks: not verified "
                                       "with DA"),
    "TQFullAttentionSpec": (REFUSED, "a quantized full-attention cache: not verified with DA"),
    "SlidingWindowSpec": (SLIDING, "a sliding window"),
    "ChunkedLocalAttentionSpec": (CHUNKED, "chunked local attention"),
    "CircularBufferSpec": (SLIDING, "a circular buffer of recent tokens"),
    "MambaSpec": (STATE, "a recurrent state (Mamba, Gated DeltaNet, linear attention)"),
    "MLAAttentionSpec": (REFUSED, "multi-head latent attention: not verified with DA"),
    "SlidingWindowMLASpec": (REFUSED, "sliding-window latent attention: not verified with DA"),
    "HiddenStateCacheSpec": (REFUSED, "a hidden-state cache, not attention KV"),
    "RSWASpec": (REFUSED, "reference sliding window: its prefix is kept visible by the kernel "
                          "beside the window, which one kernel row can't express"),
    "CrossAttentionSpec": (REFUSED, "encoder-decoder cross attention"),
    "EncoderOnlyAttentionSpec": (REFUSED, "encoder-only attention"),
    "HiSparseHotSpec": (REFUSED, "HiSparse's hot buffer moves KV between tiers itself"),
    "HiSparseResidentSpec": (REFUSED, "HiSparse's resident pool moves KV between tiers itself"),
}


def spec_kind(spec) -> tuple[str, str, str]:
    """(kind, class name, why) of a KV-cache spec: the first class of its MRO that is listed.
    A spec that wraps per-layer specs (UniformTypeKVCacheSpecs) is placed by its layers."""
    inner = getattr(spec, "kv_cache_specs", None)
    if isinstance(inner, dict) and inner:
        kinds = {spec_kind(s) for s in inner.values()}
        if len({k for k, _, _ in kinds}) == 1:
            return next(iter(kinds))
        return (REFUSED, type(spec).__name__, "one KV-cache group of mixed layer kinds")
    for cls in type(spec).__mro__:
        if cls.__name__ in SPEC_KINDS:
            kind, why = SPEC_KINDS[cls.__name__]
            if cls is not type(spec) and kind != REFUSED:
                # A subclass may change what the kernel reads: unknown until placed here.
                return (REFUSED, type(spec).__name__,
                        f"an unknown kind of {cls.__name__} (da_lab/versions/kv_specs.py)")
            return kind, type(spec).__name__, why
    return (REFUSED, type(spec).__name__,
            "a KV-cache kind the DA hook does not know (da_lab/versions/kv_specs.py)")
