"""The GPU checks' hybrid models (models/hybrid_dummy.py), built on the CPU: their configs have
the shapes vLLM 0.26 needs to pick the paths the paper's models take, the folders load in the
transformers reference with the very weights written, and the Lab arguments are the ones
vLLM 0.26 will otherwise override."""

import json

import pytest
import torch
from safetensors import safe_open

from da_lab.checks.oracle import HYBRID_ATTN, layer_kinds, load_reference
from da_lab.models import hybrid_dummy as H


def test_configs_have_the_paper_families_shapes():
    g, q = H.gemma4_config(), H.text_config(H.qwen35_config())
    assert g["layer_types"].count("sliding_attention") == 5 and g["layer_types"][-1] == \
        "full_attention" and g["sliding_window"] == 128
    # FlashAttention 3 takes head sizes <= 256 (flash_attn.py supports_head_size): the global
    # layers' 512 sends vLLM 0.26 to TRITON_ATTN (models/config.py Gemma4Config).
    assert g["head_dim"] == 256 < g["global_head_dim"] == 512 and g["attention_k_eq_v"]
    assert q["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert H.qwen35_config()["architectures"] == ["Qwen3_5ForConditionalGeneration"]


def test_block_sizes_vllm_will_run_the_global_layers_at():
    # Gemma 4: sliding page per token 2 x 4 x 256 x 2 B, global 2 x 1 x 512 x 2 B: the global
    # group's block is twice the sliding groups' (unify_kv_cache_spec_page_size).
    assert H.attention_block_size(H.gemma4_config(), 16) == 32
    # Qwen 3.5: one GDN state (conv (2*2*128 + 4*128) x 3 x 2 B + 4 x 128 x 128 x 4 B float32)
    # in one attention page of 2 x 2 x 256 x 2 B per token, in multiples of 16: 144 tokens.
    q = H.qwen35_config()
    assert H.gdn_state_bytes(H.text_config(q)) == 1024 * 3 * 2 + 4 * 128 * 128 * 4
    assert H.attention_block_size(q, 16) == 144
    assert H.attention_block_size(q, 256) == 256          # a larger --block-size is kept
    kw = H.lab_kwargs(H.QWEN35)
    assert kw["block_size"] == 144 and kw["language_model_only"] is True
    assert H.lab_kwargs(H.GEMMA4)["hf_overrides"] == {"global_head_dim": 512,
                                                      "num_global_key_value_heads": 1}


@pytest.mark.parametrize("name", H.TEST_MODELS)
def test_built_folder_loads_in_the_reference_with_the_weights_written(name, tmp_path):
    folder = H.build(name, folder=tmp_path / name)
    assert (folder / "DONE").exists() and (folder / "tokenizer.json").exists()
    saved = json.loads((folder / "config.json").read_text())
    ref = load_reference(str(folder))
    assert ref.config._attn_implementation == HYBRID_ATTN
    assert layer_kinds(ref.config) == H.text_config(H.CONFIGS[name]())["layer_types"]
    state = ref.state_dict()
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        # Qwen 3.5 is saved as ForConditionalGeneration (model.language_model.*) and loaded as
        # ForCausalLM (model.*): the weights must be the saved ones, not a fresh init.
        key = next(k for k in keys if k.endswith("layers.0.mlp.down_proj.weight"))
        mine = next(v for k, v in state.items() if k.endswith("layers.0.mlp.down_proj.weight"))
        assert torch.equal(f.get_tensor(key).float(), mine.float())
    if name == H.GEMMA4:
        # vLLM 0.26 reads these as attributes; transformers keeps them in per_layer_config.
        assert saved["global_head_dim"] == 512 and saved["num_global_key_value_heads"] == 1
        glob = ref.model.layers[5].self_attn
        assert glob.head_dim == 512 and tuple(glob.k_proj.weight.shape) == (512, 256)
        assert ref.model.layers[0].self_attn.head_dim == 256
    else:
        assert saved["text_config"]["mamba_ssm_dtype"] == "float32"
        assert any(k.startswith("model.language_model.") for k in keys)
