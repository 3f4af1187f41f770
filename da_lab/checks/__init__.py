"""Tooling: correctness checks against the masked transformers reference (`oracle`): the GPU run
over both runners and graph modes (`gpu_tests`) and the tensor-parallel check (`tp_check`)."""
