"""Training objectives: each returns ``{"loss": ..., **metrics}`` for one batch.

Classification is softmax cross-entropy (the official fine-tuning loss), with optional label
smoothing [P §4.3 tuned it on small datasets]. Masked patch prediction [P §4.6] plugs in here.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


def classification(
    model: nn.Module, images: Tensor, labels: Tensor, *, label_smoothing: float
) -> dict[str, Tensor]:
    logits = model(images)  # (B, K)
    loss = F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
    accuracy = (logits.argmax(dim=1) == labels).float().mean()
    return {"loss": loss, "accuracy": accuracy.detach()}
