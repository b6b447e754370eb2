"""Classification metrics: top-1, top-5, per-class accuracy and the confusion matrix."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def model_device(model: nn.Module) -> torch.device:
    """Where ``model`` computes: the device of its parameters (the CPU when it has none).
    Evaluations move each batch there."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


@torch.no_grad()
def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[Tensor, Tensor]],
    num_classes: int,
    *,
    bf16: bool = False,
    reduce: Callable[[Tensor], Tensor] | None = None,
) -> dict:
    """Run ``model`` over ``batches`` (float images, labels); returns loss, accuracy, top5,
    per_class (list) and confusion (K x K list, rows = true class), computed on ``model``'s
    device. ``reduce`` sums a tensor over processes when each evaluates its part of the batches
    (data parallelism)."""
    device = model_device(model)
    was_training = model.training
    model.eval()
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)
    loss_sum, top5_hits, count = 0.0, 0, 0
    for images, labels in batches:
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(images)
        logits = logits.float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        k = min(5, num_classes)
        top5_hits += (logits.topk(k, dim=1).indices == labels[:, None]).any(dim=1).sum().item()
        confusion += torch.bincount(
            labels * num_classes + logits.argmax(dim=1), minlength=num_classes * num_classes
        ).reshape(num_classes, num_classes)
        count += labels.numel()
    model.train(was_training)
    if reduce is not None:
        confusion = reduce(confusion)
        totals = reduce(torch.tensor([loss_sum, top5_hits, count], dtype=torch.float64))
        loss_sum, top5_hits, count = totals[0].item(), int(totals[1]), int(totals[2])
    per_class = (confusion.diag() / confusion.sum(dim=1).clamp(min=1)).tolist()
    return {
        "loss": loss_sum / max(count, 1),
        "accuracy": confusion.diag().sum().item() / max(count, 1),
        "top5": top5_hits / max(count, 1),
        "per_class": per_class,
        "confusion": confusion.tolist(),
        "count": count,
    }
