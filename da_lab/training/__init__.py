"""Tooling: the self-tagging task (`task`), the trainer with the hook's own mask (`train`) and
the evaluation through the real engine (`evaluate`)."""
