"""The arithmetic a run computes in, once ``train.precision`` is resolved for its device
(``runtime.machine``: ``auto`` is bf16 on CUDA, fp32 elsewhere, recorded so that a resume
elsewhere cannot silently compute differently): the autocast dtype, TF32 for the fp32 parts of a
mixed-precision run on CUDA (never in an ``fp32`` run), and fp16's gradient scaler (fp16's range is
too narrow for small gradients), whose state checkpoints keep.
"""

from __future__ import annotations

from typing import Any

import torch

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


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
