"""`da-lab eval`: prompts, the engine side, scoring, the needle task, rescoring and splitting
eval documents, and notebook 06's helpers."""
