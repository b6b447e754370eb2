"""Principal components of the patch-embedding filters [P §4.5, Fig. 7 left].

Shapes: D hidden (one filter per output channel), C channels, P patch, k components.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError
from ..model import VisionTransformer


def embedding_filters(model: VisionTransformer, k: int = 28) -> dict[str, Tensor]:
    """The first ``k`` principal components of the D patch-embedding filters E.

    Each filter (C, P, P) is flattened to C*P*P, the D filters are centred on their mean and
    decomposed by SVD. Returns ``components`` (k, C, P, P), unit norm and mutually orthogonal, and
    ``explained_variance_ratio`` (k,), descending; ``k`` is clipped to min(D, C*P*P).

    Raises ``ValueError`` for a hybrid: its patch embedding acts on ResNet features, not pixels.
    """
    cfg = model.cfg
    if cfg.resnet is not None:
        raise ConfigError(
            "embedding filters are pixel filters only for a pure ViT: this hybrid embeds "
            f"{cfg.patch_size}x{cfg.patch_size} patches of ResNet features"
        )
    if k < 1:
        raise ConfigError(f"k={k} is not valid: expected a positive number of components")
    w = model.patch_embed.proj.weight.detach().double().cpu()  # (D, C, P, P)
    D, C, P, _ = w.shape
    flat = w.reshape(D, C * P * P)  # (D, CPP)
    flat = flat - flat.mean(dim=0, keepdim=True)  # centred over the D filters
    _, s, vh = torch.linalg.svd(flat, full_matrices=False)  # s (r,), vh (r, CPP), r = min(D, CPP)
    variance = s**2  # (r,)
    k = min(k, vh.shape[0])
    return {
        "components": vh[:k].reshape(k, C, P, P).float(),  # (k, C, P, P)
        "explained_variance_ratio": (variance[:k] / variance.sum().clamp_min(1e-30)).float(),
    }
