"""From a ``DataConfig`` to the datasets and batches a run trains and evaluates on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..config import DataConfig, ModelConfig
from ..data import (
    Batches,
    ImageFolderDataset,
    balanced_subset,
    cifar,
    fashion_mnist,
    subset,
    synthetic,
)
from ..errors import ConfigError


def _split(name: str, data_dir: str | None, split: str, model: ModelConfig, seed: int) -> Any:
    if name == "fashion_mnist":
        return fashion_mnist(split, data_dir)
    if name in ("cifar10", "cifar100"):
        return cifar(split, data_dir, num_classes=int(name[5:]))
    if name == "folder":
        if not data_dir:
            raise ConfigError("dataset 'folder' needs its root: --data-dir (or data.data_dir)")
        if split == "test":
            split = "val" if (Path(data_dir) / "val").is_dir() else "test"
        return ImageFolderDataset(data_dir, split, mode="L" if model.in_chans == 1 else "RGB")
    if name == "synthetic":  # one draw, so both splits share the class patterns: 32 + 8 per class
        data = synthetic(
            num_classes=model.num_classes,
            per_class=40,
            image_size=model.image_size,
            channels=model.in_chans,
            seed=seed,
        )
        cut = 32 * model.num_classes  # labels cycle through the classes: every prefix is balanced
        return data.subset(torch.arange(cut) if split == "train" else torch.arange(cut, len(data)))
    raise ConfigError(f"unknown dataset {name!r}")


def build_datasets(cfg: DataConfig, model: ModelConfig, *, seed: int) -> tuple[Any, Any, list[str]]:
    """Train and test datasets and the class names; the training set is subset if asked."""
    train = _split(cfg.dataset, cfg.data_dir, "train", model, seed)
    test = _split(cfg.dataset, cfg.data_dir, "test", model, seed)
    classes = list(train.classes)
    _check_channels(train, cfg.dataset, model)
    if cfg.per_class is not None:
        indices = balanced_subset(train, per_class=cfg.per_class, seed=seed)
        train = subset(train, indices)
    return train, test, classes


def _check_channels(dataset: Any, name: str, model: ModelConfig) -> None:
    channels = dataset[0][0].shape[0]
    if channels != model.in_chans:
        raise ConfigError(
            f"model.in_chans={model.in_chans} but {name} images have {channels} channels"
        )


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


def eval_batches(
    dataset: str, data_dir: str | None, model: ModelConfig, *, batch_size: int
) -> tuple[Batches, list[str]]:
    """The test split of a dataset by name (for ``vitkit eval``) and its class names."""
    test = _split(dataset, data_dir, "test", model, seed=0)
    _check_channels(test, dataset, model)
    return ordered_batches(test, model, batch_size=batch_size), list(test.classes)
