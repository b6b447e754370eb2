"""Images in tar shards of the webdataset layout, read by index: ``wds:DIR``.

Each uncompressed ``.tar`` holds samples as members ``KEY.EXT`` (KEY: the path up to the first
dot of the file name): an image (``KEY.jpg``, ``.jpeg``, ``.png``, ``.webp``, ``.bmp``) and its
label (``KEY.cls``, an integer as text, from 0); other members are ignored. A shard is split
``train``, ``val`` or ``test`` when that word (or ``validation``) is one of the words of its path
below DIR, cut at ``-``, ``_``, ``.`` and ``/`` (``DIR/train-000000.tar``, ``DIR/test/0003.tar``);
when no shard names one, all are ``train``; a mix, or a shard naming two, is an error; splits
without ``train`` are read for evaluation only. Class names: ``DIR/classes.txt`` (line k names
label k), ``classes.json`` (a list) or ``classnames.txt`` (the CLIP benchmark's), else the label
numbers as text.

Sample i is one seek and one read into its shard, from an index of member offsets read from the
tar headers (``index_shard``), so a batch stays a function of (seed, epoch, step).
``pack_folder`` writes such shards from an image folder (``vitkit data pack``).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import io
import json
import os
import re
import tarfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from ...config import DataConfig, ModelConfig
from ...errors import ConfigError, DataError, MissingFileError
from ...files import TooLargeError, atomic_files, atomic_write
from ..bounds import long_class_name, read_image_file, text_lines, too_large
from ..contract import SourceState
from ..decoded import MAX_BAD_FRACTION, DecodedImages, Reading, ReadOptions
from ..listing import Listing, reading_of
from .cells import label_from_text
from .folder import IMAGE_SUFFIXES, SPLITS, ImageFolderDataset, folder_layout

if TYPE_CHECKING:
    from typing_extensions import Unpack

# The words of a shard's name that make it a split's, and the split.
SPLIT_WORDS = {"train": "train", "val": "val", "validation": "val", "test": "test"}
# classnames.txt: the CLIP benchmark's shards (clip_benchmark's wds datasets) name their classes so.
CLASS_FILES = ("classes.txt", "classes.json", "classnames.txt")
_IMAGE_EXTS = tuple(suffix[1:] for suffix in IMAGE_SUFFIXES)  # ("jpg", "jpeg", ...)


def _visible(path: Path, root: Path) -> bool:
    return not any(part.startswith(".") for part in path.relative_to(root).parts)


@dataclass(frozen=True)
class ShardLayout:
    """What ``shard_layout`` found: the shards of each split, in name order, and whether the
    names said the splits (False: every shard is ``train``)."""

    root: Path
    splits: Mapping[str, tuple[Path, ...]]
    named: bool


def shard_layout(root: str | os.PathLike) -> ShardLayout:
    """The splits of the ``.tar`` files anywhere below ``root`` (hidden ones aside), from their
    names alone (the rule is the module docstring's); no shard is opened."""
    root = Path(root)
    expected = f"expected {root}/train-000000.tar, {root}/val-000000.tar, ..."
    if not root.exists():
        raise MissingFileError(f"shard folder {root} not found ({expected})")
    if not root.is_dir():
        raise DataError(f"shard folder {root} is not a folder ({expected})")
    shards = sorted(p for p in root.rglob("*.tar") if p.is_file() and _visible(p, root))
    if not shards:
        raise DataError(
            f"{root} holds no .tar shards ({expected}; `vitkit data pack` writes them from an "
            "image folder)"
        )
    splits: dict[str, list[Path]] = {}
    unnamed: list[Path] = []
    for shard in shards:
        words = re.split(r"[-_./]", shard.relative_to(root).with_suffix("").as_posix().lower())
        found = sorted({SPLIT_WORDS[w] for w in words if w in SPLIT_WORDS})
        if len(found) > 1:
            raise DataError(
                f"shard {shard} names the splits {found}: expected one of train, val "
                "(or validation), test in its name"
            )
        if found:
            splits.setdefault(found[0], []).append(shard)
        else:
            unnamed.append(shard)
    if not splits:
        return ShardLayout(root, MappingProxyType({"train": tuple(unnamed)}), named=False)
    if unnamed:
        raise DataError(
            f"{root} mixes shards named by split ({', '.join(sorted(splits))}) with shards "
            f"named by none ({unnamed[0].relative_to(root)}"
            + (f" and {len(unnamed) - 1} more" if len(unnamed) > 1 else "")
            + "): expected train, val or test in every shard's name, or in none"
        )
    ordered = {s: tuple(splits[s]) for s in SPLITS if s in splits}
    return ShardLayout(root, MappingProxyType(ordered), named=True)


@dataclass(frozen=True)
class ShardIndex:
    """The samples of one shard in member order: key, the image's data offset and size, label."""

    keys: tuple[str, ...]
    offsets: np.ndarray  # int64 (n,)
    sizes: np.ndarray  # int64 (n,)
    labels: np.ndarray  # int64 (n,)


def _split_name(name: str) -> tuple[str, str]:
    """A member's (key, extension): webdataset's rule, the extension from the first dot of the
    file name on (``a/b.seg.png`` -> ``a/b``, ``seg.png``)."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), (ext.lower() if dot else "")


def index_shard(path: Path) -> ShardIndex:
    """Every sample of the tar file ``path``, its members found by their headers (cached for
    the life of the process while the file's size and modification time stay the same)."""
    stat = path.stat()
    return _index_shard(str(path), stat.st_size, stat.st_mtime_ns)


# The most a tar member's extended header (pax, or GNU's long name or link) may hold: a path of
# PATH_MAX and a few attributes take a few KB. tarfile reads the size a header claims in one
# read, so a shard claiming gigabytes was read whole into memory.
MAX_EXTENDED_HEADER = 2**20
_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)


class _HugeHeaderError(Exception):
    """A member's extended header claims more than ``MAX_EXTENDED_HEADER`` bytes."""


class _BoundedTarInfo(tarfile.TarInfo):
    """tarfile's member, refusing an extended header above ``MAX_EXTENDED_HEADER`` before
    tarfile reads it (``_proc_member`` reads it, and the headers after it are this class's)."""

    def _proc_member(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _EXTENDED and self.size > MAX_EXTENDED_HEADER:
            raise _HugeHeaderError(f"at byte {self.offset:,} claims {self.size:,} bytes")
        return super()._proc_member(tarfile)  # type: ignore[misc]  # tarfile's own, untyped


# Our own index on tarfile, no library: the loader needs sample i of a shard, not the next sample
# of a stream. tarfile lists every member with its data's offset, so sample i is one seek and one
# read (hence uncompressed tars only). webdataset's WebDataset is a stream (a resumed run would see
# other batches); its random-access wids needs a JSON descriptor, prints, asserts, and its decoders
# (like webdataset's) unpickle .pyd/.pth members: nothing we load may run code. Kept in memory for
# the process (reading train for its labels, then for training, costs one pass), never on disk:
# listing a shard reads only its headers and the .cls members.
@functools.cache
def _index_shard(path: str, size: int, mtime_ns: int) -> ShardIndex:
    images: dict[str, tuple[str, int, int]] = {}  # key -> (extension, offset, size)
    labels: dict[str, int] = {}
    end = 0  # where the last member's data ends, in 512-byte blocks
    try:
        with (
            open(path, "rb") as f,
            tarfile.open(fileobj=f, mode="r:", tarinfo=_BoundedTarInfo) as tar,
        ):
            for member in tar:
                end = member.offset_data + -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
                if not member.isfile():
                    continue
                key, ext = _split_name(member.name)
                if ext in _IMAGE_EXTS:
                    if key in images:  # which one the sample is would be a guess
                        raise DataError(
                            f"shard {path}: sample {key!r} has two images ({key}."
                            f"{images[key][0]} and {member.name}): expected one image a sample, "
                            "each key once"
                        )
                    images[key] = (ext, member.offset_data, member.size)
                elif ext == "cls":
                    if key in labels:
                        raise DataError(
                            f"shard {path}: sample {key!r} has two labels ({key}.cls twice): "
                            "expected each key once"
                        )
                    labels[key] = _read_label(f, member, path, key)
            # tarfile reads a shard cut at a member's end (an interrupted copy) as a shorter
            # one: the end-of-archive marker (zero blocks; POSIX writes two) says it is whole
            f.seek(end)
            marker = f.read(tarfile.BLOCKSIZE)
        if len(marker) < tarfile.BLOCKSIZE or any(marker):
            raise DataError(
                f"shard {path} is truncated: its {size:,} bytes end without tar's end-of-archive "
                "marker after the last whole member (an interrupted copy?): copy it again"
            )
    except _HugeHeaderError as e:
        raise DataError(
            f"shard {path} is corrupt: an extended header (pax or GNU long name) {e}, expected "
            f"at most {MAX_EXTENDED_HEADER:,}: copy it again or pack it again"
        ) from None
    except tarfile.TarError as e:
        raise DataError(
            f"shard {path} is not a readable uncompressed tar file ({e}): expected a .tar "
            "written by tar, webdataset or `vitkit data pack` (not .tar.gz)"
        ) from None
    if not images:
        raise DataError(
            f"shard {path} holds no image (expected KEY.jpg, KEY.png, KEY.webp beside KEY.cls)"
        )
    unlabelled = [k for k in images if k not in labels]
    if unlabelled:
        raise DataError(
            f"shard {path}: sample {unlabelled[0]!r} has no {unlabelled[0]}.cls (its label, an "
            f"integer as text)"
            + (f"; {len(unlabelled) - 1} more lack one" if len(unlabelled) > 1 else "")
        )
    imageless = [k for k in labels if k not in images]
    if imageless:  # an image of another kind (KEY.pgm), or one stored as a link: left out unsaid
        raise DataError(
            f"shard {path}: sample {imageless[0]!r} has a label ({imageless[0]}.cls) but no image "
            f"(expected a regular member {imageless[0]}.EXT, EXT one of {', '.join(_IMAGE_EXTS)})"
            + (f"; {len(imageless) - 1} more lack one" if len(imageless) > 1 else "")
        )
    keys = tuple(images)
    return ShardIndex(
        keys=keys,
        offsets=np.array([images[k][1] for k in keys], dtype=np.int64),
        sizes=np.array([images[k][2] for k in keys], dtype=np.int64),
        labels=np.array([labels[k] for k in keys], dtype=np.int64),
    )


def _read_label(f: io.BufferedReader, member: tarfile.TarInfo, path: str, key: str) -> int:
    """The integer in a ``.cls`` member (read at its offset; the tar's position is restored)."""
    where = f.tell()
    f.seek(member.offset_data)
    text = f.read(min(member.size, 64)).decode("utf-8", errors="replace").strip()
    f.seek(where)
    return label_from_text(text, f"shard {path}: {key}.cls")


def read_classes(root: Path) -> list[str] | None:
    """The class names ``root/classes.txt`` (one a line), ``root/classes.json`` (a list) or
    ``root/classnames.txt`` (one a line, the CLIP benchmark's) give, in that order of
    preference, or None when there is none; a name longer than ``bounds.MAX_CLASS_NAME`` is an
    error (a checkpoint would record it)."""
    txt, js, clip = (root / name for name in CLASS_FILES)
    if not txt.is_file() and not js.is_file() and clip.is_file():
        txt = clip
    if txt.is_file():
        names = text_lines(txt, "one class name a line")
        while names and not names[-1].strip():
            names.pop()
        if not names:
            raise DataError(f"{txt} is empty: expected one class name a line, label 0 first")
        return _short(names, txt)
    if js.is_file():
        try:
            names = json.loads("\n".join(text_lines(js, "a JSON list of class names")))
        except (json.JSONDecodeError, RecursionError) as e:
            raise DataError(f"{js} is not JSON ({e}): expected a list of class names") from None
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise DataError(f"{js}: expected a non-empty list of class names, label 0 first")
        return _short(names, js)
    return None


def _short(names: list[str], where: Path) -> list[str]:
    problem = long_class_name(names)
    if problem is not None:
        raise DataError(f"{where}: {problem}")
    return names


class ShardSource:
    """The samples of one split's tar shards, in shard and member order (``index_shard``); an
    image member of more than ``max_bytes`` (``data.max_image_bytes``) is unreadable, and not
    read."""

    def __init__(
        self, shards: Sequence[Path], where: str, classes: list[str], max_bytes: int
    ) -> None:
        indices = [index_shard(s) for s in shards]
        self.shards = tuple(shards)
        self.where = where
        self.classes = classes
        self.max_bytes = max_bytes
        self.labels = np.concatenate([ix.labels for ix in indices])  # (n,)
        counts = np.array([len(ix.keys) for ix in indices], dtype=np.int64)
        self._shard_of = np.repeat(np.arange(len(indices)), counts)  # record -> shard
        self._offsets = np.concatenate([ix.offsets for ix in indices])
        self._sizes = np.concatenate([ix.sizes for ix in indices])
        self._keys = [k for ix in indices for k in ix.keys]

    def name(self, record: int) -> str:
        return f"{self.shards[self._shard_of[record]]}:{self._keys[record]}"

    def key(self, record: int) -> str:
        return self._keys[record]

    def _size(self, record: int) -> int:
        """The size of record ``record``'s member; ``OSError`` when it is too large to read."""
        size = int(self._sizes[record])
        if size > self.max_bytes:
            raise TooLargeError(f"{size:,} bytes, {too_large(self.max_bytes)}")
        return size

    def read(self, record: int) -> bytes:
        size = self._size(record)
        with open(self.shards[self._shard_of[record]], "rb") as f:
            f.seek(self._offsets[record])
            return f.read(size)

    def read_all(self, records: Sequence[int]) -> Iterator[bytes | OSError]:
        """One open file per run of records of the same shard (verification reads in order)."""
        f: io.BufferedReader | None = None
        shard = -1
        try:
            for record in records:
                try:
                    size = self._size(record)
                    if self._shard_of[record] != shard:
                        if f is not None:
                            f.close()
                            f = None
                        shard = int(self._shard_of[record])
                        f = open(self.shards[shard], "rb")  # noqa: SIM115  # closed below
                    assert f is not None
                    f.seek(self._offsets[record])
                    yield f.read(size)
                except OSError as e:
                    yield e
        finally:
            if f is not None:
                f.close()

    def state(self) -> SourceState:
        """Keyed by the shards' absolute paths, sizes and modification times, and the bytes an
        image may hold."""
        h = hashlib.sha256(f"{self.max_bytes}\n".encode())
        for shard in self.shards:
            st = shard.stat()
            h.update(os.fsencode(shard.resolve()) + f"\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        first = self.shards[0].resolve()
        identity = "\n".join(str(shard.resolve()) for shard in self.shards)
        return SourceState(identity, f"{first.parent.name}-{first.stem}-shards", h.hexdigest())


class WebDatasetShards(DecodedImages):
    """The samples of one split's tar shards, by index: items (uint8 (C, H, W), label).

    ``WebDatasetShards(root, "train")`` reads ``shard_layout(root).splits["train"]``; the class
    names are ``read_classes(root)``'s, else the label numbers (up to the largest label of any
    split, so that every split agrees). ``mode``, ``verify``, ``max_bad_fraction``,
    ``verify_workers`` and ``verify_cache`` are ``ImageFolderDataset``'s: the container is the
    same (``decoded.DecodedImages``), verification parallel and cached alike."""

    source: ShardSource

    def __init__(
        self,
        root: str | os.PathLike,
        split: str = "train",
        **reading: Unpack[Reading],
    ) -> None:
        options = ReadOptions(**reading)
        layout = shard_layout(root)
        if split not in layout.splits:
            raise DataError(
                f"{layout.root} has no {split} shards (expected {split}-*.tar); it has "
                f"{', '.join(layout.splits)}"
            )
        self.root = layout.root
        self.split = split
        self.shards = layout.splits[split]
        indices = [index_shard(s) for s in self.shards]
        classes = read_classes(self.root)
        if classes is None:
            every = [
                index_shard(s).labels.max() for shards in layout.splits.values() for s in shards
            ]
            classes = [str(k) for k in range(int(max(every)) + 1)]
        for shard, ix in zip(self.shards, indices, strict=True):  # name the shard that is wrong
            if len(ix.labels) and int(ix.labels.max()) >= len(classes):
                at = int(ix.labels.argmax())
                raise DataError(
                    f"shard {shard}: {ix.keys[at]}.cls holds the label {int(ix.labels[at])}, and "
                    f"the classes file of {self.root} names {len(classes)}: expected labels from "
                    f"0 to {len(classes) - 1}"
                )
        where = f"{self.root} {split} shards"
        source = ShardSource(self.shards, where, classes, options.max_image_bytes)
        super().__init__(source, options)


def listing(cfg: DataConfig, model: ModelConfig | None, seed: int) -> Listing:
    """``wds:DIR``: the shards of its splits (shards named by none are train)."""
    assert cfg.source.path is not None
    shards = shard_layout(cfg.source.path)

    def read(split: str, channels: int | None, verify: bool) -> WebDatasetShards:
        return WebDatasetShards(shards.root, split, **reading_of(cfg, channels, verify))

    return Listing(str(shards.root), tuple(shards.splits), read, "{} shards".format, shards.named)


# ------------------------------------------------------------------------------------ writing


def _tar_entry(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """One member, with fixed metadata (the same shard from the same images, byte for byte)."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


@dataclass(frozen=True)
class Packed:
    """One shard ``pack_folder`` wrote: its path, split and number of samples."""

    path: Path
    split: str
    samples: int


def pack_folder(
    folder: str | os.PathLike,
    out: str | os.PathLike,
    *,
    shard_size: int,
    splits: Sequence[str] | None = None,
    seed: int = 0,
    max_bad_fraction: float = MAX_BAD_FRACTION,
) -> tuple[list[Packed], list[tuple[str, str]]]:
    """Write an image folder's splits as ``out/{split}-{i:06d}.tar`` shards of ``shard_size``
    samples (the last may hold fewer), and ``out/classes.txt``; returns the shards written and
    the unreadable images left out (path, why).

    ``folder`` is read as ``folder_layout`` says; a single tree is written as the split
    ``splits[0]`` (default train), a split layout as ``splits`` (default all of its splits).
    Samples are written in a seeded random order (``seed``), so that every shard mixes the
    classes for a reader that streams them; keys are the sample's position in that order, eight
    digits, so they are unique and sorted in every shard. Images are stored as their files' bytes
    (not re-encoded), ``KEY.<suffix>`` beside ``KEY.cls``. ``out`` must hold no shard of a split
    written. Everything is written into a hidden folder that joins ``out`` once whole
    (``files.atomic_files``), so ``wds:out`` never reads what an interrupted pack left.
    """
    if not isinstance(shard_size, int) or shard_size < 1:
        raise ConfigError(f"--shard-size {shard_size!r}: expected a number of images >= 1")
    for name in splits or ():
        if name not in SPLITS:
            raise ConfigError(f"--split {name!r}: expected one of {', '.join(SPLITS)}")
    layout = folder_layout(folder)
    out = Path(out)
    if layout.kind == "tree":
        if splits is not None and len(splits) != 1:
            raise ConfigError(
                f"{layout.root} is one tree of class folders: give one --split to call it, "
                f"found {list(splits)}"
            )
        chosen = list(splits or ["train"])
        sources: dict[str, str | None] = {chosen[0]: None}  # split -> its folder's split name
    else:
        chosen = list(splits or [s for s in SPLITS if s in layout.splits])
        missing = [s for s in chosen if s not in layout.splits]
        if missing:
            raise DataError(
                f"{layout.root} has no {', '.join(missing)}/ split: it has "
                f"{', '.join(str(s) for s in layout.splits)}"
            )
        sources = {s: s for s in chosen}
    if out.is_dir():
        there = sorted(p.name for s in chosen for p in out.glob(f"{s}-*.tar"))
        if there:
            raise DataError(
                f"{out} already holds shards of the splits written ({there[0]}"
                + (f" and {len(there) - 1} more" if len(there) > 1 else "")
                + "): expected a folder without them, so no old shard is mixed in"
            )
    classes = list(layout.classes)
    listing = "".join(f"{name}\n" for name in classes)
    classes_file = out / CLASS_FILES[0]
    if classes_file.is_file() and classes_file.read_text(encoding="utf-8") != listing:
        raise DataError(
            f"{classes_file} lists other classes than {layout.root}'s: expected a folder of "
            "shards of the same classes, or a new one"
        )
    # a pack killed outright (SIGKILL, a crash: SIGTERM and Ctrl-C clean up) left its staging
    # folder, hidden; named, not deleted: it may be another pack's, running now
    left = (
        out.glob(".tmp-*") if out.is_dir() else out.parent.glob(f".tmp-{glob.escape(out.name)}-*")
    )
    for staged in sorted(left):
        warnings.warn(
            f"{staged} is what an earlier data pack stopped midway left: delete it once no other "
            "pack into the same folder runs",
            stacklevel=2,
        )
    # an interrupted pack left its first shards in out, and wds: read them without a word (15
    # of 24 images, no test split): they join out once all are written
    with atomic_files(out) as staging:
        atomic_write(staging / CLASS_FILES[0], lambda tmp: tmp.write_text(listing, "utf-8"))
        written, skipped = _pack_splits(
            layout.root, sources, staging, shard_size, seed, max_bad_fraction
        )
    return [Packed(out / p.path.name, p.split, p.samples) for p in written], skipped


def _pack_splits(
    root: Path,
    sources: Mapping[str, str | None],
    out: Path,
    shard_size: int,
    seed: int,
    max_bad_fraction: float,
) -> tuple[list[Packed], list[tuple[str, str]]]:
    """``pack_folder``'s shards of each split of ``sources`` (a split -> its folder's split
    name), written into ``out``."""
    written: list[Packed] = []
    skipped: list[tuple[str, str]] = []
    for split, split_dir in sources.items():
        images = ImageFolderDataset(root, split_dir, max_bad_fraction=max_bad_fraction)
        skipped += images.skipped
        samples = images.samples  # built once: a list of every (file, label)
        order = np.random.default_rng(seed).permutation(len(samples))
        for i, start in enumerate(range(0, len(order), shard_size)):
            part = [samples[k] for k in order[start : start + shard_size].tolist()]
            path = out / f"{split}-{i:06d}.tar"

            def write(
                tmp: Path,
                part: list[tuple[Path, int]] = part,
                start: int = start,
                cap: int = images.source.max_bytes,
            ) -> None:
                with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
                    for position, (image, label) in enumerate(part, start):
                        key = f"{position:08d}"
                        data = read_image_file(image, cap)
                        _tar_entry(tar, f"{key}{image.suffix.lower()}", data)
                        _tar_entry(tar, f"{key}.cls", str(label).encode())

            atomic_write(path, write)
            written.append(Packed(path, split, len(part)))
    return written, skipped
