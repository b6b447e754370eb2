"""What a data spec holds, listed before an image is read (``Listing``), as each kind lists
itself (``listing`` in its module of data/sources/, found in sources/registry.py), and what the
kinds share: how image files are read (``reading_of``) and spoken of (``decoded_notes``), and a
named set held in memory (``held``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, cast

from ..config import DataConfig, ModelConfig
from ..errors import ConfigError
from .arrays import ArrayDataset
from .contract import Images
from .decoded import DecodedImages, Reading
from .survey import shorter_sides
from .transforms import mode_of

LISTED = "listed, before verification"  # how a peek counted images from a listing
# What a run says of its training split once read: (train, model, seed, channels decided?)
Stated = Callable[[Images, ModelConfig, int, bool], list[str]]


def decoded_notes(train: Images, model: ModelConfig, seed: int, decided: bool) -> list[str]:
    """``Listing.stated`` of image files: why they have their channels (when ``decided`` by
    them), and their median shorter side from the headers of at most ``survey.SAMPLE`` of
    them, with a hint when the model sees under a quarter of it."""
    images = cast(DecodedImages, train)  # what the kinds that state this read
    notes = [str(images.channels_reason)] if decided else []
    sides = shorter_sides(images, seed=seed)
    if sides is None:
        return notes
    of = "all" if sides.sampled == len(images) else "seeded"
    notes.append(
        f"images: median shorter side {sides.median:,} px (the headers of {of} "
        f"{sides.sampled:,} training images, upright)"
    )
    hint = sides.hint(model.image_hw)
    return notes if hint is None else [*notes, hint]


@dataclass
class Listing:
    """The splits of one data spec, listed, not read."""

    root: str  # the data, as messages name it
    names: tuple[str, ...]  # its splits of train, val and test, in that order
    read: Callable[[str, int | None, bool], Images]  # (split, channels (None: the data's), verify)
    label: Callable[[str], str]  # a split as the run names it: "val/", "val shards", "cifar10 test"
    named: bool = True  # False: one set of images (a single tree, unnamed shards), called train
    notes: list[str] = field(default_factory=list)  # what to say of its classes' order
    auto: Literal["holdout", "test"] = "holdout"  # data.validation='auto' without a val split
    stated: Stated = decoded_notes  # (image files'; a kind that reads none says its own)
    sizes: Callable[[], tuple[int, int, str]] | None = None  # ``peek``'s, when not from a listing
    train_spec: str | None = None  # the spec of the training images alone (a folder's train/)

    def peek(self) -> tuple[int, int, str]:
        """(classes, training images, how they were counted), no image decoded: ``sizes``,
        else the training split's listing (before verification)."""
        if self.sizes is not None:
            return self.sizes()
        train = self.read("train", 3, False)
        return len(train.classes), len(train), LISTED


# How a kind lists ``cfg``'s data: (cfg, the model (None when only the names are wanted), seed).
Lister = Callable[[DataConfig, ModelConfig | None, int], Listing]


def image_mode(channels: int | None) -> str | None:
    """The mode images are read in for a model of ``channels`` (None: the data decides)."""
    if channels is not None and channels not in (1, 3):
        raise ConfigError(
            f"model.in_chans={channels}: images have 1 channel (greyscale) or 3 (RGB)"
        )
    return None if channels is None else mode_of(channels)


def reading_of(cfg: DataConfig, channels: int | None, verify: bool) -> Reading:
    """How a split of ``cfg``'s image files is read with ``channels`` (None: decided from the
    images), verified as ``data.verify`` says, or (``verify=False``) its listing only."""
    mode = image_mode(channels)
    if mode is None and cfg.verify == "none" and not cfg.streaming:  # a stream reads RGB
        raise ConfigError(
            "data.verify=none opens no image before training, so it cannot decide the "
            "channels: set model.in_chans=3 (or 1), or data.verify=header"
        )
    return {
        "mode": mode,
        "verify": cfg.verify if verify else "none",
        "max_bad_fraction": cfg.max_bad_fraction,
        "max_image_bytes": cfg.max_image_bytes,
        "max_image_pixels": cfg.max_image_pixels,
    }


def held(
    cfg: DataConfig, load: Callable[[str], ArrayDataset], *, channels: int, size: tuple[int, int]
) -> Listing:
    """A named set: its train and test splits as ``load`` reads them, held in memory with
    ``channels`` channels (converted for a model of the other kind), and ``size`` (training
    images, classes) as its release publishes it. It validates on test, as the paper's figures
    do (then val is test, evaluated once)."""
    kind = cfg.source.kind

    def read(split: str, wanted: int | None, verify: bool) -> ArrayDataset:
        image_mode(wanted)  # 1 or 3
        return load(split).with_channels(channels if wanted is None else wanted)

    def stated(train: Images, model: ModelConfig, seed: int, decided: bool) -> list[str]:
        how = "repeated into R, G and B" if channels == 1 else "made grey (PIL's luma)"
        said = f"{train.channels} channels: {kind}'s images {how}, as the model takes"
        return [] if train.channels == channels else [said]

    label, sizes = f"{kind} {{}}".format, (lambda: (size[1], size[0], "published"))
    return Listing(
        cfg.dataset, ("train", "test"), read, label, auto="test", stated=stated, sizes=sizes
    )
