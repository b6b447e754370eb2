"""Random erasing [Zhong et al. 2020, "Random Erasing Data Augmentation"] as timm's
``RandomErasing`` in pixel mode (``--reprob``, ``--remode pixel``, ``--recount``), on the device.

Each image is erased with probability ``prob``: it gets 1 to ``max_count`` boxes (uniformly many),
each of area a fraction U(0.02, 1/3) of the image divided by the count and of aspect ratio h/w
log-uniform in [0.3, 1/0.3], its size rounded to pixels; of ``attempts`` tries the first that fits
strictly inside the image is placed uniformly, else that box is skipped. Its pixels become N(0, 1)
noise, per pixel and channel, in the model's input space (here [-1, 1], where timm's is mean/std
normalised). Applied to the scaled batch on the device, as timm's GPU prefetcher does; every draw
comes from the device's global RNG (checkpointed: a resumed run erases the same) and the whole
batch is drawn at once, with nothing read on the host. Under torchrun each process erases its
part with its own draws. Shapes: B batch, K boxes, A attempts, C channels, H, W image size.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def erase_mask(
    batch: int,
    height: int,
    width: int,
    *,
    prob: float,
    max_count: int = 1,
    device: torch.device | None = None,
    attempts: int = 10,
    min_area: float = 0.02,
    max_area: float = 1 / 3,
    min_aspect: float = 0.3,
) -> Tensor:
    """(B, H, W) True where random erasing replaces the pixels of each of ``batch`` images."""
    K, A = max_count, attempts
    erased = torch.rand(batch, device=device) < prob  # (B,)
    count = torch.randint(1, K + 1, (batch,), device=device)  # (B,)
    area = torch.empty(batch, K, A, device=device).uniform_(min_area, max_area)
    area = area * (height * width) / count[:, None, None]  # (B, K, A) in pixels
    log_aspect = torch.empty(batch, K, A, device=device).uniform_(
        math.log(min_aspect), -math.log(min_aspect)
    )
    aspect = log_aspect.exp()  # (B, K, A) h / w
    h = (area * aspect).sqrt().round().long()  # (B, K, A)
    w = (area / aspect).sqrt().round().long()
    fits = (h < height) & (w < width)  # (B, K, A)
    first = fits.int().argmax(dim=2, keepdim=True)  # the first attempt that fits (or 0)
    h, w = h.gather(2, first).squeeze(2), w.gather(2, first).squeeze(2)  # (B, K)
    # placed uniformly: top in [0, H - h], left in [0, W - w]
    top = (torch.rand(batch, K, device=device) * (height - h + 1)).floor().long()
    left = (torch.rand(batch, K, device=device) * (width - w + 1)).floor().long()
    top, left = torch.minimum(top, height - h), torch.minimum(left, width - w)
    boxes = torch.arange(K, device=device)
    on = erased[:, None] & fits.any(dim=2) & (boxes < count[:, None])  # (B, K)
    rows = torch.arange(height, device=device)
    cols = torch.arange(width, device=device)
    in_rows = (rows >= top[..., None]) & (rows < (top + h)[..., None])  # (B, K, H)
    in_cols = (cols >= left[..., None]) & (cols < (left + w)[..., None])  # (B, K, W)
    inside = in_rows[..., :, None] & in_cols[..., None, :] & on[..., None, None]  # (B, K, H, W)
    return inside.any(dim=1)  # (B, H, W)


def random_erase(images: Tensor, *, prob: float, max_count: int = 1) -> Tensor:
    """``images`` (B, C, H, W), scaled, with random erasing's boxes of N(0, 1) noise."""
    B, _, H, W = images.shape
    mask = erase_mask(B, H, W, prob=prob, max_count=max_count, device=images.device)
    noise = torch.randn_like(images)  # (B, C, H, W)
    return torch.where(mask[:, None], noise, images)
