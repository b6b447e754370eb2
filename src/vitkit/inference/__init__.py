"""Running a checkpoint: one object opened from it (``Inference``, runner.py) decides the
precision and the engine once and says why (engines.py decides the engine); the engines it
chooses from: torch eager, torch compiled with frozen weights (``optimize_for_inference``,
compiled.py), OpenVINO (openvino.py) and int8 (int8.py); shapes.py: ``precision="auto"`` decided
per input shape. Its settings are ``config.inference.InferenceConfig``, torch-free."""

from __future__ import annotations

from .runner import Inference

__all__ = ["Inference"]
