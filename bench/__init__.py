"""da_lab's benchmarks, by what they measure (speed/, browser/, reliability/, models/);
run from the repository root as `python -m bench.<group>.<name>`. Results: bench/results/
(index: bench/results/README.md)."""
