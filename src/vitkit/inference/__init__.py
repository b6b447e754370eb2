"""Running a checkpoint: one object opened from it (``Inference``, runner.py) decides the engine,
the precision and the preprocessing once and says why; under it, the engines it chooses from:
torch eager, torch compiled with frozen weights (``optimize_for_inference``, compiled.py) and
int8 (int8.py). Its settings are ``config.inference.InferenceConfig``, torch-free."""

from __future__ import annotations

from .runner import Inference

__all__ = ["Inference"]
