"""Tooling: `da-lab bench` (DA against stock vLLM, one child process per configuration) and the
notebook's speed cell."""
