"""The models that write their own tags: prompt sets and GPU training/eval runs, and the
carrier of SmolLM2's GGUF to the GPU machine in parts (`smollm2_parts`)."""
