"""Architecture only: the Vision Transformer, its layers and the hybrid's BiT ResNet."""

from __future__ import annotations

from ..config import ModelConfig
from .resnet import ResNetClassifier
from .vit import VisionTransformer

__all__ = ["ResNetClassifier", "VisionTransformer", "build_model"]


def build_model(cfg: ModelConfig) -> VisionTransformer | ResNetClassifier:
    """The model a config describes: a ``VisionTransformer`` (pure or hybrid), or for
    ``arch='resnet'`` the CNN baseline."""
    return ResNetClassifier(cfg) if cfg.arch == "resnet" else VisionTransformer(cfg)
