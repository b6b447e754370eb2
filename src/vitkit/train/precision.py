"""The arithmetic a run computes in: ``train.precision`` resolved for the device.

``auto`` is bf16 autocast with TF32 matmuls on CUDA (the kind of arithmetic the GPUs the paper's
models train on do best: bf16 keeps fp32's range, so no loss scaling), and fp32 elsewhere (a
CPU's bf16 is slower than its fp32 on most machines); it is resolved when the run starts and the
resolved value is what the run's config records, so that a resume elsewhere cannot silently
compute differently. ``fp16`` adds a gradient scaler (fp16's range is too narrow for small
gradients), whose state checkpoints keep. TF32 is allowed for the fp32 parts of a mixed-precision
run on CUDA, and never in an ``fp32`` run.
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import Precision

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve(precision: Precision, device: torch.device) -> Precision:
    """``precision`` with ``auto`` made concrete for ``device``."""
    if precision != "auto":
        return precision
    return "bf16" if device.type == "cuda" else "fp32"


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a resolved precision (None: fp32, no autocast)."""
    return AUTOCAST.get(precision)


def configure(precision: str, device: torch.device) -> None:
    """TF32 matmuls on CUDA for a mixed-precision run; strict fp32 for an ``fp32`` one."""
    if device.type == "cuda":
        allow = precision != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow


def scaler(precision: str, device: torch.device) -> Any:
    """A ``torch.amp.GradScaler`` for ``fp16`` (None otherwise). It checks the gradients for
    infinities on the device; with an optimizer that takes the check (fused AdamW) the step needs
    no host read, with another it reads one flag per step."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type)
