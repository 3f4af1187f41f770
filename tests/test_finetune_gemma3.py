"""CPU smoke run of the Gemma 3 fine-tuning (finetune --base gemma3): a few LoRA steps on short
prompts in Gemma 3's chat template, on the real Gemma 3 270M cut to its first six layers (five
sliding-window layers and the first global one, so the DA mask has a global layer to act on).
The held-out loss falls, the record names the base, and the delta merges into the base
weights (models/delta.py) to the logits of the model in memory."""

import json

import pytest

from da_lab.models import gemma3 as M
from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_task as N
from da_lab.training.trainer import finetune as F

LAYERS = 6


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ft") / "gemma3-da-smoke"
    argv = ["--base", "gemma3", "--device", "cpu", "--layers", str(LAYERS), "--steps", "4",
            "--batch", "2", "--batch-tokens", "700", "--context", "250,300", "--chunks", "2,2",
            "--eval-n", "2", "--probe-n", "2", "--eval-every", "0", "--workers", "0",
            "--lr", "2e-3", "--warmup", "1", "--seed", "3", "--paper", "0.5", "--pairs", "0.3",
            "--rank", "8", "--alpha", "16", "--out", str(out)]
    meta, model, wrapped = F.run(argv)
    return out, meta, model, wrapped


def test_smoke_run_lowers_the_held_out_loss_and_records_itself(run):
    out, meta, model, _ = run
    assert model.config.layer_types[-1] == "full_attention"        # one global layer kept
    assert meta["steps"] == 4 and meta["heldout_loss_after"] < meta["heldout_loss_before"]
    rec = json.loads((out / "training.json").read_text())
    assert rec["model"] == "gemma3-da" and rec["base"].startswith("gemma3 (gemma3-270m-q4-k-m")
    assert rec["pairs"] == 0.3 and "--base gemma3" in rec["command"]


def test_the_delta_merges_into_gemma3_to_the_same_logits(run):
    import torch
    from safetensors.torch import load_file
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from da_lab.models import delta as D
    from da_lab.models.tiny import model_path

    out, _, model, wrapped = run
    tensors, meta = M.read_delta(out)
    assert meta["rank"] == 8 and set(k.rsplit(".", 1)[0] for k in tensors) == set(wrapped)
    base = model_path("gemma3")
    keep = {k: v for k, v in load_file(str(base / "model.safetensors")).items()
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < LAYERS}
    D.merge_delta(keep, tensors, meta)
    cfg = json.loads((base / "config.json").read_text())
    cfg.update(num_hidden_layers=LAYERS, layer_types=cfg["layer_types"][:LAYERS])
    conf = Gemma3TextConfig(**{k: v for k, v in cfg.items()
                               if k not in ("architectures", "torch_dtype", "model_type")})
    merged = Gemma3ForCausalLM(conf)
    res = merged.load_state_dict(keep, strict=False)
    assert set(res.missing_keys) <= {"lm_head.weight"} and not res.unexpected_keys
    merged.tie_weights()
    merged.eval()
    model.eval()
    s = G.sample(9, 0, G.HELDOUT, context=300, n_chunks=2, tok=N.tokens(str(base)))
    assert N.tokens(str(base)).decode(s.ids, skip_special_tokens=False).startswith(
        "<bos><start_of_turn>user\n")
    ids = torch.tensor([s.ids])
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, merged(input_ids=ids).logits
    assert any(float(m.lora_B.detach().abs().max()) > 0 for m in wrapped.values())
    assert torch.allclose(a, b, atol=2e-3, rtol=1e-4), float((a - b).abs().max())
