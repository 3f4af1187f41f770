"""How the DA edit treats every field of vLLM's CommonAttentionMetadata, per release.

The edit (metadata.apply, through Step.apply) hands the builder a copy whose read path covers
only the kept blocks. Any field derived from seq_lens must follow, or a backend plans its
kernels from the committed row. So every field is classified here, and the static test
(tests/test_vllm_manifests.py) checks that the classified set equals each release's dataclass
fields: a field vLLM adds is a failing test until someone decides what it means for DA. At
runtime `live.check_cm_fields` compares the same set with the installed class.
"""

from __future__ import annotations

from da_lab.versions.needs import in_range

EDIT = "edit"        # the read path the edit rewrites: kernel rows, attention seq_lens
MAX = "max"          # the largest attention seq_len
SEQ = "seq"          # a CPU copy (or upper bound) of seq_lens: set to the attention seq_lens
SHIFT = "shift"      # seq_len - query_len on the CPU: lowered by the hidden tokens
CLEAR = "clear"      # a cache computed from seq_lens on first use: cleared
KEEP = "keep"        # does not depend on which blocks are read
NONE = "none"        # set only for models or modes the hook refuses: must be None to edit

FIELDS: dict[str, tuple[str, str, str]] = {
    # name: (treatment, releases, why)
    "query_start_loc": (KEEP, "", "the queries, not the keys"),
    "query_start_loc_cpu": (KEEP, "", "the queries"),
    "seq_lens": (EDIT, "", "keys each row reads"),
    "num_reqs": (KEEP, "", "rows stay in place"),
    "num_actual_tokens": (KEEP, "", "query tokens"),
    "max_query_len": (KEEP, "", "query tokens"),
    "max_seq_len": (MAX, "", "FA3's scheduler plans splits from it"),
    "block_table_tensor": (EDIT, "", "kept blocks first, in order"),
    "slot_mapping": (KEEP, "", "the KV *write* path: must see the committed row"),
    "causal": (KEEP, "", ""),
    "logits_indices_padded": (KEEP, "", "sampling side"),
    "num_logits_indices": (KEEP, "", "sampling side"),
    "max_logits_per_req": (KEEP, "0.28.0..", "sampling side (speculative decoding)"),
    "encoder_seq_lens": (NONE, "", "encoder-decoder models (cross-attention KV: refused)"),
    "encoder_seq_lens_cpu": (NONE, "", "encoder-decoder models"),
    "dcp_local_seq_lens": (NONE, "", "decode context parallelism (refused)"),
    "dcp_local_seq_lens_cpu": (NONE, "..0.29.0", "decode context parallelism"),
    "dcp_local_seq_lens_cpu_upper_bound": (NONE, "0.30.0..", "decode context parallelism"),
    "positions": (KEEP, "", "query positions (RoPE is baked into cached K)"),
    "is_prefilling": (KEEP, "", ""),
    "seq_lens_cpu_upper_bound": (SEQ, "", "backends size work from it"),
    "req_idx": (KEEP, "0.30.0..", "batch row -> request slot; rows stay in place"),
    "mm_req_doc_ranges": (NONE, "", "multimodal bidirectional ranges (text models only)"),
    "rswa_prefix_lens": (NONE, "", "sliding-window prefixes (sliding window refused)"),
    "replayssm_decode_base_cpu": (NONE, "0.27.0..0.33.0", "state-space models (refused)"),
    "_seq_lens_cpu": (SEQ, "..0.29.0", "the cached CPU copy behind seq_lens_cpu"),
    "_num_computed_tokens_cpu": (SHIFT, "..0.29.0", "seq_lens_cpu - query lens, cached"),
    "_num_computed_tokens_cache": (CLEAR, "", "seq_lens - query lens, cached on first use"),
    "_token_to_req_indices_cache": (KEEP, "", "from query_start_loc"),
}


def fields_for(version: str) -> dict[str, str]:
    """{field: treatment} of `version`'s CommonAttentionMetadata."""
    return {name: how for name, (how, spec, _) in FIELDS.items() if in_range(version, spec)}
