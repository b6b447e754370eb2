"""Class-balanced subsets and hold-out splits, deterministic for a seed.

The paper selects fine-tuning learning rates on held-out parts of the training sets (2% for CIFAR,
10% for Pets/Flowers, 1% for ImageNet) and then retrains on the full set [P B.1.1, PAPER.md A4];
few-shot evaluation uses k examples per class [P §4.1, PAPER.md A5]. The official code holds out the
*last* 2% (``train[:98%]``); we hold out the same fraction of every class instead, so a small
hold-out still covers every class.

A dataset here is anything with ``labels`` (int64 (N,)) and ``classes`` (a list of names):
``ArrayDataset`` and ``ImageFolderDataset``. Indices come back sorted, as an int64 tensor.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor
from torch.utils.data import Subset

from ..errors import ConfigError, DataError


class Labelled(Protocol):
    @property
    def labels(self) -> Tensor: ...  # a stream's raises: it cannot choose images by label

    @property
    def classes(self) -> list[str]: ...


def _labels(dataset: Labelled) -> Tensor:
    labels = getattr(dataset, "labels", None)
    if not isinstance(labels, Tensor) or not hasattr(dataset, "classes"):
        raise DataError(
            f"expected a dataset with `labels` (a tensor) and `classes`, "
            f"found {type(dataset).__name__}"
        )
    return labels


def subset(dataset: Any, indices: Tensor) -> Any:
    """The examples of ``dataset`` at ``indices``, in that order: the dataset's own ``subset``
    (which keeps ``labels`` and ``classes``) when it has one, else a ``torch.utils.data.Subset``."""
    if hasattr(dataset, "subset"):
        return dataset.subset(indices)
    return Subset(dataset, indices.tolist())


def balanced_subset(
    dataset: Labelled,
    *,
    per_class: int | None = None,
    fraction: float | None = None,
    seed: int,
) -> Tensor:
    """Indices of ``per_class`` examples of every class, or of ``fraction`` of every class.

    With ``fraction`` each class contributes ``round(fraction * its size)`` examples (classes with no
    examples are skipped). Raises ``ValueError`` naming the class when one has too few examples.
    """
    if (per_class is None) == (fraction is None):
        raise ConfigError(
            f"give exactly one of per_class and fraction, found per_class={per_class!r}, "
            f"fraction={fraction!r}"
        )
    if per_class is not None and (not isinstance(per_class, int) or per_class < 1):
        raise ConfigError(f"per_class={per_class!r} is not valid: expected a positive integer")
    if fraction is not None and not 0.0 < fraction <= 1.0:
        raise ConfigError(f"fraction={fraction!r} is not valid: expected a number in (0, 1]")
    labels = _labels(dataset)
    g = torch.Generator().manual_seed(seed)
    chosen = []
    for k, name in enumerate(dataset.classes):
        members = (labels == k).nonzero().flatten()  # (n_k,)
        n = len(members)
        if per_class is not None:
            take = per_class
            if n < take:
                raise DataError(
                    f"class {k} ({name!r}) has {n} examples, fewer than per_class={per_class}"
                )
        else:
            assert fraction is not None  # exactly one of the two, checked above
            if n == 0:
                continue
            take = round(fraction * n)
            if take == 0:
                raise DataError(
                    f"fraction={fraction} of class {k} ({name!r}, {n} examples) is no example; "
                    "use a larger fraction or per_class"
                )
        chosen.append(members[torch.randperm(n, generator=g)[:take]])
    return torch.cat(chosen).sort().values


def split_holdout(dataset: Labelled, fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """(train indices, held-out indices): ``fraction`` of every class held out (rounded, at
    least one image), the rest kept (at least one image); a class of one image is an error."""
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"fraction={fraction!r} is not valid: expected a number in (0, 1)")
    labels = _labels(dataset)
    g = torch.Generator().manual_seed(seed)
    held = []
    for k, name in enumerate(dataset.classes):
        members = (labels == k).nonzero().flatten()  # (n_k,)
        n = len(members)
        if n == 0:
            continue
        if n < 2:
            raise DataError(
                f"class {name!r} has {n} image: a holdout (data.holdout) needs 2 of each class "
                "to keep one for training; add images, give a val/ folder, or set "
                "data.validation=test"
            )
        take = min(n - 1, max(1, round(fraction * n)))
        held.append(members[torch.randperm(n, generator=g)[:take]])
    held_out = torch.cat(held).sort().values
    keep = torch.ones(len(labels), dtype=torch.bool)
    keep[held_out] = False
    return keep.nonzero().flatten(), held_out
