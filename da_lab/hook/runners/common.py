"""What both model-runner adapters (v1.py, v2.py) share: the checks every release needs when
the plugin loads (`install`), the start-up refusals, the engine's facts (which runner, backend,
tokenizer serve it), the builder's wrapper and the method wrappers that are identical on both.
The wrappers only hand vLLM's objects to the session (hook/session.py), which runs the step."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from da_lab.hook import grouped
from da_lab.hook.errors import DAUnsupported
from da_lab.hook.facts import EngineFacts
from da_lab.hook.runners import live
from da_lab.hook.session import SESSION
from da_lab.versions import cm_fields, releases
from da_lab.versions.needs import BUILDER, need, needs_for

__all__ = ["DAUnsupported", "install", "check_specs", "check_groups", "check_kernel_blocks",
           "note_runner", "patch_methods", "patch_builder_class", "RunnerView",
           "wrap_execute_model", "wrap_get_kv_cache_spec", "wrap_initialize_kv_cache"]

_BUILD = need(BUILDER + ".build")


def install(version: str) -> None:
    """What every runner relies on (needs.py: common, metadata, prefix cache, service), checked
    on the live classes; the edit learns how this release's CommonAttentionMetadata fields
    follow the kernel rows (cm_fields.py)."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    live.check(needs_for(version, ("common", "metadata", "prefix_cache", "service")),
               "shared")
    fields = cm_fields.fields_for(version)
    live.check_cm_fields(CommonAttentionMetadata, fields)
    SESSION.use_fields({k: (how, cm_fields.FIELDS[k][2]) for k, how in fields.items()})


def check_specs(vllm_config, specs: dict) -> None:
    """Refuse, before any memory is planned, what one kernel row per request can't express."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    name = vllm_config.model_config.model
    if vllm_config.speculative_config is not None:
        raise DAUnsupported(f"{name}: speculative decoding is not supported by the DA hook "
                            "(draft tokens would be verified against a different mask)")
    pc = vllm_config.parallel_config
    if pc.decode_context_parallel_size > 1 or pc.prefill_context_parallel_size > 1:
        raise DAUnsupported(f"{name}: context parallelism shards each row's KV across ranks; "
                            "the DA hook needs whole rows")
    if pc.use_ubatching:
        raise DAUnsupported(f"{name}: micro-batching (--enable-dbo / ubatch_size > 1) splits "
                            "each step's rows across builders; the DA hook edits whole steps")
    if pc.pipeline_parallel_size > 1:
        raise DAUnsupported(f"{name}: pipeline parallelism: only the last stage samples tokens, "
                            "so earlier stages could not see the tags; the DA hook supports "
                            "tensor and data parallelism")
    for layer, spec in specs.items():
        if type(spec) is not FullAttentionSpec:
            kind = type(spec).__name__
            reason = ("MLA" if "MLA" in kind else "sliding window" if "Sliding" in kind
                      else "not plain full attention")
            raise DAUnsupported(f"{name}: layer {layer} has a KV cache of kind {kind} "
                                f"({reason}); the DA hook serves plain full attention only")


def check_groups(vllm_config, kv_cache_config) -> None:
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise DAUnsupported(f"{vllm_config.model_config.model}: {len(groups)} KV-cache groups; "
                            "the DA hook needs exactly one full-attention group")


def check_kernel_blocks(group, builder) -> None:
    """Refuse a backend whose kernel blocks are smaller than the KV manager's blocks: vLLM then
    maps each block to several kernel blocks (0.26-0.31 in the v1 BlockTable, 0.32+ in
    AttentionGroup's kernel_block_table), and kept-block indices would be in the wrong units."""
    manager, kernel = group.kv_cache_spec.block_size, builder.kv_cache_spec.block_size
    if manager != kernel:
        raise DAUnsupported(f"{group.backend.get_name()} runs on {kernel}-token kernel blocks "
                            f"inside {manager}-token KV blocks; the DA hook needs them equal "
                            f"(start with --block-size {kernel})")
    why = live.signature_problem(type(builder).build, _BUILD)
    if why:
        raise DAUnsupported(f"{type(builder).__name__}.build {why}; the DA hook wraps "
                            f"build(common_prefix_len, common_attn_metadata, ...)")


def note_runner(runner, attn_groups) -> None:
    """After initialize_kv_cache: what the runner tells us (EngineFacts, once), and patch every
    attention backend's builder."""
    backends = [g.backend.get_name() for groups in attn_groups for g in groups]
    sched = runner.vllm_config.scheduler_config
    SESSION.learn(EngineFacts(
        vllm=releases.engine_name(),
        runner_class=f"{type(runner).__module__}.{type(runner).__qualname__}",
        device=runner.device.type, backend=backends[-1] if backends else "",
        tokenizer_path=runner.model_config.tokenizer,
        vocab_size=runner.model_config.get_vocab_size(),
        token_lag=1 if sched.async_scheduling else 0))
    for groups in attn_groups:
        for g in groups:
            builder = g.get_metadata_builder()
            check_kernel_blocks(g, builder)
            patch_builder_class(type(builder))
    SESSION.note_grouped(*grouped.install(runner, attn_groups))   # the grouped read (issue 59)


def patch_builder_class(cls) -> None:
    """Wrap a backend's `build` (the DA edit: Session.build) and `update_block_table` (which
    would bypass it: refused while a step edits)."""
    if getattr(cls.build, "_da_wrapped", False):
        return
    orig = cls.build

    @functools.wraps(orig)
    def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
        cm = SESSION.build(common_prefix_len, common_attn_metadata)
        return SESSION.attach_grouped(orig(self, common_prefix_len, cm, *args, **kwargs), cm)

    build._da_wrapped = True
    cls.build = build
    if hasattr(cls, "update_block_table"):
        orig_ubt = cls.update_block_table

        @functools.wraps(orig_ubt)
        def update_block_table(self, *args, **kwargs):
            if SESSION.editing():
                raise DAUnsupported("update_block_table reuses metadata across KV-cache groups, "
                                    "bypassing the DA edit; the hook serves one group only")
            return orig_ubt(self, *args, **kwargs)

        cls.update_block_table = update_block_table


@dataclass(frozen=True)
class RunnerView:
    """What a server's trace reads off the runner (hook/trace.py), each adapter its own way:
    `blocks()` {request name: physical block ids}, `max_tokens(req_id)`, `num_blocks`."""
    blocks: object
    max_tokens: object
    num_blocks: int


def wrap_get_kv_cache_spec(orig):
    @functools.wraps(orig)
    def get_kv_cache_spec(self, *args, **kwargs):
        specs = orig(self, *args, **kwargs)
        try:
            check_specs(self.vllm_config, specs)
        except DAUnsupported as e:
            SESSION.refuse_model(e)         # a server starts anyway, with DA off
        return specs
    return get_kv_cache_spec


def wrap_initialize_kv_cache(orig):
    @functools.wraps(orig)
    def initialize_kv_cache(self, kv_cache_config, *args, **kwargs):
        try:
            check_groups(self.vllm_config, kv_cache_config)
        except DAUnsupported as e:
            SESSION.refuse_model(e)
        out = orig(self, kv_cache_config, *args, **kwargs)
        try:
            note_runner(self, self.attn_groups)
        except DAUnsupported as e:
            SESSION.refuse_model(e)
        return out
    return initialize_kv_cache


def wrap_execute_model(view):
    """The step's edit ends with its forward: the runner's seq_lens are put back. In a server
    the hook then looks after its own records (service.py), reading the runner through
    `view(runner)` (a RunnerView)."""
    def wrap(orig):
        @functools.wraps(orig)
        def execute_model(self, *args, **kwargs):
            try:
                return orig(self, *args, **kwargs)
            finally:
                SESSION.end_step(args[0] if args else kwargs.get("scheduler_output"),
                                 lambda: view(self))
        return execute_model
    return wrap


def patch_methods(cls, wraps) -> None:
    """Wrap `cls`'s methods once (the plugin may be loaded more than once per process)."""
    for name, wrap in wraps:
        fn = getattr(cls, name)
        if getattr(fn, "_da_wrapped", False):
            continue
        fn = wrap(fn)
        fn._da_wrapped = True
        setattr(cls, name, fn)
