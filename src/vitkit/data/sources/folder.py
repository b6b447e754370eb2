"""Images in class folders, decoded lazily: ``root/<split>/<class>/<image>`` or a single
``root/<class>/<image>`` tree.

The layout of ImageNet-style releases and torchvision's ``ImageFolder``: one folder per class
(sorted names give the label order, or sorted numbers when every name is a number:
``cells.class_order``), images anywhere below it with a suffix of ``IMAGE_SUFFIXES`` in any case.
Hidden files and folders (``.DS_Store``, macOS ``._x.jpg``) are ignored; links are followed, as
``ImageFolder`` follows them, but a folder reached again (a loop) is skipped with a warning and
one file in two splits is an error. ``folder_layout`` tells the two layouts apart without opening an
image. A folder is one source (``FolderSource``) of ``decoded.DecodedImages``: its faults (a
dangling link, no read permission, an empty file, a FIFO named like an image, a file larger than
``data.max_image_bytes``) are unreadable images, skipped and named by verification, never a
traceback. ``verify_image_folder`` verifies
every split once, before the processes of a job join their group.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from ...config import DataConfig, ModelConfig
from ...errors import DataError, MissingFileError
from ..bounds import MAX_IMAGE_BYTES, printable, read_image_file
from ..contract import SourceState
from ..decoded import DecodedImages, Reading, ReadOptions
from ..listing import LISTED, Listing, reading_of
from ..verify import listing_key
from .cells import by_number_note, class_order

if TYPE_CHECKING:
    from typing_extensions import Unpack

# The files listed as images, in any case; what they may hold is codec.FORMATS, whatever the name.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
SPLITS = ("train", "val", "test")


def _visible(name: str) -> bool:
    return not name.startswith(".")


def _is_image(name: str) -> bool:
    return _visible(name) and os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES


def _subfolders(folder: Path) -> list[str]:
    return sorted(d.name for d in folder.iterdir() if d.is_dir() and _visible(d.name))


def _class_folders(folder: Path) -> list[str]:
    """The class folders of a split's folder, in label order (``cells.class_order``); a
    ``DataError`` for a name that is not printable text (``_check_class_name``)."""
    names = _subfolders(folder)
    for name in names:
        _check_class_name(name, folder / name)
    return class_order(names)


def _check_class_name(name: str, where: Path | str) -> None:
    """A ``DataError`` when the class name ``name`` (of the folder ``where``) holds a character
    that is not printable text: a newline (``classes.txt`` of a packed folder read it as two
    classes, and the labels after it under the wrong names), a control character, or a byte that
    is not UTF-8 (the run's confusion table and ``data pack`` failed on it, with a traceback)."""
    bad = next((c for c in name if not c.isprintable()), None)
    if bad is None:
        return
    what = (
        f"the byte {ord(bad) - 0xDC00:#04x}, which is not UTF-8"
        if 0xDC80 <= ord(bad) <= 0xDCFF  # a byte os.fsdecode could not decode
        else f"the character {bad!r}, which cannot be printed"
    )
    raise DataError(
        f"class folder {printable(str(where))}: its name holds {what}: expected a class name "
        "of printable UTF-8 text (rename the folder)"
    )


FileId = tuple[int, int]  # (st_dev, st_ino): one file or folder, whatever path reaches it


def _walk_images(folder: Path) -> Iterator[tuple[str, str, FileId | None]]:
    """(folder, name, ``FileId``; None for a dangling link) of every image below ``folder``.

    Links are followed (a linked class folder is a normal layout), but a folder reached again
    (by ``FileId``) is skipped with a warning naming it: ``os.walk(followlinks=True)`` followed
    ``ln -s . digit_0/self`` 40 levels deep (516 images listed for 36, copies of training images
    in the holdout) and two such loops hung on 2^40 paths. ``folder`` unreadable is a
    ``DataError`` naming it (it was "holds no images"); a folder below it that cannot be read is
    skipped with a warning naming it, not left out silently as ``os.walk`` does."""
    try:
        top = os.stat(folder)
    except FileNotFoundError:
        return
    except OSError as e:
        raise _unreadable_folder(folder, e) from None
    listed = {(top.st_dev, top.st_ino): str(folder)}
    stack = [(str(folder), top.st_dev)]
    while stack:
        dirpath, dev = stack.pop()
        try:
            with os.scandir(dirpath) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            if dirpath == str(folder):
                raise _unreadable_folder(folder, e) from None
            why = e.strerror or type(e).__name__
            warnings.warn(
                f"skipping {printable(dirpath)}: the folder cannot be read ({why})", stacklevel=2
            )
            continue
        for entry in entries:
            if not _visible(entry.name):
                continue
            if _is_folder(entry):  # through a link too
                try:
                    st = entry.stat()
                except OSError:
                    continue
                first = listed.setdefault((st.st_dev, st.st_ino), entry.path)
                if first != entry.path:
                    warnings.warn(
                        f"skipping {entry.path}: it is {first}, a folder already listed (a link "
                        "back into the folder would list its images again)",
                        stacklevel=2,
                    )
                    continue
                stack.append((entry.path, st.st_dev))
            elif _is_image(entry.name):
                yield dirpath, entry.name, _file_id(entry, dev)


def _unreadable_folder(folder: Path, error: OSError) -> DataError:
    return DataError(
        f"the folder {printable(str(folder))} cannot be read "
        f"({error.strerror or type(error).__name__}): expected a folder of images you can read"
    )


def _is_folder(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a folder, through a link; a link that loops (``ln -s x.png x.png``:
    ELOOP) or cannot be followed is not, and is listed as a dangling link is when it bears an
    image's name: an unreadable image, named when verified or read."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _file_id(entry: os.DirEntry[str], dev: int) -> FileId | None:
    """``entry``'s ``FileId``: a plain file's from its folder's listing (no stat call), a
    link's from its target (None when dangling: an unreadable image, named when verified)."""
    if not entry.is_symlink():
        return dev, entry.inode()
    try:
        st = entry.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def image_files(folder: Path) -> list[Path]:
    """Every image file below ``folder``, recursively and sorted (path by path); hidden files and
    folders (a leading dot: .DS_Store, macOS ._x.jpg shadows) are skipped, and so is a folder
    reached again through a link (``_walk_images``)."""
    return sorted(Path(dirpath, f) for dirpath, f, _ in _walk_images(folder))


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
    train_classes = _class_folders(train_dir)
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
    val/ or test/ folder given directly beside a train/ folder, and no file may be in two splits
    (through a link or a hard link). Counts are of image files, before ``ImageFolderDataset``
    verifies them.
    """
    root = Path(root)
    names = _split_names(root)
    keys: list[str | None] = list(names) if names else [None]
    splits: dict[str | None, Path] = {k: root if k is None else root / k for k in keys}
    counts: dict[str | None, int] = {}
    classes: list[str] = []
    # a file of val or test (by FileId, through links and hard links) -> its split and path:
    # held out of train, and val out of test, or scores measure memorised images. Train is
    # listed last, so only the smaller splits are held in memory.
    held: dict[FileId, tuple[str | None, str]] = {}
    for key, split_dir in sorted(splits.items(), key=lambda item: item[0] == "train"):
        found = _class_folders(split_dir)
        if not found:
            raise DataError(f"{split_dir} holds no class folders, expected <class>/<image>")
        _check_classes(split_dir, found, _train_beside(split_dir, named=key is not None))
        if key in (None, "train"):
            classes = found
        counts[key] = 0
        for name in found:
            n = 0
            for dirpath, file, file_id in _walk_images(split_dir / name):
                n += 1
                if file_id is None or len(splits) == 1:
                    continue
                path = os.path.join(dirpath, file)
                split, first = held.get(file_id, (key, path))
                if split != key:
                    raise DataError(
                        f"{path} in {key}/ is {first} in {split}/ (a link or the same file): "
                        "expected splits without common images"
                    )
                if key != "train":
                    held.setdefault(file_id, (key, path))
            if n == 0:
                raise _no_images_error(split_dir / name)
            counts[key] += n
    return FolderLayout(
        root=root,
        splits=MappingProxyType(splits),
        classes=tuple(classes),
        counts=MappingProxyType(counts),
    )


def listing(cfg: DataConfig, model: ModelConfig | None, seed: int) -> Listing:
    """``DIR``: its split folders, or one tree (a split's folder given directly) called train."""
    assert cfg.source.path is not None
    layout = folder_layout(cfg.source.path)
    tree = layout.kind == "tree"

    def read(split: str, channels: int | None, verify: bool) -> ImageFolderDataset:
        how = reading_of(cfg, channels, verify)
        return ImageFolderDataset(layout.root, None if tree else split, **how)

    def sizes() -> tuple[int, int, str]:  # the listing's counts: no second walk
        return len(layout.classes), layout.counts.get("train", layout.counts.get(None, 0)), LISTED

    names = ("train",) if tree else tuple(str(s) for s in layout.splits)
    found = Listing(str(layout.root), names, read, "{}/".format, not tree, sizes=sizes)
    found.notes = [n for n in [by_number_note(list(layout.classes))] if n]
    found.train_spec = None if tree else f"{layout.root}/train"
    return found


class FolderSource:
    """The image files of one split's class folders, in the listing's order: ``files`` (relative
    to ``split_dir``) and the label of each, each read whole when it holds at most ``max_bytes``
    (``data.max_image_bytes``; a larger one is unreadable)."""

    def __init__(
        self,
        split_dir: Path,
        classes: list[str],
        files: list[str],
        labels: list[int],
        max_bytes: int = MAX_IMAGE_BYTES,
    ) -> None:
        self.split_dir = split_dir
        self.classes = classes
        self.files = files
        self.labels = np.array(labels, dtype=np.int64)  # (n,)
        self.max_bytes = max_bytes
        self._base = str(split_dir)

    @property
    def where(self) -> str:
        return self._base

    def path(self, record: int) -> str:
        return os.path.join(self._base, self.files[record])  # a string: a million of them add up

    def name(self, record: int) -> str:
        return self.path(record)

    def key(self, record: int) -> str:
        return self.files[record]

    def read(self, record: int) -> bytes:
        return read_image_file(self.path(record), self.max_bytes)

    def read_all(self, records: Sequence[int]) -> Iterator[bytes | OSError]:
        for record in records:
            try:
                yield self.read(record)
            except OSError as e:
                yield e

    def state(self) -> SourceState:
        """Keyed by the folder's absolute path, the sha256 of its listing (``listing_key``) and
        the bytes an image may hold."""
        folder = self.split_dir.resolve()
        digest = f"{listing_key(folder, self.files)}-{self.max_bytes}"
        return SourceState(str(folder), folder.name, digest)


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
    ImageNet-sized JPEG); pass ``mode`` to skip it.

    ``verify`` is how much of each file is checked at construction (for runs, the config key
    ``data.verify``):

    - ``'full'``: ``verify()`` every file, and with ``mode=None`` decode until the
      first colour image, as above.
    - ``'header'``: ``verify()`` every file; with ``mode=None`` the channels come from the files'
      PIL modes alone, nothing decoded: 1 when every file has a one-channel mode, else 3 (a grey
      image stored as RGB counts as colour). With a given ``mode`` it is the same pass as
      ``'full'``.
    - ``'none'``: the listing only, for trees too large to open twice; a file that
      fails to decode is replaced when it is read. Needs a given ``mode``.

    The findings of a pass are cached (``verify_cache=False``: not read, not written) and a pass
    over ``verify.PARALLEL_MIN_FILES`` files or more is split across ``verify_workers`` processes
    (None: every core this process may use; 0 or 1: serial); ``vitkit.data.verify`` says how, and
    how several processes share one pass. The rest is ``DecodedImages``'.
    """

    source: FolderSource

    def __init__(
        self,
        root: str | os.PathLike,
        split: str | None = "train",
        **reading: Unpack[Reading],
    ) -> None:
        options = ReadOptions(**reading)
        self.root = Path(root)
        self.split = split
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
        classes = _class_folders(self.split_dir)
        if not classes:
            raise DataError(f"{self.split_dir} holds no class folders, expected <class>/<image>")
        _check_classes(
            self.split_dir, classes, _train_beside(self.split_dir, named=split is not None)
        )
        files: list[str] = []
        labels: list[int] = []
        for label, name in enumerate(classes):
            found_files = image_files(self.split_dir / name)
            if not found_files:
                raise _no_images_error(self.split_dir / name)
            files += [path.relative_to(self.split_dir).as_posix() for path in found_files]
            labels += [label] * len(found_files)
        source = FolderSource(self.split_dir, classes, files, labels, options.max_image_bytes)
        super().__init__(source, options)

    def in_class_order(self, order: Sequence[str]) -> ImageFolderDataset:
        """The same images with their classes in the order ``order``, labels renumbered, and
        listed class by class in that order, as a listing in that order lists them: image i is
        the file it was when the folder's classes were in that order (a run resumed across a
        change of the folder's own order sees the images it saw)."""
        out = super().in_class_order(order)
        return out.subset(torch.argsort(out.labels, stable=True))  # within a class: listed order

    @property
    def samples(self) -> list[tuple[Path, int]]:
        """(file, label) of every image, in this dataset's order."""
        return [
            (Path(self.source.path(r)), int(k))
            for r, k in zip(self.rows.tolist(), self.labels.tolist(), strict=True)
        ]


def verify_image_folder(
    root: str | os.PathLike, **reading: Unpack[Reading]
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
        each: Reading = {**reading, "mode": split_mode}  # the train split's channels
        return ImageFolderDataset(layout.root, split, **each)

    datasets = {first: read(first, ReadOptions(**reading).mode)}
    for split in layout.splits:
        if split != first:
            datasets[split] = read(split, datasets[first].mode)
    return datasets
