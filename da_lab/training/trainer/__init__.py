"""Trainers: the tiny Llama trained from scratch (`train`), the SmolLM2 LoRA fine-tune
(`finetune`), the hook's own mask in training (`masks`), batches and the model's forward."""
