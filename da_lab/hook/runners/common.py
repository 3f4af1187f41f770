"""What both model-runner adapters (v1.py, v2.py) share: the checks every release needs when
the plugin loads (`install`), the start-up refusals, the engine's facts (which runner, backend,
tokenizer serve it), the builder's wrapper and the method wrappers that are identical on both.
The wrappers only hand vLLM's objects to the session (hook/session.py), which runs the step."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from da_lab.hook import grouped
from da_lab.hook.errors import DAUnsupported
from da_lab.hook.facts import EngineFacts, GroupFacts
from da_lab.hook.runners import live
from da_lab.hook.session import SESSION
from da_lab.versions import cm_fields, kv_specs, releases
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
    """Refuse, before any memory is planned, what one kernel row per request and global layer
    can't express. Layers of other kinds (sliding windows, recurrent state) are left as vLLM
    builds them (versions/kv_specs.py); a layer the hook does not know is refused by name."""
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
    kinds, seen = {}, set()
    for layer, spec in specs.items():
        kind, cls, why = kv_specs.spec_kind(spec)
        if kind == kv_specs.REFUSED:
            raise DAUnsupported(f"{name}: layer {layer} has a KV cache of kind {cls} ({why}); "
                                "the DA hook masks global attention layers beside sliding-"
                                "window and recurrent-state layers, and no other kind")
        kinds[layer] = kind
        seen.add(f"{why} ({cls})")
    if specs and kv_specs.FULL not in kinds.values():
        raise DAUnsupported(f"{name}: no global attention layer: every layer is "
                            f"{' or '.join(sorted(seen))}, nothing for DA to mask")


def group_facts(kv_cache_config) -> tuple[GroupFacts, ...]:
    """Every KV-cache group as the hook sees it (facts.GroupFacts)."""
    out = []
    for i, g in enumerate(kv_cache_config.kv_cache_groups):
        kind, cls, _ = kv_specs.spec_kind(g.kv_cache_spec)
        out.append(GroupFacts(i, kind, cls, int(getattr(g.kv_cache_spec, "block_size", 0)),
                              tuple(g.layer_names),
                              getattr(g.kv_cache_spec, "sliding_window", None)))
    return tuple(out)


def check_groups(vllm_config, kv_cache_config) -> None:
    """The global layers' groups must share one block size: a request's mask is one set of
    hidden tokens for every global layer, never applied to some of them only."""
    groups = group_facts(kv_cache_config)
    sizes = {g.block_size for g in groups if g.masked}
    name = vllm_config.model_config.model
    if len(sizes) > 1:
        raise DAUnsupported(f"{name}: its global attention layers sit in KV-cache groups of "
                            f"different block sizes ({sorted(sizes)} tokens); the DA hook masks "
                            "the same tokens in every global layer and needs one block size")
    cg = vllm_config.compilation_config.cudagraph_mode
    full_graphs = bool(cg is not None and getattr(cg, "has_full_cudagraphs", lambda: False)())
    if any(not g.masked for g in groups) and full_graphs and \
            not vllm_config.model_config.enforce_eager:
        raise DAUnsupported(
            f"{name}: a hybrid model (global layers beside {_others(groups)}) under FULL CUDA "
            "graphs: its layers share one seq_lens buffer that the captured graph reads, so "
            "the global layers could not read fewer blocks than the others; start with "
            "cudagraph_mode PIECEWISE (attention outside the graphs; the Lab and `da-lab "
            "serve` do) or enforce_eager")


def _others(groups) -> str:
    return " and ".join(sorted({g.kind for g in groups if not g.masked})) + " layers"


def check_kernel_blocks(group, builder) -> None:
    """The builder's rows may be in kernel blocks smaller than the KV manager's (vLLM maps each
    block to several: 0.26-0.31 in the v1 BlockTable, 0.32+ in AttentionGroup's
    kernel_block_table): a kept block is then that many kernel blocks (KernelEdit), as long as
    they divide it. The builder's build() must be the one the wrapper was written for."""
    manager, kernel = group.kv_cache_spec.block_size, builder.kv_cache_spec.block_size
    if manager % kernel:
        raise DAUnsupported(f"{group.backend.get_name()} runs on {kernel}-token kernel blocks "
                            f"that don't divide the {manager}-token KV blocks; the DA hook "
                            f"needs them to (start with --block-size {kernel})")
    why = live.signature_problem(type(builder).build, _BUILD)
    if why:
        raise DAUnsupported(f"{type(builder).__name__}.build {why}; the DA hook wraps "
                            f"build(common_prefix_len, common_attn_metadata, ...)")


def note_runner(runner, attn_groups) -> None:
    """After initialize_kv_cache: what the runner tells us (EngineFacts, once), and patch every
    attention backend's builder."""
    backends = [g.backend.get_name() for groups in attn_groups for g in groups]
    sched = runner.vllm_config.scheduler_config
    groups = group_facts(runner.kv_cache_config)
    da_group = next((f.index for f in groups if f.masked), 0)
    da_backends = [g.backend.get_name() for g in attn_groups[da_group]] if attn_groups else []
    SESSION.learn(EngineFacts(
        vllm=releases.engine_name(),
        runner_class=f"{type(runner).__module__}.{type(runner).__qualname__}",
        device=runner.device.type,
        backend=da_backends[-1] if da_backends else backends[-1] if backends else "",
        tokenizer_path=runner.model_config.tokenizer,
        vocab_size=runner.model_config.get_vocab_size(),
        token_lag=1 if sched.async_scheduling else 0, groups=groups))
    for kv_groups in attn_groups:
        for g in kv_groups:
            builder = g.get_metadata_builder()
            check_kernel_blocks(g, builder)
            patch_builder_class(type(builder))
    if SESSION.facts.hybrid:      # the grouped read (issue 59) plans one KV-cache group's rows
        SESSION.grouped.note("a hybrid model (several KV-cache groups): the grouped read "
                             "serves models with one global group only", None)
    else:
        SESSION.grouped.note(*grouped.install(runner, attn_groups))


def patch_builder_class(cls) -> None:
    """Wrap a backend's `build` (the DA edit: Session.build) and `update_block_table` (which
    would bypass it: refused while a step edits)."""
    if getattr(cls.build, "_da_wrapped", False):
        return
    orig = cls.build

    @functools.wraps(orig)
    def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
        cm = SESSION.build(self, common_prefix_len, common_attn_metadata)
        return SESSION.attach_grouped(self, orig(self, common_prefix_len, cm, *args, **kwargs),
                                      cm)

    build._da_wrapped = True
    cls.build = build
    if hasattr(cls, "update_block_table"):
        orig_ubt = cls.update_block_table

        @functools.wraps(orig_ubt)
        def update_block_table(self, metadata, block_table, *args, **kwargs):
            # Reuses another group's metadata with this group's block table (vLLM caches
            # builds across groups of one spec): a global group's table gets the same edit.
            return orig_ubt(self, metadata, SESSION.reused_table(self, block_table),
                            *args, **kwargs)

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
