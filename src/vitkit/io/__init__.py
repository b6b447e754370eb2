"""Weights in and out: our format, and the formats people already have (io/formats)."""

from .api import load, save
from .checkpoint import CheckpointError

__all__ = ["CheckpointError", "load", "save"]
