"""da_lab: Declarative Attention inside a real vLLM engine, as a teaching lab."""

__version__ = "0.1.0"
