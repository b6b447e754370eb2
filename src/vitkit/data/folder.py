"""Images in class folders, decoded lazily: ``root/<split>/<class>/<image>`` or a single
``root/<class>/<image>`` tree.

The layout of ImageNet-style releases and of torchvision's ``ImageFolder``: one folder per class
(sorted names give the label order), images anywhere below it with a ``.jpg``, ``.jpeg``, ``.png``,
``.webp`` or ``.bmp`` suffix in any case. Hidden files and folders (``.DS_Store``, macOS ``._x.jpg``
shadows) are ignored. ``folder_layout`` tells the two layouts apart without opening an image.

Unreadable images. We check every file once, at construction (``verify='full'``, the default):
PIL opens it and runs ``verify()``, which parses the header (and, for PNG, every chunk's CRC)
without decoding the pixels. That costs one read of each file, about 0.1 ms for a small image:
seconds for ten thousand images, minutes for ImageNet's 1.28 million. It is done once per state of
the folder: the findings are cached under ``$VITKIT_HOME/verified/`` and read back while no file
is added, removed or touched; a large folder is checked by a pool of processes; processes that
construct the same dataset at once (torchrun ranks) verify it once (``vitkit.data.verify`` says
how). ``verify='none'`` skips the pass. A bad file is dropped from the index with a warning naming
it, and listed in ``skipped``, so indices stay fixed for the life of the dataset (the loader's
determinism depends on that); more than ``max_bad_fraction`` of the split bad is an error.
``verify()`` cannot see a truncated JPEG (only a full decode can), so an image that still fails
when it is decoded is replaced, deterministically, by the next image that decodes, with a warning;
those count against ``max_bad_fraction`` too.

Channels. With ``mode=None`` the same pass decides between 1 channel and 3: 1 when every image is
greyscale, by its PIL mode or by decoding to R = G = B (see ``ImageFolderDataset``).

Decoding is ``vitkit.data.codec``'s: PIL's pixels of the upright image (EXIF orientation), JPEGs
faster, and an inception crop decoded at a reduced size when the crop allows it
(``ImageFolderDataset.inception_crop``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import torch
from torch import Tensor

from ..errors import ConfigError, DataError, MissingFileError
from .arrays import as_indices
from .decoded import DecodedImages, skip_unreadable
from .verify import LEVELS, Findings, Level, verify_listing

# The files listed as images, in any case; what they may hold is codec.FORMATS, whatever the name.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
SPLITS = ("train", "val", "test")


def _visible(name: str) -> bool:
    return not name.startswith(".")


def _is_image(name: str) -> bool:
    return _visible(name) and os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES


def _subfolders(folder: Path) -> list[str]:
    return sorted(d.name for d in folder.iterdir() if d.is_dir() and _visible(d.name))


def _walk_images(folder: Path) -> Iterator[tuple[str, str]]:
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = [d for d in dirnames if _visible(d)]
        yield from ((dirpath, f) for f in filenames if _is_image(f))


def image_files(folder: Path) -> list[Path]:
    """Every image file below ``folder``, recursively and sorted (path by path); hidden files and
    folders (a leading dot: .DS_Store, macOS ._x.jpg shadows) are skipped."""
    return sorted(Path(dirpath, f) for dirpath, f in _walk_images(folder))


def _no_images_error(class_dir: Path) -> DataError:
    return DataError(
        f"class folder {class_dir} holds no images "
        f"(expected files ending in {', '.join(IMAGE_SUFFIXES)})"
    )


def _holds_split(folder: Path) -> bool:
    """Whether a folder named like a split looks like one: folders inside, no image directly."""
    with os.scandir(folder) as it:  # DirEntry.is_dir needs no stat call on most file systems
        entries = [(e.name, e.is_dir()) for e in it]
    has_folder = any(is_dir and _visible(name) for name, is_dir in entries)
    return has_folder and not any(_is_image(name) for name, is_dir in entries if not is_dir)


def _split_names(root: Path) -> list[str]:
    """The split folders of ``root`` in ``SPLITS`` order, or [] when it is a single tree (the rule
    is ``folder_layout``'s)."""
    expected = f"expected {root}/<class>/<image> or {root}/train/<class>/<image>"
    if not root.exists():
        raise MissingFileError(f"data folder {root} not found ({expected})")
    if not root.is_dir():
        raise DataError(f"data folder {root} is not a folder ({expected})")
    found = _subfolders(root)
    if not found:
        images = sum(1 for e in root.iterdir() if _is_image(e.name))
        raise DataError(
            f"{root} holds no class folders and no split folders ({expected}); found {images} "
            "images directly in it"
        )
    named = [s for s in SPLITS if s in found]
    others = [d for d in found if d not in SPLITS]
    if not named:
        return []
    if others:
        if not any(_holds_split(root / s) for s in named):
            return []  # class folders that happen to be called so, e.g. 'train' beside 'bus'
        raise DataError(
            f"{root} mixes split folders {named} with other folders {others}: expected only "
            f"{', '.join(SPLITS)} (each holding <class>/<image>) or only class folders"
        )
    if "train" not in named:
        raise DataError(
            f"{root} holds split folders {named} but no train/: expected {root}/train/<class>/"
            f"<image> beside them (to use one split, give its folder, e.g. {root / named[0]})"
        )
    return named


def _train_beside(split_dir: Path, *, named: bool) -> Path | None:
    """The train folder whose classes ``split_dir``'s must equal: ``root/train`` beside a split given
    by name other than train, or beside a val/ or test/ folder given directly."""
    if split_dir.name == "train" or (not named and split_dir.name not in SPLITS):
        return None
    train_dir = split_dir.parent / "train"
    return train_dir if train_dir.is_dir() else None


def _check_classes(split_dir: Path, classes: list[str], train_dir: Path | None) -> None:
    if train_dir is None:
        return
    train_classes = _subfolders(train_dir)
    if classes != train_classes:
        raise DataError(
            f"the class folders of {split_dir} and {train_dir} differ: only in "
            f"{split_dir.name}: {sorted(set(classes) - set(train_classes))}, only in train: "
            f"{sorted(set(train_classes) - set(classes))}"
        )


@dataclass(frozen=True)
class FolderLayout:
    """What ``folder_layout`` found: the splits, their class names and their (unverified) image
    counts.

    ``splits`` maps a split's name to the folder holding its class folders; a single tree is the one
    split ``None``, so ``ImageFolderDataset(layout.root, name)`` reads any of them.
    """

    root: Path
    splits: Mapping[str | None, Path]
    classes: tuple[str, ...]
    counts: Mapping[str | None, int]  # image files per split, before verification

    @property
    def kind(self) -> Literal["splits", "tree"]:
        """``'tree'`` for ``root/<class>/<image>``, ``'splits'`` for ``root/<split>/<class>/...``."""
        return "tree" if None in self.splits else "splits"


def folder_layout(root: str | os.PathLike) -> FolderLayout:
    """The layout of an image folder, from directory listings only (no image is opened).

    The rule, on ``root``'s visible subfolders: when all are named train, val or test, ``root`` is a
    split layout, ``root/<split>/<class>/<image>``; train must be among them, and each must hold
    class folders. When none is, ``root`` is a single tree, ``root/<class>/<image>``: so is a split's
    folder given directly (``DIR/val``). When both kinds are there, ``root`` is a tree if none of
    the split-named folders looks like a split (folders inside, no image directly: a class 'train'
    of images beside 'bus' and 'car'), and an error otherwise (``train/`` beside ``logs/``). A
    folder with no subfolder is an error. Class folders of val/test must equal train's, also for a
    val/ or test/ folder given directly beside a train/ folder. Counts are of image files, before
    ``ImageFolderDataset`` verifies them.
    """
    root = Path(root)
    names = _split_names(root)
    keys: list[str | None] = list(names) if names else [None]
    splits: dict[str | None, Path] = {k: root if k is None else root / k for k in keys}
    counts: dict[str | None, int] = {}
    classes: list[str] = []
    for key, split_dir in splits.items():
        found = _subfolders(split_dir)
        if not found:
            raise DataError(f"{split_dir} holds no class folders, expected <class>/<image>")
        _check_classes(split_dir, found, _train_beside(split_dir, named=key is not None))
        if key in (None, "train"):
            classes = found
        counts[key] = 0
        for name in found:
            n = sum(1 for _ in _walk_images(split_dir / name))
            if n == 0:
                raise _no_images_error(split_dir / name)
            counts[key] += n
    return FolderLayout(
        root=root,
        splits=MappingProxyType(splits),
        classes=tuple(classes),
        counts=MappingProxyType(counts),
    )


class ImageFolderDataset(DecodedImages):
    """Images in class folders; items are (uint8 (C, H, W), label).

    ``ImageFolderDataset(root, split)`` reads ``root/<split>/<class>/<image>``;
    ``ImageFolderDataset(folder, None)`` reads ``folder/<class>/<image>``: a single tree, or one
    split's folder given directly (``DIR/val``). A split other than train must have the same class
    folders as the ``train`` folder beside it when there is one (``root/train`` for a split given by
    name, ``DIR/train`` for ``DIR/val`` or ``DIR/test`` given directly), so labels mean the same
    thing in both.

    Every image is converted to ``mode``: ``'RGB'`` (C=3) or ``'L'`` (C=1). ``mode=None`` decides
    during verification: ``'L'`` when every image is greyscale (see ``verify.grey_kind``), else
    ``'RGB'``; pass the training split's decided ``mode`` to its val/test splits. Images with a
    one-channel mode cost nothing more; the others are decoded only until the first colour image,
    so a colour dataset costs one decode, but a grey dataset stored as RGB (or palette) costs one
    full decode of every image, as long as an epoch of loading without the resize (a few ms per
    ImageNet-sized JPEG); pass ``mode`` to skip it. ``mode``, ``channels`` and ``channels_reason``
    (one line, for the log) hold the outcome. Images keep their own size; the loader resizes them.

    ``verify`` is how much of each file is checked at construction (for runs, the config key
    ``data.verify``):

    - ``'full'`` (or ``True``): ``verify()`` every file, and with ``mode=None`` decode until the
      first colour image, as above.
    - ``'header'``: ``verify()`` every file; with ``mode=None`` the channels come from the files'
      PIL modes alone, nothing decoded: 1 when every file has a one-channel mode, else 3 (a grey
      image stored as RGB counts as colour). With a given ``mode`` it is the same pass as
      ``'full'``.
    - ``'none'`` (or ``False``): the listing only, for trees too large to open twice; a file that
      fails to decode is replaced when it is read. Needs a given ``mode``.

    The findings of a pass are cached (``verify_cache=False``: not read, not written) and a pass
    over ``verify.PARALLEL_MIN_FILES`` files or more is split across ``verify_workers`` processes
    (None: every core this process may use; 0 or 1: serial); ``vitkit.data.verify`` says how, and
    how several processes share one pass. ``verified_from`` is the cache entry used (read or
    written), None without one; ``verified_cached`` whether it was read rather than computed.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        split: str | None = "train",
        *,
        mode: str | None = "RGB",
        verify: bool | Level = "full",
        max_bad_fraction: float = 0.01,
        verify_workers: int | None = None,
        verify_cache: bool = True,
    ) -> None:
        level = _level(verify)
        if mode not in ("RGB", "L", None):
            raise ConfigError(f"mode={mode!r} is not valid: expected 'RGB', 'L' or None")
        if mode is None and level == "none":
            raise ConfigError(
                "mode=None decides the channels while verifying every image: expected "
                "verify='full' or 'header', or mode='RGB' or 'L' with verify='none'"
            )
        if not 0.0 <= max_bad_fraction < 1.0:
            raise ConfigError(
                f"max_bad_fraction={max_bad_fraction!r} is not valid: expected a number in [0, 1)"
            )
        if verify_workers is not None and (type(verify_workers) is not int or verify_workers < 0):
            raise ConfigError(
                f"verify_workers={verify_workers!r} is not valid: expected None or an integer >= 0"
            )
        self.root = Path(root)
        self.split = split
        self.max_bad_fraction = max_bad_fraction
        self.verify = level
        if split is None:
            names = _split_names(self.root)
            if names:
                raise DataError(
                    f"{self.root} holds split folders {names}, not class folders: expected a split "
                    f"name (split={names[0]!r}) or the split's folder ({self.root / names[0]})"
                )
            self.split_dir = self.root
        else:
            self.split_dir = self.root / split
        if not self.split_dir.is_dir():
            found = _subfolders(self.root) if self.root.is_dir() else []
            raise MissingFileError(
                f"split folder {self.split_dir} not found (expected {self.root}/{split}/<class>/"
                f"<image>); {self.root} holds {found or 'no folders'}"
            )
        self.classes = _subfolders(self.split_dir)
        if not self.classes:
            raise DataError(f"{self.split_dir} holds no class folders, expected <class>/<image>")
        _check_classes(
            self.split_dir, self.classes, _train_beside(self.split_dir, named=split is not None)
        )
        samples: list[tuple[Path, int]] = []
        for label, name in enumerate(self.classes):
            files = image_files(self.split_dir / name)
            if not files:
                raise _no_images_error(self.split_dir / name)
            samples += [(path, label) for path in files]
        self.skipped: list[tuple[Path, str]] = []  # (file, why) dropped by verification
        self.verified_from: Path | None = None
        self.verified_cached = False
        decided: tuple[str, str] | None = None
        if level != "none":
            self.samples, decided = self._verify(
                samples,
                level=level,
                decide=mode is None,
                workers=verify_workers,
                cache=verify_cache,
            )
        else:
            self.samples = samples
        if mode is not None:
            decided = mode, f"{_channels(mode)}: mode={mode!r} was given"
        assert decided is not None  # mode=None without verify was refused above
        self.mode, self.channels_reason = decided
        self.channels = 1 if self.mode == "L" else 3
        self.labels = torch.tensor([label for _, label in self.samples], dtype=torch.int64)
        self._failed: set[str] = set()  # images that passed the check but failed to decode

    def _verify(
        self,
        samples: list[tuple[Path, int]],
        *,
        level: Level,
        decide: bool,
        workers: int | None,
        cache: bool,
    ) -> tuple[list[tuple[Path, int]], tuple[str, str] | None]:
        """Check every file (or read what a pass found from the cache): the readable samples and,
        if ``decide``, (the mode they call for, why); the unreadable ones go to ``skipped``, with a
        warning each."""
        files = [path.relative_to(self.split_dir).as_posix() for path, _ in samples]
        found = verify_listing(
            self.split_dir, files, level=level, decide=decide, workers=workers, cache=cache
        )
        self.verified_from, self.verified_cached = found.cache, found.hit
        bad = [(samples[i][0], why) for i, _, why in found.skipped]
        skip_unreadable(bad, len(samples), self.split_dir, self.max_bad_fraction, stacklevel=3)
        self.skipped = bad
        dropped = {i for i, _, _ in found.skipped}
        kept = [sample for i, sample in enumerate(samples) if i not in dropped]
        missing = sorted({self.classes[k] for _, k in samples} - {self.classes[k] for _, k in kept})
        if missing:
            raise DataError(
                f"no readable image left in class folder(s) {missing} of {self.split_dir}"
            )
        return kept, (self._decision(found, files, len(kept)) if decide else None)

    def _decision(self, found: Findings, files: list[str], kept: int) -> tuple[str, str]:
        """(the mode a deciding pass calls for, why)."""
        header = found.level == "header"
        if found.colour is not None:
            index, image_mode = found.colour
            why = f"{files[index]} in {self.split_dir} is in colour (mode {image_mode})"
            if header:
                why = (
                    f"{files[index]} in {self.split_dir} has mode {image_mode} (verify='header' "
                    "reads the modes only: a grey image stored in colour counts as colour)"
                )
            return "RGB", f"{_channels('RGB')}: {why}"
        kinds = ", ".join(f"{n:,} in mode {kind}" for kind, n in found.grey.items())
        why = f"all {kept:,} images in {self.split_dir} are greyscale ({kinds})"
        return "L", f"{_channels('L')}: {why}"

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def where(self) -> str:
        return str(self.split_dir)

    def name_of(self, index: int) -> str:
        return str(self.samples[index][0])

    def label_of(self, index: int) -> int:
        return self.samples[index][1]

    def encoded(self, index: int) -> bytes:
        return self.samples[index][0].read_bytes()

    def subset(self, indices: Tensor | Sequence[int]) -> ImageFolderDataset:
        """The images at ``indices``, in that order, with the same classes and settings."""
        idx = as_indices(indices, len(self)).tolist()
        out = copy.copy(self)
        out.samples = [self.samples[i] for i in idx]
        out.labels = self.labels[idx]
        out._failed = set()
        return out


def verify_image_folder(
    root: str | os.PathLike,
    *,
    mode: str | None = "RGB",
    verify: bool | Level = "full",
    max_bad_fraction: float = 0.01,
    verify_workers: int | None = None,
) -> dict[str | None, ImageFolderDataset]:
    """Every split of the image folder ``root`` (``folder_layout``'s), verified and cached, by
    name (a single tree is ``None``).

    What a job of several processes calls in each of them before it joins its process group:
    the first verifies (split across the cores) and caches, the others wait on the cache's lock
    and read it, and every ``ImageFolderDataset`` built later with the same ``verify`` and
    ``mode`` (the training loop's) reads the cache instead of opening an image. Before the group
    is joined, no rank can hit the collective timeout however long the first start takes. The
    train split (or the tree) decides the channels when ``mode=None``; the others get its mode.
    """
    layout = folder_layout(root)
    first = "train" if "train" in layout.splits else None

    def read(split: str | None, split_mode: str | None) -> ImageFolderDataset:
        return ImageFolderDataset(
            layout.root,
            split,
            mode=split_mode,
            verify=verify,
            max_bad_fraction=max_bad_fraction,
            verify_workers=verify_workers,
        )

    datasets = {first: read(first, mode)}
    for split in layout.splits:
        if split != first:
            datasets[split] = read(split, datasets[first].mode)
    return datasets


def _channels(mode: str) -> str:
    return "1 channel" if mode == "L" else "3 channels"


def _level(verify: object) -> Level:
    """``verify`` as a level: True is 'full', False is 'none' (their meaning before levels)."""
    if verify is True or verify is False:
        return "full" if verify else "none"
    if verify not in LEVELS:
        raise ConfigError(
            f"verify={verify!r} is not valid: expected one of {', '.join(map(repr, LEVELS))} "
            "(or True for 'full', False for 'none')"
        )
    return verify
