"""The transformers reference on hybrid models masks the global layers only (the paper's §2.3,
§B): checked against plain transformers with masks built here by hand, on da-tiny-hybrid
(5 sliding-window layers of 64 tokens + 1 global layer) and da-tiny-gdn (3 Gated DeltaNet
layers + 1 global layer)."""

import numpy as np
import pytest
import torch

from da_lab.checks.oracle import HYBRID_ATTN, forward_logits, is_hybrid, load_reference
from da_lab.models.hybrid import WINDOW, build, build_gdn, global_layers

N, BS = 320, 32              # ten 32-token blocks: the window (64) is two of them


@pytest.fixture(scope="module")
def gemma():
    return load_reference(str(build()))


@pytest.fixture(scope="module")
def gdn():
    return load_reference(str(build_gdn()))


@pytest.fixture(scope="module")
def ids():
    rng = np.random.default_rng(7)
    return torch.tensor([[1] + rng.integers(3, 1000, N - 1).tolist()])


def additive(allow: np.ndarray) -> torch.Tensor:
    add = torch.zeros((1, 1, *allow.shape))
    add[0, 0][~torch.from_numpy(allow)] = torch.finfo(torch.float32).min
    return add


def causal() -> np.ndarray:
    return np.tril(np.ones((N, N), dtype=bool))


def hide(block: int, from_query: int) -> np.ndarray:
    """Causal, except queries from `from_query` on don't see KV block `block`."""
    allow = causal()
    allow[from_query:, block * BS:(block + 1) * BS] = False
    return allow


def plain(path: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                attn_implementation="eager").eval()


def test_hybrid_models_get_the_per_layer_attention_and_llama_keeps_eager(gemma, gdn,
                                                                          reference):
    assert gemma.config._attn_implementation == gdn.config._attn_implementation == HYBRID_ATTN
    assert reference.config._attn_implementation == "eager"       # tiny Llama: as before
    assert not is_hybrid(reference.config) and is_hybrid(gemma.config)
    assert global_layers(gemma.config.to_dict()) == [5]
    assert global_layers(gdn.config.to_dict()) == [3]


@pytest.mark.parametrize("which", ["gemma", "gdn"])
def test_no_mask_equals_plain_transformers(which, ids, request):
    ref = request.getfixturevalue(which)
    path = str(build() if which == "gemma" else build_gdn())
    with torch.no_grad():
        want = plain(path)(input_ids=ids).logits[0]
    assert torch.equal(forward_logits(ref, ids, additive(causal())), want)


@pytest.mark.parametrize("which", ["gemma", "gdn"])
def test_hiding_a_block_only_the_global_layer_sees_changes_the_logits(which, ids, request):
    """Block 1 (tokens 32..63) is far outside every query's 64-token window from 200 on: only
    the global layer reads it there. Hiding it changes those rows and no earlier one."""
    ref = request.getfixturevalue(which)
    base = forward_logits(ref, ids, additive(causal()))
    got = forward_logits(ref, ids, additive(hide(1, 200)))
    assert torch.equal(got[:200], base[:200])
    assert (got[200:] - base[200:]).abs().max() > 1e-3


def test_sliding_layers_keep_their_own_window(gemma, ids):
    """Hide the block inside the window of queries 288..319 (block 8, tokens 256..287): the
    reference equals stock transformers given the DA mask in the global layer and the plain
    sliding-window mask in the sliding ones (both built here), and differs from a wrong
    reference that masks the sliding layers too."""
    allow = hide(8, 288)
    pos = np.arange(N)
    window = causal() & (pos[:, None] - pos[None, :] < WINDOW)
    got = forward_logits(gemma, ids, additive(allow))
    path = str(build())
    stock = plain(path)
    with torch.no_grad():
        right = stock(input_ids=ids, attention_mask={
            "full_attention": additive(allow), "sliding_attention": additive(window)}).logits[0]
        wrong = stock(input_ids=ids, attention_mask={
            "full_attention": additive(allow),
            "sliding_attention": additive(window & allow)}).logits[0]
    assert torch.allclose(got, right, atol=1e-5, rtol=0)
    assert (wrong[288:] - right[288:]).abs().max() > 1e-3
