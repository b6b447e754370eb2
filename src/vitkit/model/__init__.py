"""Architecture only: the Vision Transformer, its layers and the hybrid's BiT ResNet."""

from .vit import VisionTransformer

__all__ = ["VisionTransformer"]
