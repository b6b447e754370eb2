"""Where the heads look: mean attention distance and attention rollout [P §4.5, App. D.7-D.8,
Fig. 6, 7 right, 11, 14; Abnar & Zuidema, ACL 2020].

Shapes: B images, L layers, H heads, (gh, gw) patch grid, N = gh * gw patches, T = prefix + N
tokens (class token first when prefix = 1).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError
from ..model import VisionTransformer


def collect_attention(
    model: VisionTransformer,
    images: Tensor,
    batch_size: int = 64,
    *,
    autocast: torch.dtype | None = None,
) -> list[Tensor]:
    """Softmax attention weights of every layer, one (B, H, T, T) float32 CPU tensor per layer.

    ``images`` (B, C, H, W) are in [-1, 1]; they are fed in batches of ``batch_size`` without
    gradients, on the model's device, under ``autocast`` (a dtype) if given. The model should be
    in eval mode (no attention dropout).
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} is not valid: expected a positive integer")
    param = next(model.parameters())
    per_layer: list[list[Tensor]] = [[] for _ in range(model.cfg.num_layers)]
    device = param.device
    with (
        torch.no_grad(),
        torch.autocast(device.type, dtype=autocast, enabled=autocast is not None),
    ):
        for start in range(0, len(images), batch_size):
            batch = images[start : start + batch_size].to(device, param.dtype)
            out = model.intermediates(batch, attention=True)
            for i, chunks in enumerate(per_layer):
                chunks.append(out[f"attn{i}"].float().cpu())  # (b, H, T, T)
    return [torch.cat(chunks) for chunks in per_layer]  # L x (B, H, T, T)


def attention_distance(
    attn_per_layer: list[Tensor],
    *,
    grid: tuple[int, int],
    num_prefix: int,
    pixels_per_patch: int,
) -> Tensor:
    """Mean attention distance in pixels, per layer and head: (L, H).

    For each query patch, the distance to every key patch (Euclidean distance between patch
    centres on the grid, times ``pixels_per_patch``) weighted by the attention weight, averaged
    over query patches and images: the paper's "receptive field size" of a head.

    The paper does not say how the class token is handled. We use patch-to-patch weights only:
    the class token's row and column are dropped and each query's remaining weights are
    renormalised to sum to 1, as most re-implementations do. The result is then a true weighted
    mean of distances, and a head that sends much of its weight to the class token (which has no
    position) is not reported as "local"; without renormalising, that share would count as
    distance 0.
    """
    gh, gw = grid
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")  # (gh, gw)
    centres = torch.stack([rows.flatten(), cols.flatten()], dim=1).float()  # (N, 2), in patches
    dist = torch.cdist(centres, centres) * pixels_per_patch  # (N, N), in pixels
    out = []
    for attn in attn_per_layer:
        if attn.shape[-1] != num_prefix + gh * gw:
            raise ConfigError(
                f"attention over {attn.shape[-1]} tokens does not match {num_prefix} prefix "
                f"token(s) plus a {gh}x{gw} grid"
            )
        a = attn[:, :, num_prefix:, num_prefix:].float()  # (B, H, N, N) patch to patch
        a = a / a.sum(dim=-1, keepdim=True).clamp_min(1e-12)  # each query's weights sum to 1
        per_query = (a * dist).sum(dim=-1)  # (B, H, N)
        out.append(per_query.mean(dim=(0, 2)))  # (H,)
    return torch.stack(out)  # (L, H)


def attention_rollout(attn_per_layer: list[Tensor]) -> Tensor:
    """Attention rollout R = Â_L ⋯ Â_1: (B, T, T), rows summing to 1.

    Â_l is layer l's attention averaged over heads, plus the identity for the residual path, with
    rows renormalised (= 0.5 Ā_l + 0.5 I, since the rows of Ā_l sum to 1). ``R[b, i, j]`` is how
    much of output token i's information flows from input token j.
    """
    if not attn_per_layer:
        raise ConfigError("attention_rollout needs the attention of at least one layer")
    rollout: Tensor | None = None
    for attn in attn_per_layer:
        a = attn.double().mean(dim=1)  # (B, T, T), heads averaged
        a = a + torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)  # residual connection
        a = a / a.sum(dim=-1, keepdim=True)  # (B, T, T), rows sum to 1
        rollout = a if rollout is None else a @ rollout  # (B, T, T)
    assert rollout is not None
    return rollout.float()


def rollout_maps(
    rollout: Tensor, *, grid: tuple[int, int], num_prefix: int, normalize: bool = True
) -> Tensor:
    """Attention maps over the patch grid from a rollout (B, T, T): (B, gh, gw).

    With a class token (``num_prefix=1``) the map is the class token's row over the patches
    (R[CLS, 1:]); with GAP (``num_prefix=0``) the pooled representation is the mean of the patch
    tokens, so the map is the mean of the patch rows. ``normalize`` scales each map to max 1 for
    display; ``normalize=False`` keeps the raw rollout weights.
    """
    gh, gw = grid
    to_patches = rollout[:, :, num_prefix:]  # (B, T, N), flow from each patch
    maps = to_patches[:, 0] if num_prefix else to_patches.mean(dim=1)  # (B, N)
    maps = maps.reshape(-1, gh, gw)  # (B, gh, gw)
    if normalize:
        maps = maps / maps.amax(dim=(1, 2), keepdim=True).clamp_min(1e-12)
    return maps
