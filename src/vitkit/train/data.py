"""From a ``DataConfig`` to the datasets a run trains on, chooses its best weights on, and
reports at the end.

Three roles: ``train``; ``val``, the split that chooses the best checkpoint; ``test``, reported
once at the end with the best weights, and never used to choose. ``data.validation='auto'``
takes a folder's ``val/`` split, else a seeded, class-balanced holdout of ``train``
(``data.holdout`` of every class); for Fashion-MNIST, CIFAR and synthetic images it keeps
today's practice of the paper's figures and our recipes: their test split, evaluated during the
run (then ``val`` is ``test``, and nothing is evaluated twice).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..config import DataConfig, DataSource, ModelConfig
from ..data import (
    Batches,
    ImageFolderDataset,
    balanced_subset,
    cifar,
    fashion_mnist,
    folder_layout,
    split_holdout,
    subset,
    synthetic,
)
from ..errors import ConfigError, DataError


@dataclass
class RunData:
    """The datasets of a run, their names as the run states them, and what was decided."""

    train: Any
    val: Any
    test: Any | None  # None: no test split; ``val`` is reported at the end
    classes: list[str]
    channels: int
    val_name: str  # e.g. "val/ (2,000 images)", "holdout: 10% of train"
    test_name: str | None
    notes: list[str] = field(default_factory=list)  # decisions to state (channels, holdout)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # unreadable files, why

    @property
    def val_is_test(self) -> bool:
        return self.val is self.test


def _named(source: DataSource, split: str) -> Any:
    if source.kind == "fashion_mnist":
        return fashion_mnist(split, source.path)
    assert source.kind in ("cifar10", "cifar100")
    return cifar(split, source.path, num_classes=int(source.kind[5:]))


def _synthetic(model: ModelConfig, channels: int, seed: int) -> tuple[Any, Any]:
    """One draw, so both splits share the class patterns: 32 + 8 per class."""
    data = synthetic(
        num_classes=model.num_classes,
        per_class=40,
        image_size=model.image_size,
        channels=channels,
        seed=seed,
    )
    cut = 32 * model.num_classes  # labels cycle through the classes: every prefix is balanced
    return data.subset(torch.arange(cut)), data.subset(torch.arange(cut, len(data)))


def _count(n: int, what: str = "image") -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _folder(cfg: DataConfig, path: str, mode: str | None) -> tuple[dict[str, Any], str, str]:
    """A folder's splits by name (a single tree is all ``train``), the training split's mode
    and the reason for its channels."""
    layout = folder_layout(path)
    read = functools.partial(ImageFolderDataset, max_bad_fraction=cfg.max_bad_fraction)
    if layout.kind == "tree":
        train = read(layout.root, None, mode=mode)
        return {"train": train}, train.mode, train.channels_reason
    train = read(layout.root, "train", mode=mode)
    splits = {"train": train}
    for name in ("val", "test"):
        if name in layout.splits:
            splits[name] = read(layout.root, name, mode=train.mode)
    return splits, train.mode, train.channels_reason


# The channels of the datasets known by name.
NAMED_CHANNELS = {"fashion_mnist": 1, "cifar10": 3, "cifar100": 3}


def build_data(
    cfg: DataConfig, model: ModelConfig, *, seed: int, in_chans: int | None = None
) -> RunData:
    """The train, validation and test datasets of ``cfg``. ``in_chans``: the channels the model
    takes (images of the other kind are converted: grey repeated, or RGB to PIL's luma), or
    None to take the data's (a folder: 1 when every training image is greyscale, else 3;
    synthetic images: the model's)."""
    source = cfg.source
    if in_chans is not None and in_chans not in (1, 3) and source.kind != "synthetic":
        raise ConfigError(
            f"model.in_chans={in_chans}: images have 1 channel (greyscale) or 3 (RGB)"
        )
    notes: list[str] = []
    skipped: list[tuple[str, str]] = []
    if source.kind == "synthetic":
        channels = model.in_chans if in_chans is None else in_chans
        train, test = _synthetic(model, channels, seed)
        splits: dict[str, Any] = {"train": train, "test": test}
        named = {"test": f"synthetic test ({_count(len(test))})"}
    elif source.kind == "folder":
        assert source.path is not None
        mode = None if in_chans is None else ("L" if in_chans == 1 else "RGB")
        splits, mode, reason = _folder(cfg, source.path, mode)
        channels = 1 if mode == "L" else 3
        if in_chans is None:
            notes.append(reason)
        for dataset in splits.values():
            skipped += [(str(path), why) for path, why in dataset.skipped]
        named = {k: f"{k}/ ({_count(len(v))})" for k, v in splits.items() if k != "train"}
    else:
        native = NAMED_CHANNELS[source.kind]
        channels = native if in_chans is None else in_chans
        splits = {k: _named(source, k).with_channels(channels) for k in ("train", "test")}
        named = {"test": f"{source.kind} test ({_count(len(splits['test']))})"}
        if channels != native:
            kind = "repeated into R, G and B" if native == 1 else "made grey (PIL's luma)"
            notes.append(f"{channels} channels: {source.kind}'s images {kind}, as the model takes")
    train = splits["train"]
    classes = list(train.classes)
    test = splits.get("test")

    # the split that chooses the best weights (see the module docstring)
    use: str = cfg.validation
    if use == "auto":
        use = "test" if source.kind != "folder" else "val" if "val" in splits else "holdout"
    elif use == "val_or_test":
        use = "val" if "val" in splits else "test"
    if use == "test" and test is None:
        raise ConfigError(
            f"data.validation={cfg.validation!r} but {source.spec} has no test split (test/): "
            "use 'auto' or 'holdout'"
        )
    if use == "holdout":
        kept, held = split_holdout(train, cfg.holdout, seed)
        train, val = subset(train, kept), subset(train, held)
        val_name = (
            f"a holdout of {cfg.holdout:.0%} of every class of train ({_count(len(val))}, "
            f"seed {seed})"
        )
    else:
        val, val_name = splits[use], named[use]
    if cfg.per_class is not None:
        train = subset(train, balanced_subset(train, per_class=cfg.per_class, seed=seed))
    return RunData(
        train=train,
        val=val,
        test=test,
        classes=classes,
        channels=channels,
        val_name=val_name,
        test_name=named.get("test"),
        notes=notes,
        skipped=skipped,
    )


# Training images and classes of the datasets known by name, as their releases publish them.
NAMED_SIZES = {"fashion_mnist": (60_000, 10), "cifar10": (50_000, 10), "cifar100": (50_000, 100)}


def peek_data(cfg: DataConfig, model: ModelConfig) -> tuple[int, int, str]:
    """(classes, training images, what they are) of ``cfg``'s data without reading an image: a
    folder's listing (before verification drops unreadable files), a named dataset's published
    size, the synthetic set's; the holdout a run would take out of train is taken out."""
    source = cfg.source
    if source.kind == "folder":
        assert source.path is not None
        layout = folder_layout(source.path)
        train = layout.counts.get("train", layout.counts.get(None, 0))
        classes = len(layout.classes)
        holdout = cfg.validation == "holdout" or (
            cfg.validation == "auto" and "val" not in layout.splits
        )  # (val_or_test and test never hold out)
        what = "listed, before verification"
    elif source.kind == "synthetic":
        train, classes, holdout, what = 32 * model.num_classes, model.num_classes, False, "made"
    else:
        train, classes = NAMED_SIZES[source.kind]
        holdout, what = cfg.validation == "holdout", "published"
    if holdout:  # about: the run rounds the held-out part of each class
        train -= round(cfg.holdout * train)
    return classes, train, what


def build_datasets(cfg: DataConfig, model: ModelConfig, *, seed: int) -> tuple[Any, Any, list[str]]:
    """Train and test datasets and the class names (the model's channels)."""
    data = build_data(cfg, model, seed=seed, in_chans=model.in_chans)
    return data.train, data.test if data.test is not None else data.val, data.classes


def ordered_batches(
    test: Any,
    model: ModelConfig,
    *,
    batch_size: int,
    num_workers: int = 0,
    shard: tuple[int, int] = (0, 1),
) -> Batches:
    """A test split in order, unaugmented, at the model's resolution (``shard``: this process's
    part of every batch)."""
    return Batches(
        test,
        batch_size=batch_size,
        train=False,
        image_size=model.image_size,
        num_workers=num_workers,
        shard=shard,
    )


@dataclass
class Split:
    """A split a verb runs a checkpoint over: the images, the classes and what to call it."""

    dataset: Any
    classes: list[str]
    name: str
    train: Any | None = None  # the training images of the same data (few-shot), when known


def evaluation_split(
    spec: str | None, checkpoint: Mapping[str, Any], model: ModelConfig, *, source: str
) -> Split:
    """What ``vitkit eval`` (fewshot, inspect) evaluates ``model`` on: the data ``spec`` names,
    else the data the checkpoint's run trained on (``checkpoint``: its metadata; ``source``: its
    path, for messages). Of a run's data, its test split (else its validation split: the same
    holdout it validated on); of a folder given as ``spec``, its test/ split (else val/), or the
    folder itself when it holds class folders (``DIR/val`` given directly); of a named dataset,
    its test split. Images are read with the model's channels. Only the split evaluated is
    verified, and the training split listed (few-shot), unless a holdout must be made again."""
    from ..config import RunConfig, normalise_data, recorded_data

    recorded = spec is None
    if recorded:
        if recorded_data(checkpoint) is None:
            raise DataError(
                f"{source} records no data (it was not written by vitkit train): say what to "
                "evaluate on with --data SPEC"
            )
        run = RunConfig.from_dict(checkpoint["run"])
        cfg, seed = run.data, run.train.seed
    else:
        assert spec is not None
        cfg, seed = DataConfig(dataset=normalise_data(spec)), 0
    mode = "L" if model.in_chans == 1 else "RGB"
    folder = cfg.source
    if folder.kind == "folder" and folder.path is not None:
        layout = folder_layout(folder.path)
        splits = layout.splits
        if not recorded and layout.kind == "tree":  # class folders given directly: the split
            dataset = ImageFolderDataset(layout.root, None, mode=mode)
            return Split(dataset, list(dataset.classes), f"{layout.root} ({_count(len(dataset))})")
        if recorded:  # test/, else the split the run validated on unless it was a holdout
            held = cfg.validation == "holdout" or (cfg.validation == "auto" and "val" not in splits)
            which = (
                "test" if "test" in splits else None if held else "val" if "val" in splits else None
            )
        else:
            which = next((s for s in ("test", "val") if s in splits), None)
            if which is None:
                raise DataError(
                    f"{layout.root} has only a train/ split: give the folder to evaluate (--data "
                    f"{layout.root / 'train'} evaluates the training images)"
                )
        if which is not None:
            dataset = ImageFolderDataset(layout.root, which, mode=mode)
            train = ImageFolderDataset(layout.root, "train", mode=mode, verify=False)
            name = f"{layout.root}: {which}/ ({_count(len(dataset))})"
            if recorded:
                name += " (the checkpoint's data)"
            return Split(dataset, list(dataset.classes), name, train)
    data = build_data(cfg, model, seed=seed, in_chans=model.in_chans)
    evaluated, named = (
        (data.test, data.test_name) if data.test is not None else (data.val, data.val_name)
    )
    described = f"{cfg.dataset}: {named}" + (" (the checkpoint's data)" if recorded else "")
    return Split(evaluated, data.classes, described, data.train)
