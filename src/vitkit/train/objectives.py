"""Training objectives: each returns ``{"loss": ..., **metrics}`` for one batch.

Classification is softmax cross-entropy (the official fine-tuning loss), with optional label
smoothing [P §4.3 tuned it on small datasets] and mixup (big_vision's plain-ViT recipe, PAPER.md
A9). Masked patch prediction [P §4.6] plugs in here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def classification(
    model: nn.Module, images: Tensor, labels: Tensor, *, label_smoothing: float, mixup: float = 0.0
) -> dict[str, Tensor]:
    """Cross-entropy on ``model(images)``; with ``mixup`` > 0 the batch is blended with a shuffled
    copy of itself, weight λ ~ Beta(mixup, mixup), and so are the targets. The random draws use the
    global RNG, which checkpoints save, so a resumed run draws the same."""
    lam = 1.0
    if mixup > 0:
        lam = float(torch.distributions.Beta(mixup, mixup).sample())
        perm = torch.randperm(images.shape[0])
        images = lam * images + (1 - lam) * images[perm]  # (B, C, H, W)
    logits = model(images).float()  # (B, K)
    loss = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
    if mixup > 0:
        loss = lam * loss + (1 - lam) * F.cross_entropy(
            logits, labels[perm], label_smoothing=label_smoothing
        )
    accuracy = (logits.argmax(dim=1) == labels).float().mean()
    return {"loss": loss, "accuracy": accuracy.detach()}
