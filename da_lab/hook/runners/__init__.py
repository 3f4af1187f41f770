"""Adapters to vLLM's model runners: `v1` (the v1 runner; the CPU build's), `v2` (0.26's V2 GPU
runner), and what both share (`common`)."""
