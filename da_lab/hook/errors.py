"""The hook's refusals, importable from every hook module without a cycle."""


class DAUnsupported(RuntimeError):
    """Raised at engine start (or at the first step) for a model, configuration or vLLM call
    the DA hook cannot serve correctly."""
