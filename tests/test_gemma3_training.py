"""The DA mask in training on a hybrid model (Gemma 3: sliding-window layers beside global ones),
against transformers' own Gemma 3 on a tiny Gemma-3-shaped config (random weights): the
global layers read the hook's mask, the sliding-window layers their plain causal window and
nothing else hidden -- what the hook does in the engine (it masks the global layers' KV-cache
group only, issue 55). Also the LoRA on a Gemma 3 and the size of its delta."""

import pytest

from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_task as N
from da_lab.training.trainer import train as R
from da_lab.training.trainer.masks import layer_masks

BS = 32
# Tokens: shorter than a prompt, so the sliding layers really slide, and longer than the
# paper's instructions after the chunks, so a chunk a focus hides is still in some window.
WINDOW = 300
TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]


def tiny(layer_types=TYPES, vocab=49152, attn="sdpa"):
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    conf = Gemma3TextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=len(layer_types), num_attention_heads=2,
                            num_key_value_heads=1, head_dim=32, sliding_window=WINDOW,
                            layer_types=list(layer_types), max_position_embeddings=4096,
                            query_pre_attn_scalar=32, rms_norm_eps=1e-6)
    conf._attn_implementation = attn
    return Gemma3ForCausalLM(conf).eval()


@pytest.fixture(scope="module")
def batch():
    """Two paper-protocol samples with a focus (SmolLM2's tokenizer: the ids only feed the tiny
    model) and their collated DA masks."""
    import torch

    tok = N.tokens()
    ss = [G.sample(5, i, G.HELDOUT, protocol="paper", kind="single", context=(300, 400),
                   n_chunks=(3, 5), tok=tok) for i in range(2)]
    b = R.collate(ss, tok.pad_id, BS)
    return ss, {k: torch.from_numpy(v) for k, v in b.items()}


def _seen_masks(model, fn):
    """The attention mask each layer's self-attention received while running fn()."""
    seen = {}

    def grab(i):
        def hook(mod, args, kwargs):
            seen[i] = kwargs.get("attention_mask")
        return hook
    hs = [layer.self_attn.register_forward_pre_hook(grab(i), with_kwargs=True)
          for i, layer in enumerate(model.model.layers)]
    try:
        fn()
    finally:
        for h in hs:
            h.remove()
    return seen


def _as_bool(m):
    """A layer's mask as 'may attend' booleans (transformers' eager masks are additive)."""
    import torch

    return m if m.dtype == torch.bool else m == 0


def test_with_nothing_hidden_the_masks_are_transformers_own(batch):
    """Rows that hide nothing: the training forward (SDPA, our masks) equals transformers' own
    forward (eager attention, its causal mask on the global layers, its sliding window on the
    others), logits and masks."""
    import torch

    ss, b = batch
    model, ref_model = tiny(), tiny(attn="eager")
    L = b["ids"].shape[1]
    with torch.no_grad():
        ours, tgt, sel = R.forward(model, b, BS, masked=False)
        ref = ref_model(input_ids=b["ids"]).logits.reshape(-1, model.config.vocab_size)[sel]
        eager, _, _ = R.forward(ref_model, b, BS, masked=False)
    assert torch.allclose(ours, ref, atol=1e-4), float((ours - ref).abs().max())
    assert torch.allclose(eager, ref, atol=1e-5), float((eager - ref).abs().max())
    own = _seen_masks(ref_model, lambda: ref_model(input_ids=b["ids"]))
    mine = layer_masks(model.config, R.dense_mask(torch.zeros_like(b["row_seg"]),
                                                  b["seg_visible"], L, BS))
    for i, kind in enumerate(TYPES):
        assert torch.equal(_as_bool(own[i])[:, :, :L, :L].expand(2, 1, L, L), mine[kind]), i
    # The window really cuts: a row past WINDOW reads WINDOW tokens on a sliding layer.
    assert L > WINDOW + 20 and int(mine["sliding_attention"][0, 0, WINDOW + 20].sum()) == WINDOW


def test_da_masks_the_global_layers_only(batch):
    """Under a focus the global layers receive the hook's mask (oracle: mask_matrix of the
    hook's history) and the sliding-window layers the plain window, so a hidden block inside
    the window stays visible to them."""
    import torch

    from da_lab.checks.oracle import mask_matrix

    ss, b = batch
    model = tiny()
    L = b["ids"].shape[1]
    seen = _seen_masks(model, lambda: R.forward(model, b, BS))
    window = layer_masks(model.config, R.dense_mask(torch.zeros_like(b["row_seg"]),
                                                    b["seg_visible"], L, BS))["sliding_attention"]
    for k, s in enumerate(ss):
        n = len(s.ids)
        oracle = torch.from_numpy(mask_matrix(n, R.hook_history(s.prompt.layout, s.all_tags, n),
                                              BS))
        for i, kind in enumerate(TYPES):
            got = _as_bool(seen[i])[k, 0, :n, :n]
            want = oracle if kind == "full_attention" else window[k, 0, :n, :n]
            assert torch.equal(got, want), (k, i, kind)
        # Some column the focus hides from a global layer is still in a sliding layer's window.
        P = s.prompt.layout.prompt_len
        row = P + s.tag_close
        hidden = (~oracle[row, :row + 1]).nonzero().squeeze(1)
        assert len(hidden) and bool(window[k, 0, row, hidden].any())


def test_a_model_of_sliding_layers_only_ignores_the_da_mask(batch):
    """With no global layer there is nothing for DA to mask: masked and unmasked forwards give
    the same logits; with the global layers back, hiding a chunk changes them."""
    import torch

    _, b = batch
    with torch.no_grad():
        flat = tiny(["sliding_attention"] * 4)
        a, _, _ = R.forward(flat, b, BS, masked=True)
        c, _, _ = R.forward(flat, b, BS, masked=False)
        assert torch.equal(a, c)
        hybrid = tiny()
        a, _, _ = R.forward(hybrid, b, BS, masked=True)
        c, _, _ = R.forward(hybrid, b, BS, masked=False)
        assert not torch.allclose(a, c, atol=1e-4)


def test_lora_wraps_every_projection_and_the_full_delta_fits_20_mb():
    from da_lab.training.trainer.lora import TARGETS, add_lora

    model = tiny()
    wrapped = add_lora(model, rank=4, alpha=8.0)
    assert len(wrapped) == len(TYPES) * len(TARGETS)
    # Gemma 3 270M: 18 layers, hidden 640, 4 query heads / 1 KV head of 256, MLP 2048; bf16.
    h, q, kv, m = 640, 4 * 256, 256, 2048
    per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + m) + (m + h)
    assert 18 * per_layer * 32 * 2 < 16e6                # the rank gemma3_gpu.sh trains
    assert 18 * per_layer * 42 * 2 < 20e6 < 18 * per_layer * 43 * 2     # the largest that fits
