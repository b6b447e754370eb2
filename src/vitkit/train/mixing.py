"""Mixup [Zhang et al. 2018] and CutMix [Yun et al. 2019] of a training batch, as timm's
``Mixup`` in its batch mode: one λ, one switch and one box for the whole batch.

With probability ``prob`` the batch is mixed (else λ = 1); when both are on, CutMix is chosen with
probability ``switch_prob``. Mixup blends the batch with a shuffled copy of itself, weight
λ ~ Beta(mixup, mixup); CutMix pastes the copy's box, sized from λ ~ Beta(cutmix, cutmix) by
timm's ``rand_bbox``, and λ becomes the uncovered fraction (``correct_lam``). The targets are mixed
with the same λ. Every draw is made on the device from its global RNG (checkpointed, so a resumed
run draws the same), and nothing is read on the host. Mixup alone draws what it drew before
CutMix existed, in the same order.

Processes: under torchrun each process draws its own λ, switch, box and permutation, and pairs
images within its part of the global batch only; so a mixed batch is not the same on 1 and on 2
processes (the loader's batches are): pairing across parts would need the others' images.
Shapes: B batch, C channels, H, W image height and width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Mixing:
    """What a training batch is mixed with (``TrainConfig``'s mixup keys); 0 = off."""

    mixup: float = 0.0
    cutmix: float = 0.0
    switch_prob: float = 0.5
    prob: float = 1.0

    @property
    def on(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0


@dataclass(frozen=True)
class Mix:
    """One batch's draws: ``lam`` () the weight of the batch itself in the targets (CutMix's
    corrected for the box's clipped area), ``perm`` (B,) the partner of each image, ``cutmix`` ()
    bool, and ``box`` (4,) CutMix's rows and columns [yl, yh) x [xl, xh) (None when it is off)."""

    lam: Tensor
    perm: Tensor
    cutmix: Tensor
    box: Tensor | None


def _beta(alpha: float, device: torch.device) -> Tensor:
    # filled there: torch.tensor(alpha, device=...) would copy from the host and wait for it;
    # validate_args=False: the check of alpha would read it on the host at every step
    a = torch.full((), alpha, device=device)
    return torch.distributions.Beta(a, a, validate_args=False).sample()  # ()


def cutmix_box(
    lam: Tensor, cy: Tensor, cx: Tensor, height: int, width: int
) -> tuple[Tensor, Tensor]:
    """timm's ``rand_bbox`` and ``correct_lam`` on the device: the box (4,) [yl, yh, xl, xh] of
    side ratio sqrt(1 - λ) centred at (``cy``, ``cx``) and clipped to the image, and
    1 - its area / the image's. Sizes in float64, as timm's numpy, so that both cut alike."""
    ratio = (1 - lam.double()).sqrt()
    cut_h, cut_w = (height * ratio).floor().long(), (width * ratio).floor().long()
    yl, yh = (cy - cut_h // 2).clamp(0, height), (cy + (cut_h + 1) // 2).clamp(0, height)
    xl, xh = (cx - cut_w // 2).clamp(0, width), (cx + (cut_w + 1) // 2).clamp(0, width)
    area = (yh - yl) * (xh - xl)
    return torch.stack([yl, yh, xl, xh]), 1 - area.double() / (height * width)


def box_mask(box: Tensor, height: int, width: int) -> Tensor:
    """(H, W) True inside ``box`` [yl, yh, xl, xh], built from aranges (no host read)."""
    rows = torch.arange(height, device=box.device)
    cols = torch.arange(width, device=box.device)
    in_rows = (rows >= box[0]) & (rows < box[1])  # (H,)
    in_cols = (cols >= box[2]) & (cols < box[3])  # (W,)
    return in_rows[:, None] & in_cols[None, :]  # (H, W)


def draw(mixing: Mixing, batch: int, height: int, width: int, device: torch.device) -> Mix:
    """The draws of one batch, in a fixed order: [apply if prob < 1], [switch if both are on],
    [mixup's λ], [CutMix's λ], the permutation, [the box's centre row and column]."""
    applied = torch.rand((), device=device) < mixing.prob if mixing.prob < 1 else None
    both = mixing.mixup > 0 and mixing.cutmix > 0
    cut = (
        torch.rand((), device=device) < mixing.switch_prob
        if both
        else torch.full((), mixing.cutmix > 0, device=device)
    )
    lams = [_beta(alpha, device) for alpha in (mixing.mixup, mixing.cutmix) if alpha > 0]
    lam = torch.where(cut, lams[1], lams[0]) if both else lams[0]  # () each
    if applied is not None:
        lam = torch.where(applied, lam, torch.ones_like(lam))
    perm = torch.randperm(batch, device=device)
    box = None
    if mixing.cutmix > 0:
        cy = torch.randint(height, (), device=device)
        cx = torch.randint(width, (), device=device)
        box, corrected = cutmix_box(lam, cy, cx, height, width)
        lam = torch.where(cut, corrected.to(lam.dtype), lam)
    return Mix(lam=lam, perm=perm, cutmix=cut, box=box)


def mix_images(images: Tensor, mix: Mix) -> Tensor:
    """``images`` (B, C, H, W) mixed by ``mix``: blended with weight λ, or (CutMix) the
    partner's box pasted in."""
    other = images[mix.perm]  # (B, C, H, W)
    blended = mix.lam * images + (1 - mix.lam) * other
    if mix.box is None:
        return blended
    inside = box_mask(mix.box, images.shape[-2], images.shape[-1])  # (H, W)
    return torch.where(mix.cutmix, torch.where(inside, other, images), blended)
