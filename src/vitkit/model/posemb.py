"""Position embeddings [P §3.1, App. D.4; vit_jax checkpoint.py; big_vision vit.py].

Shapes: N = gh * gw patches, D hidden.

- ``learn``: the paper's learned 1D embedding, one vector per token (class token included).
- ``sincos2d``: big_vision's fixed 2D sine-cosine embedding of the patch grid (class token gets none).
- ``resize_grid``: the official fine-tuning resize, ``scipy.ndimage.zoom(order=1)`` on the
  (gh, gw) grid, i.e. bilinear interpolation with corners aligned, height and width separately.
- ``grid_of``: the (gh, gw) grid a number of patch tokens stands for, the one place a grid is
  inferred from a token count (a checkpoint's posemb, patch tokens given without their grid).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError


def sincos2d(grid: tuple[int, int], dim: int, *, temperature: float = 10_000.0) -> Tensor:
    """big_vision's ``posemb_sincos_2d``: [sin(x ω), cos(x ω), sin(y ω), cos(y ω)] -> (1, N, D)."""
    h, w = grid
    quarter = dim // 4
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")  # (gh, gw) each
    omega = torch.arange(quarter, dtype=torch.float64) / max(quarter - 1, 1)
    omega = 1.0 / temperature**omega  # (D/4,)
    y = y.flatten()[:, None].double() * omega[None, :]  # (N, D/4)
    x = x.flatten()[:, None].double() * omega[None, :]  # (N, D/4)
    pe = torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1)  # (N, D)
    return pe.float()[None]


def resize_grid(posemb: Tensor, old: tuple[int, int], new: tuple[int, int]) -> Tensor:
    """Resize patch position embeddings (1, gh*gw, D) -> (1, nh*nw, D), bilinear, corners aligned."""
    if old == new:
        return posemb
    _, n, dim = posemb.shape
    if n != old[0] * old[1]:
        raise ConfigError(
            f"position embedding has {n} patch tokens, expected a {old[0]}x{old[1]} grid"
        )
    grid = posemb.reshape(1, old[0], old[1], dim).permute(0, 3, 1, 2)  # (1, D, gh, gw)
    grid = F.interpolate(
        grid.float(), size=new, mode="bilinear", align_corners=True
    )  # (1, D, nh, nw)
    return grid.permute(0, 2, 3, 1).reshape(1, new[0] * new[1], dim).to(posemb.dtype)  # (1, N', D)


def grid_of(
    num_patches: int, *, expected: tuple[int, int] | None = None, what: str, hint: str
) -> tuple[int, int]:
    """The (gh, gw) grid of ``num_patches`` tokens: ``expected`` when it holds that many, else the
    square one. A count alone cannot tell 3x5 from 5x3, so a non-square grid must be ``expected``;
    anything else is a ``ConfigError`` naming ``what`` held the tokens and ``hint`` (what to do)."""
    if expected is not None and expected[0] * expected[1] == num_patches:
        return expected
    side = math.isqrt(max(num_patches, 0))
    if side * side == num_patches and num_patches > 0:
        return side, side
    also = f" nor the expected {expected[0]}x{expected[1]}" if expected is not None else ""
    raise ConfigError(
        f"{what} holds {num_patches} patch tokens, which are not a square grid{also}: {hint}"
    )
