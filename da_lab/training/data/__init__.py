"""Training data: the self-tagging tasks (the records task of da-tiny-tags, the natural-language
task of SmolLM2-DA in both dialects), their domains, words and values."""
