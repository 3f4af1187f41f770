"""The lab's shipped tokenizer (da_lab/assets/tokenizer.json, a byte-level BPE trained by
`models/tiny.train_tokenizer`) and the tokenizer files every locally built model folder holds.
Apart from tiny.py so that the model builders tiny.py names (models/hybrid.py) can use them
without importing tiny.py back."""

from __future__ import annotations

import json
from pathlib import Path

from da_lab import ASSETS

ASSET_TOKENIZER = ASSETS / "tokenizer.json"


def tokenizer_json() -> dict:
    return json.loads(ASSET_TOKENIZER.read_text())


def write_tokenizer_files(folder: Path, config: dict) -> None:
    """The shipped tokenizer and the generation config, as an HF checkpoint folder holds them
    (shared by the random model and the trained one, `da_lab.training.trainer.train`)."""
    tok = tokenizer_json()
    vocab = tok["model"]["vocab"]
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"],
         "pad_token_id": vocab["<pad>"]}, indent=2))
    (folder / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "pad_token": "<pad>", "model_max_length": config["max_position_embeddings"],
        "add_bos_token": True, "clean_up_tokenization_spaces": False}, indent=2))
