"""The paper's evaluation: classification metrics (few-shot linear evaluation comes next)."""

from .metrics import evaluate

__all__ = ["evaluate"]
