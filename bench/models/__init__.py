"""The models that write their own tags: prompt sets and GPU training/eval runs."""
