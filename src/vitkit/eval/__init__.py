"""The paper's evaluation: classification metrics and few-shot linear evaluation [P §4.1]."""

from .fewshot import fewshot_evaluate, fewshot_model
from .metrics import evaluate

__all__ = ["evaluate", "fewshot_evaluate", "fewshot_model"]
