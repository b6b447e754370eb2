"""A checkpoint's model in int8 (runtime/int8.py), calibrated on its own training images through
its preprocessing and checked against fp32 on held-out images before anything is predicted with
it: refused, in one line, when top-1 accuracy moves by more than a bound.

Calibration takes ``calibration`` training images drawn by a seeded permutation (the first
``calibration`` of ``torch.randperm(N)`` under ``manual_seed(seed)``: the same images for the same
data and seed); the check, up to ``held_out`` images of the evaluated split drawn the same way,
which training never saw. ``vitkit eval`` and ``vitkit predict`` take ``--precision int8``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config.int8 import CALIBRATION, HELD_OUT, MAX_TOP1_CHANGE
from ..data import BatchOptions, subset
from ..data.run_data import Split, batches_of
from ..errors import VitkitError
from ..model import ResNetClassifier, VisionTransformer
from ..runtime.int8 import Int8Check, Int8Inference, check_int8, quantize_int8


@dataclass(frozen=True)
class Calibrated:
    """A checkpoint's int8 model, the training images it was calibrated on (indices into the
    split's training images) and its check."""

    model: Int8Inference
    indices: list[int]
    check: Int8Check

    def said(self, split: Split) -> str:
        """The line a command says of it."""
        return (
            f"precision int8 (torchao PT2E; calibrated on {len(self.indices)} training images; "
            f"{_checked(self.check, split)})"
        )


def _checked(check: Int8Check, split: Split) -> str:
    return f"on {check.images:,} held-out images of {split.name}: {check}"


def _drawn(count: int, size: int, seed: int) -> torch.Tensor:
    """The first ``count`` of a seeded permutation of ``size`` indices."""
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed))[:count]


def int8_model(
    model: VisionTransformer | ResNetClassifier,
    split: Split,
    *,
    batch_size: int,
    source: str,
    calibration: int = CALIBRATION,
    held_out: int = HELD_OUT,
    max_change: float = MAX_TOP1_CHANGE,
    seed: int = 0,
) -> Calibrated:
    """``model`` (the checkpoint ``source``'s, on the CPU) in int8, calibrated on ``split``'s
    training images and checked on its evaluated images in batches of ``batch_size``; a
    ``VitkitError`` when it has no training images or when the check moves top-1 accuracy by
    more than ``max_change`` points."""
    if split.train is None or len(split.train) == 0:
        raise VitkitError(
            f"--precision int8 calibrates on the training images of {source}'s data, and "
            f"{split.name} has none beside it: give data with a train split, or use bf16"
        )
    if calibration < 1 or max_change < 0:
        raise VitkitError(
            f"--int8-calibration {calibration} --int8-max-change {max_change}: expected a "
            "positive number of images and a change >= 0 points"
        )
    options = BatchOptions.evaluation(model.cfg, batch_size=batch_size)
    indices = _drawn(calibration, len(split.train), seed)
    images = (x for x, _ in batches_of(subset(split.train, indices), options).epoch(0))
    quantized = quantize_int8(model, images)
    checked = _drawn(held_out, len(split.dataset), seed)
    check = check_int8(
        model, quantized, batches_of(subset(split.dataset, checked), options).epoch(0)
    )
    if abs(check.top1_change) > max_change:
        raise VitkitError(
            f"int8 refused: {_checked(check, split)}; more than --int8-max-change "
            f"{max_change:g} points: use --precision bf16 or fp32, or allow more"
        )
    return Calibrated(quantized, indices.tolist(), check)
