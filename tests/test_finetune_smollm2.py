"""CPU smoke run of the SmolLM2 fine-tuning (da_lab.training.trainer.finetune): a few LoRA steps on
short prompts of the natural-language task, with SmolLM2 cut to its first two layers so that it
fits in well under two minutes on two busy cores. The held-out loss falls, and the delta file
loads back and merges into the base weights to the logits of the model in memory."""

import json

import pytest

from da_lab.models import smollm2 as S
from da_lab.training.data import nl_gen as G
from da_lab.training.trainer import finetune as F

LAYERS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ft") / "smollm2-da-smoke"
    argv = ["--device", "cpu", "--layers", str(LAYERS), "--steps", "6", "--batch", "2",
            "--batch-tokens", "700", "--context", "250,300", "--chunks", "2,2", "--eval-n", "4",
            "--probe-n", "4", "--eval-every", "3", "--workers", "0", "--lr", "2e-3",
            "--warmup", "1", "--seed", "3", "--out", str(out)]
    meta, model, wrapped = F.run(argv)
    return out, meta, model, wrapped


def test_smoke_run_lowers_the_held_out_loss_and_records_itself(run):
    out, meta, _, _ = run
    assert meta["steps"] == 6 and meta["stopped_by"] == "steps"
    assert meta["heldout_loss_after"] < meta["heldout_loss_before"]
    rec = json.loads((out / "training.json").read_text())
    assert rec["command"].startswith("python -m da_lab.training.trainer.finetune --device cpu")
    assert rec["seed"] == 3 and len(rec["loss_per_step"]) == 6 and rec["wall_seconds"] > 0
    assert [h["step"] for h in rec["probe_history"]] == [3]
    assert set(rec["heldout"]) >= {"tag_accuracy", "da_answer_accuracy",
                                   "all_blocks_answer_accuracy", "n"}
    # The full-size delta (30 layers) stays far under the 20 MB it may ship.
    assert meta["delta_bytes"] * 30 / LAYERS < 20e6


def test_delta_loads_back_and_merges_to_the_same_logits(run):
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from da_lab.models.tiny import model_path

    out, _, model, wrapped = run
    tensors, meta = S.read_delta(out)
    assert meta["rank"] == 16 and set(k.rsplit(".", 1)[0] for k in tensors) == set(wrapped)
    base = model_path("smollm2")
    state = load_file(str(base / "model.safetensors"))
    keep = {k: v for k, v in state.items()
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < LAYERS}
    S.merge_delta(keep, tensors, meta)
    cfg = json.loads((base / "config.json").read_text())
    cfg["num_hidden_layers"] = LAYERS
    conf = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",
                                                                     "torch_dtype")})
    merged = LlamaForCausalLM(conf)
    res = merged.load_state_dict(keep, strict=False)
    assert set(res.missing_keys) <= {"lm_head.weight"} and not res.unexpected_keys
    merged.tie_weights()
    merged.eval()
    model.eval()
    s = G.sample(9, 0, G.HELDOUT, context=300, n_chunks=2)
    ids = torch.tensor([s.ids])
    with torch.no_grad():
        a = model(input_ids=ids).logits
        b = merged(input_ids=ids).logits
    # A trained LoRA really changed the model, and the merged weights reproduce it.
    assert any(float(m.lora_B.detach().abs().max()) > 0 for m in wrapped.values())
    assert torch.allclose(a, b, atol=2e-3, rtol=1e-4), float((a - b).abs().max())
