"""Similarity of the position embeddings [P §4.5, Fig. 7 centre, App. D.4].

Shapes: (gh, gw) patch grid, N = gh * gw patch positions, D hidden.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError
from ..model import VisionTransformer


def posemb_similarity(model: VisionTransformer) -> Tensor:
    """Cosine similarity of each patch position's embedding to every other's: (gh, gw, gh, gw).

    ``sim[i, j]`` is the (gh, gw) map for the patch in row i, column j. The class token's slot is
    left out. Works for learned and fixed (sincos2d) embeddings; raises ``ValueError`` for a model
    without position embeddings (``posemb='none'``).
    """
    cfg = model.cfg
    if model.pos_embed is None:
        raise ConfigError(f"the model has no position embedding (posemb={cfg.posemb!r})")
    gh, gw = cfg.grid
    prefix = cfg.num_prefix_tokens if cfg.posemb == "learn" else 0  # sincos2d has no class slot
    pe = model.pos_embed.detach().float().cpu()[0, prefix:]  # (N, D)
    assert pe.shape[0] == gh * gw, f"{pe.shape[0]} position embeddings for a {gh}x{gw} grid"
    pe = F.normalize(pe, dim=-1)  # (N, D), unit rows
    return (pe @ pe.T).reshape(gh, gw, gh, gw)  # (gh, gw, gh, gw)
