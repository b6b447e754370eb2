"""Classification metrics: top-1, top-5, per-class accuracy and the confusion matrix (sparse),
as one ``Evaluation``; ``between_batches``, where a training run checks for a stop request during
its evaluations."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.device import to_input
from ..runtime.mode import eval_mode

T = TypeVar("T")

TOP5_FROM = 6  # classes: with 5 or fewer, every label is in the top 5 (top-5 says nothing)


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """What one evaluation measured: a classifier's (``evaluate``), or masked patch
    prediction's colour accuracy of the chosen patches (``count`` patches; no top-5, no classes).

    ``confusion`` is sparse: the non-zero cells of the K x K matrix as ``(true, predicted,
    count)``, sorted by (true, predicted). Few-shot figures are ``{shots: {"mean": ..., ...}}``
    (``eval.fewshot.fewshot_model``), of the run's data and of each named set."""

    loss: float
    accuracy: float
    count: int  # images evaluated (patches, for masked patch prediction)
    top5: float | None = None  # None: 5 classes or fewer, or masked patch prediction
    accuracy_one_view: float | None = None  # with the mirror images: the images' own accuracy
    per_class: list[float] = field(default_factory=list)  # (K,), 0 for a class without images
    per_class_images: list[int] = field(default_factory=list)  # (K,)
    confusion: list[tuple[int, int, int]] | None = None  # None: no classes to confuse (mpp)
    predictions: Tensor | None = None  # (count,) int64 top-1 classes, when asked for
    fewshot: dict[int, dict[str, Any]] = field(default_factory=dict)
    fewshot_data: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)

    def scalars(self) -> dict[str, float]:
        """The numbers that go to metrics.jsonl: loss, accuracy, ``accuracy_one_view`` and top5
        where measured, ``fewshot_<k>shot`` (the mean over seeds) and
        ``fewshot_<name>_<k>shot`` for each named set (the keys the logs have always had)."""
        out = {"loss": self.loss, "accuracy": self.accuracy}
        if self.accuracy_one_view is not None:
            out["accuracy_one_view"] = self.accuracy_one_view
        if self.top5 is not None:
            out["top5"] = self.top5
        for shots, acc in self.fewshot.items():
            out[f"fewshot_{shots}shot"] = acc["mean"]
        for name, per_shots in self.fewshot_data.items():
            for shots, acc in per_shots.items():
                out[f"fewshot_{name}_{shots}shot"] = acc["mean"]
        return out


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
) -> Evaluation:
    """``model`` over ``batches`` (float images, labels), computed on ``model``'s device (uint8
    batches are scaled there), under ``autocast`` (a dtype) if given. The confusion matrix is
    kept sparse, at most one cell per image evaluated, so that 21,843 classes cost what 10 do
    (a dense matrix of ImageNet-21k's classes is 3.8 GB).

    ``flip``: test-time augmentation, the class probabilities averaged over each image and its
    mirror image (two forward passes); every figure is then the averaged prediction's, and
    ``accuracy_one_view`` adds the unflipped images' own accuracy. When each process evaluates its
    part of the batches (data parallelism), ``reduce`` sums a tensor over processes and ``gather``
    concatenates a 1-D tensor's parts (both or neither).

    ``predictions``: also every image's top-1 class (on the CPU) in the order of ``batches`` (with ``gather``, in the order it concatenates)."""
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
    return Evaluation(
        loss=loss_sum / max(count, 1),
        accuracy=sum(hits_of) / max(count, 1),
        count=count,
        top5=top5_hits / max(count, 1) if num_classes >= TOP5_FROM else None,
        accuracy_one_view=one_view_hits / max(count, 1) if flip else None,
        per_class=[h / max(n, 1) for h, n in zip(hits_of, images_of, strict=True)],
        per_class_images=images_of,
        confusion=confusion,
        predictions=every % num_classes if predictions else None,
    )


def _cells(every: Tensor, num_classes: int) -> list[tuple[int, int, int]]:
    """``(true, predicted, count)`` of each distinct cell in ``every`` (true * K + predicted)."""
    codes, counts = torch.unique(every, sorted=True, return_counts=True)
    return [
        (code // num_classes, code % num_classes, n)
        for code, n in zip(codes.tolist(), counts.tolist(), strict=True)
    ]
