"""Classification metrics: top-1, top-5, per-class accuracy and the confusion matrix (sparse);
``between_batches``, where a training run checks for a stop request during its evaluations."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.device import to_input
from ..runtime.mode import eval_mode

T = TypeVar("T")


def model_device(model: nn.Module) -> torch.device:
    """Where ``model`` computes: the device of its parameters (the CPU when it has none).
    Evaluations move each batch there."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def between_batches(batches: Iterable[T], between: Callable[[], None] | None) -> Iterable[T]:
    """``batches``, with ``between`` called before each one but the first: a training run's
    check for a stop request, which raises to end the evaluation there (None: ``batches``)."""
    return batches if between is None else _checked(batches, between)


def _checked(batches: Iterable[T], between: Callable[[], None]) -> Iterator[T]:
    for i, batch in enumerate(batches):
        if i:
            between()
        yield batch


@torch.no_grad()
def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[Tensor, Tensor]],
    num_classes: int,
    *,
    autocast: torch.dtype | None = None,
    flip: bool = False,
    reduce: Callable[[Tensor], Tensor] | None = None,
    gather: Callable[[Tensor], Tensor] | None = None,
    predictions: bool = False,
) -> dict:
    """Run ``model`` over ``batches`` (float images, labels); returns loss, accuracy, top5,
    per_class (a list of K accuracies, 0 for a class without images), per_class_images (the
    images of each class) and confusion, computed on ``model``'s device (uint8
    batches are scaled there), under ``autocast`` (a dtype) if given.

    ``confusion`` is sparse: the non-zero cells of the K x K matrix as ``(true, predicted,
    count)`` tuples sorted by (true, predicted), at most one per image evaluated, so that 21,843
    classes cost what 10 do (a dense matrix of ImageNet-21k's classes is 3.8 GB).

    ``flip``: test-time augmentation, the class probabilities averaged over each image and its
    mirror image (two forward passes); every figure is then the averaged prediction's, and
    ``accuracy_one_view`` adds the unflipped images' own accuracy. When each process evaluates its
    part of the batches (data parallelism), ``reduce`` sums a tensor over processes and ``gather``
    concatenates a 1-D tensor's parts (both or neither).

    ``predictions``: also ``predictions``, every image's top-1 class (int64 (count,), on the
    CPU) in the order of ``batches`` (with ``gather``, in the order it concatenates)."""
    if (reduce is None) != (gather is None):
        raise TypeError("evaluate: give both reduce and gather, or neither")
    device = model_device(model)
    # every image's cell (true * K + predicted), and the loss sum, top-5 hits and one-view hits:
    # on the device, read once at the end (no host read per batch); the count is the host's
    cells: list[Tensor] = []
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
            cells.append(labels.long() * num_classes + logits.argmax(dim=1))  # (B,)
    totals = torch.cat([sums, sums.new_tensor([count])])  # (4,)
    every = torch.cat(cells) if cells else torch.zeros(0, dtype=torch.long, device=device)
    if reduce is not None and gather is not None:
        totals, every = reduce(totals), gather(every)
    loss_sum, top5_hits, one_view_hits, count = totals[0].item(), *map(int, totals[1:].tolist())
    every = every.cpu()  # (count,) true * K + predicted
    confusion = _cells(every, num_classes)
    images_of, hits_of = [0] * num_classes, [0] * num_classes
    for true, predicted, n in confusion:
        images_of[true] += n
        hits_of[true] += n if predicted == true else 0
    one_view = {"accuracy_one_view": one_view_hits / max(count, 1)} if flip else {}
    top1 = {"predictions": every % num_classes} if predictions else {}
    return {
        "loss": loss_sum / max(count, 1),
        "accuracy": sum(hits_of) / max(count, 1),
        "top5": top5_hits / max(count, 1),
        "per_class": [h / max(n, 1) for h, n in zip(hits_of, images_of, strict=True)],
        "per_class_images": images_of,
        "confusion": confusion,
        "count": count,
        **one_view,
        **top1,
    }


def _cells(every: Tensor, num_classes: int) -> list[tuple[int, int, int]]:
    """``(true, predicted, count)`` of each distinct cell in ``every`` (true * K + predicted)."""
    codes, counts = torch.unique(every, sorted=True, return_counts=True)
    return [
        (code // num_classes, code % num_classes, n)
        for code, n in zip(codes.tolist(), counts.tolist(), strict=True)
    ]
