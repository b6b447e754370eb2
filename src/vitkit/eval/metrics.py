"""Classification metrics: top-1, top-5, per-class accuracy and the confusion matrix."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.loader import to_input
from ..runtime.mode import eval_mode


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
    autocast: torch.dtype | None = None,
    flip: bool = False,
    reduce: Callable[[Tensor], Tensor] | None = None,
) -> dict:
    """Run ``model`` over ``batches`` (float images, labels); returns loss, accuracy, top5,
    per_class (list) and confusion (K x K list, rows = true class), computed on ``model``'s
    device (uint8 batches are scaled there), under ``autocast`` (a dtype) if given. ``flip``: test-time augmentation, the class probabilities averaged over each image
    and its mirror image (two forward passes); every figure is then the averaged prediction's, and
    ``accuracy_one_view`` adds the unflipped images' own accuracy. ``reduce`` sums a tensor over
    processes when each evaluates its part of the batches (data parallelism)."""
    device = model_device(model)
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)
    # loss sum, top-5 hits, one-view hits: on the device, read once at the end (no host read
    # per batch); the count of images is the host's
    sums, count = torch.zeros(3, dtype=torch.float64, device=device), 0
    with eval_mode(model):
        for images, labels in batches:
            images = to_input(images, device)  # (B, C, H, W) in [-1, 1]
            labels = labels.to(device, non_blocking=True)
            if flip:  # one forward pass over both views: (2B, C, H, W)
                images = torch.cat([images, images.flip(-1)])
            with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
                logits = model(images).float()  # (B, K), or (2B, K) with flip
            unflipped = torch.zeros((), device=device)  # hits of the images alone (flip)
            if flip:
                views = logits.log_softmax(1).unflatten(0, (2, -1))  # (2, B, K)
                unflipped = (views[0].argmax(dim=1) == labels).sum()
                # the log of the mean probability: the averaged prediction's loss, top-5, argmax
                logits = torch.logsumexp(views, dim=0) - math.log(2)  # (B, K)
            k = min(5, num_classes)
            top5 = (logits.topk(k, dim=1).indices == labels[:, None]).any(dim=1).sum()
            loss = F.cross_entropy(logits, labels, reduction="sum")
            sums += torch.stack([loss.double(), top5.double(), unflipped.double()])
            count += labels.numel()
            confusion += torch.bincount(
                labels * num_classes + logits.argmax(dim=1), minlength=num_classes * num_classes
            ).reshape(num_classes, num_classes)
    totals = torch.cat([sums, sums.new_tensor([count])])  # (4,)
    if reduce is not None:
        confusion, totals = reduce(confusion), reduce(totals)
    loss_sum, top5_hits, one_view_hits, count = totals[0].item(), *map(int, totals[1:].tolist())
    per_class = (confusion.diag() / confusion.sum(dim=1).clamp(min=1)).tolist()
    one_view = {"accuracy_one_view": one_view_hits / max(count, 1)} if flip else {}
    return {
        "loss": loss_sum / max(count, 1),
        "accuracy": confusion.diag().sum().item() / max(count, 1),
        "top5": top5_hits / max(count, 1),
        "per_class": per_class,
        "confusion": confusion.tolist(),
        "count": count,
        **one_view,
    }
