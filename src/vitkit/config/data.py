"""The data section of a run (``DataConfig``) and the grammar of data specs (``data.dataset``:
``DIR``, ``fashion_mnist[:DIR]``, ``wds:DIR``, ``hf:PATH``, ``vtab:DIR``, ``synthetic``...),
with the bounds a new run keeps on the toolbox's counts. No torch import here.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from ..compat import VAL_OR_TEST, fold_data_dir
from ..errors import ConfigError
from .augment import (
    AUTO_AUGMENTS,
    MAX_MAGNITUDE,
    MAX_OPS,
    parse_auto_augment,
    why_not_new,
)
from .keys import Kind, Section, key, refusal
from .model import require

Validation = Literal["auto", "holdout", "val", "test"]


ImagePaths = Literal["dataset", "any"]


Verify = Literal["full", "header", "none"]


DataKind = Literal[
    "fashion_mnist", "cifar10", "cifar100", "synthetic", "folder", "wds", "hf", "vtab", "vtab800"
]


# Datasets known by name; each may be followed by ':DIR', the folder holding its files.
NAMED: tuple[DataKind, ...] = ("fashion_mnist", "cifar10", "cifar100")


# Datasets in shards: the kind, then ':' and where they are (required).
SHARDED: dict[DataKind, str] = {
    "wds": "wds:DIR, the folder of its {split}-*.tar shards",
    "hf": "hf:PATH or hf:NAME, a save_to_disk folder, parquet files or a Hub dataset",
    "vtab": "vtab:DIR, a VTAB-1k task folder (DIR/train800val200.txt, DIR/test.txt, DIR/images/)",
    "vtab800": "vtab800:DIR, a VTAB-1k task folder (DIR/train800.txt, DIR/val200.txt, ...)",
}


DATA_SPECS = (
    "DIR (a folder of class folders), fashion_mnist[:DIR], cifar10[:DIR], cifar100[:DIR], "
    "wds:DIR (tar shards), hf:PATH|NAME (Hugging Face datasets), vtab:DIR (a VTAB-1k task's "
    "lists: train800val200 to train, test; vtab800:DIR: train800 to train, val200) or synthetic"
)


@dataclass(frozen=True)
class DataSource:
    """What a data spec names: a dataset ``kind`` and where its files are (None: the default
    places, data/sources/paths.py)."""

    kind: DataKind
    path: str | None = None

    @property
    def spec(self) -> str:
        if self.kind == "folder":
            return str(self.path)
        return self.kind if self.path is None else f"{self.kind}:{self.path}"


def data_source(spec: str) -> DataSource:
    """Parse a data spec: ``DIR`` (or ``folder:DIR``), ``fashion_mnist[:DIR]``,
    ``cifar10[:DIR]``, ``cifar100[:DIR]``, ``wds:DIR``, ``hf:PATH`` or ``hf:NAME``,
    ``synthetic``; a ``ConfigError`` for anything else."""
    name, sep, rest = spec.partition(":")
    if name in SHARDED and sep:
        if not rest:
            raise ConfigError(f"data {spec!r}: expected {SHARDED[name]}")
        return DataSource(name, rest)
    if name in NAMED:
        if sep and not rest:
            raise ConfigError(f"data {spec!r}: expected {name}:DIR, the folder holding its files")
        return DataSource(name, rest or None)
    if name == "synthetic":
        if sep:
            raise ConfigError(f"data {spec!r}: synthetic images are made, not read: 'synthetic'")
        return DataSource("synthetic")
    if name == "folder" and sep:
        spec = rest
    if spec in ("", "folder"):
        raise ConfigError(
            f"data {spec!r} names no folder: give the image folder itself (--data DIR); "
            f"expected {DATA_SPECS}"
        )
    return DataSource("folder", spec)


def data_name(spec: str) -> str:
    """A data spec's short name, as few-shot tables and metric names show it: a named dataset's
    kind (``cifar10``), else the last part of its folder or path (``/data/pets`` -> ``pets``; a
    glob's or a parquet file's folder), or a Hub dataset's name (``hf:user/beans`` ->
    ``beans``); characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``."""
    source = data_source(spec)
    if source.path is None or source.kind in NAMED:
        return source.kind
    parts = [p for p in source.path.split("/") if p and p not in (".", "..")]
    plain = [p for p in parts if not any(c in p for c in "*?[")]  # a glob's folder
    if len(plain) > 1 and plain[-1].endswith(".parquet"):  # data/beans/train.parquet: beans
        plain.pop()
    name = (plain[-1] if plain else source.kind).removesuffix(".parquet") or source.kind
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def data_names(specs: Sequence[str]) -> list[str]:
    """``data_name`` of each spec, a repeated name numbered from its second use (``test``,
    ``test-2``), so that each spec of a list has its own."""
    names: list[str] = []
    for spec in specs:
        name, n = data_name(spec), 2
        while name in names:
            name, n = f"{data_name(spec)}-{n}", n + 1
        names.append(name)
    return names


def hf_is_local(path: str) -> bool:
    """Whether ``hf:PATH`` names files on this machine (a folder, a parquet file or a glob of
    them) rather than a dataset on the Hub: it exists, has a glob character or a ``.parquet``
    suffix, or starts like a path (``/``, ``.``, ``~``). So ``hf:./mnist`` is the folder and
    ``hf:mnist`` the Hub's dataset unless a folder ``mnist`` is here."""
    return (
        os.path.exists(os.path.expanduser(path))
        or any(c in path for c in "*?[")
        or path.endswith(".parquet")
        or path.startswith(("/", ".", "~"))
    )


def normalise_data(spec: str) -> str:
    """A data spec with its folder made absolute (``~`` expanded), so that the run records where
    the data is whatever the directory a later command runs from (a Hub name stays a name); a
    folder holding ``train800val200.txt`` (a prepared VTAB-1k task) is ``vtab:DIR``."""
    source = data_source(spec)
    if source.path is None or (source.kind == "hf" and not hf_is_local(source.path)):
        return source.spec
    path = os.path.abspath(os.path.expanduser(source.path))
    if source.kind == "folder" and os.path.isfile(os.path.join(path, "train800val200.txt")):
        return f"vtab:{path}"  # a VTAB-1k task folder given as a folder: its lists, not a tree
    return dataclasses.replace(source, path=path).spec


DataSpec = Annotated[str, Kind("data", refusal(data_source), DATA_SPECS, entered=normalise_data)]


AutoAugmentSpec = Annotated[
    str,
    Kind("augmentation", refusal(parse_auto_augment), AUTO_AUGMENTS, why_not_new=why_not_new),
]


# A new run's bounds on the toolbox's counts (config/keys.py ``check_new``: a run recorded
# before them keeps its value): generous beside timm's and DeiT's values.
MAX_AUG_REPEATS, MAX_ERASE_COUNT = 64, 16
# Decoding processes per training process: a machine's cores and more; 100,000 (a typo) was
# taken, and would have started that many processes. Where the run computes, not what: any run.
MAX_WORKERS = 1024


@dataclass(frozen=True, kw_only=True)
class DataConfig(Section):
    """Where the images come from and how they are augmented [P App. B.1.1 for the official
    fine-tuning pipeline: inception crop, resize, values scaled to [-1, 1]]."""

    SECTION: ClassVar[str] = "data"
    RENAMED: ClassVar[Mapping[str, Any]] = {"data_dir": fold_data_dir}

    dataset: DataSpec = key("fashion_mnist", doc=f"what to train on: {DATA_SPECS}")
    crop_padding: int = key(0, doc="random crop after zero padding by this many pixels", ge=0)
    flip: bool = key(False, doc="random horizontal flips in training")
    test_flip: bool = key(
        False,
        doc="evaluate each image and its mirror image, averaging the class probabilities (twice "
        "the evaluation's forward passes)",
    )
    inception_crop: bool = key(False, doc="random-resized (inception) crops [P App. B.1.1]")
    rand_augment: bool = key(False, doc="RandAugment(2, 10)")
    aug_repeats: int = key(
        1,
        doc="repeated augmentation r (DeiT's RASampler, timm's --aug-repeats): an epoch keeps "
        "about the dataset's size but serves about 1/r of its images, r times each, differently "
        "augmented; under torchrun with r or more processes an image's copies land on different "
        f"ones (data/loader.py); 1 = off; not with data.streaming; DeiT's is 3, a new run's at "
        f"most {MAX_AUG_REPEATS} and fewer than its training images",
        ge=1,
        new_le=MAX_AUG_REPEATS,
    )
    per_class: int | None = key(None, doc="a class-balanced subset of the training set", ge=1)
    num_workers: int | None = key(
        None,
        doc="processes decoding images per process (0: the process itself; none: the machine's "
        "cores divided among its processes, less one); where the run computes, not what: a "
        "resume may change it",
        ge=0,
        le=MAX_WORKERS,
    )
    verify: Verify = key(
        "full",
        doc="how much of each image a split's first read checks: full = PIL's verify() of "
        "every image (and decoding until a colour image when the channels are decided); header "
        "= verify() only, channels from the images' modes; none = the listing only, a bad image "
        "replaced when read (needs model.in_chans). The findings of a folder, of shards and of "
        "an hf: table on disk are cached under $VITKIT_HOME, per state of the data",
    )
    keep_decoded_mb: int = key(
        2048,
        doc="a folder's training images are decoded once and kept in memory, resized to twice "
        "the model's resolution, when they fit in this many MiB (per process: each of torchrun's "
        "processes keeps them all); later epochs crop from there (0: decoded from their files "
        "every epoch, as shards and streams are)",
        ge=0,
    )
    max_bad_fraction: float = key(
        0.01,
        doc="the fraction of a split's images that may be unreadable (each skipped and named)",
        ge=0,
        lt=1,
    )
    validation: Validation = key(
        "auto",
        doc="what chooses the best weights: auto = a folder's (or shards') val split, else a "
        "seeded holdout of its train split (the test split for fashion_mnist, cifar, synthetic, "
        "and for a stream without a val split); holdout; val (an error without one); test",
        earlier=(VAL_OR_TEST,),
    )
    holdout: float = key(
        0.1,
        doc="the fraction of every class held out of train to validate on (seeded by train.seed)",
        gt=0,
        lt=1,
    )
    image_column: str = key(
        "image", doc="hf: the column of the images (an Image feature, or encoded bytes)"
    )
    label_column: str = key(
        "label",
        doc="hf: the column of the labels (a ClassLabel, integers from 0, or class names)",
    )
    image_paths: ImagePaths = key(
        "dataset",
        doc="hf: where an image cell that stores a path instead of bytes may point, and vtab: "
        "where a list's path may lead through links: dataset = a relative path inside the "
        "dataset's own folder (no '..'; a VTAB task's folder or the target of its images/ "
        "link); any = any local file (what datasets built with cast_column('image', Image()) "
        "store); regular files only, either way",
    )
    max_image_bytes: int = key(
        64 * 2**20,
        doc="the largest encoded image a file, a shard's member or an hf: cell may hold or point "
        "to, in bytes (a larger one is unreadable, skipped and named)",
        ge=1,
    )
    max_image_pixels: int = key(
        2**27,
        doc="the most pixels (width x height, from the header) an image may have: a larger one is "
        "unreadable, refused before it is decoded (134 MP: a 108 MP phone photo, 12,000 x 9,000, "
        "reads; a 13,000 x 13,000 PNG of 0.5 MB, 2.9 GB to decode, does not); PIL refuses more "
        "than 178,956,970 whatever this says (a 200 MP photo)",
        ge=1,
    )
    streaming: bool = key(
        False,
        doc="hf: read the parquet files as a stream, row group by row group, instead of "
        "converting them to memory-mapped Arrow first (data/stream.py)",
    )
    shuffle_buffer: int = key(
        1000,
        doc="streaming: training rows are shuffled within windows of at least this many (their "
        "images held in memory)",
        ge=1,
    )
    random_erase: float = key(
        0.0,
        doc="random erasing's probability per image (timm's --reprob, pixel mode: boxes of "
        "N(0, 1) noise in the [-1, 1] inputs, drawn on the device); 0 = off",
        ge=0,
        le=1,
    )
    random_erase_count: int = key(
        1,
        doc="random erasing: at most this many boxes per image, 1 to it (timm's --recount, 1 "
        f"unless set; a new run's at most {MAX_ERASE_COUNT}: the boxes' mask is (batch, count, "
        "H, W))",
        ge=1,
        new_le=MAX_ERASE_COUNT,
    )
    auto_augment: AutoAugmentSpec | None = key(
        None,
        doc="timm's --aa strings (config/augment.py, data/autoaugment.py): rand-m9-mstd0.5-inc1 "
        "(RandAugment: n ops, magnitude m on 0..10 with noise std mstd clipped to [0, mmax], inc "
        f"ops, each applied with p 0.5; timm's n is 2-4, a new run's at most {MAX_OPS}, mmax at "
        f"most {MAX_MAGNITUDE}), original (AutoAugment's ImageNet policy), trivial "
        "(TrivialAugment wide); timm's ops and magnitudes on torchvision's tensor ops: bilinear "
        "where timm draws bilinear or bicubic, grey fill 128 (timm's for mean 0.5)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            not (self.rand_augment and self.auto_augment),
            "data.auto_augment",
            self.auto_augment,
            "none with data.rand_augment=True (RandAugment(2, 10)): choose one augmentation",
        )
        require(
            not (self.inception_crop and self.crop_padding),
            "data.crop_padding",
            self.crop_padding,
            "0 with data.inception_crop=True (the inception crop excludes crop padding: choose "
            "one way of cropping)",
        )
        require(
            not self.streaming or self.source.kind == "hf",
            "data.streaming",
            self.streaming,
            f"False for {self.dataset} (only hf: data is streamed; the rest is read with random "
            "access)",
        )
        require(
            not (self.streaming and self.aug_repeats > 1),
            "data.aug_repeats",
            self.aug_repeats,
            "1 with data.streaming=True (a stream's windows cannot repeat an image in one epoch)",
        )

    @property
    def source(self) -> DataSource:
        return data_source(self.dataset)
