"""projtune: projection-guided tuning of distributed LLM training layouts."""

__version__ = "0.1.0"
