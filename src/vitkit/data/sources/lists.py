"""Images named by list files: the prepared VTAB-1k folders (``vtab:DIR``, ``vtab800:DIR``).

The layout in common use for VTAB-1k (the releases of the NOAH and VPT papers' code, and most
parameter-efficient tuning work since): one folder per task, ``DIR/images/...`` and four lists
of ``relative/path label`` lines beside it, ``train800.txt``, ``val200.txt``,
``train800val200.txt`` and ``test.txt``; a path is relative to ``DIR``, a label an integer from
0. A list names its images and labels and nothing else, so the classes are the label numbers as
text, ``"0"`` to the largest label of any list of the folder (every split agrees). A list is
UTF-8 text (a byte-order mark is skipped, as Notepad writes one); a line of more than
``MAX_LINE`` characters, a NUL character or bytes that are not UTF-8 are an error naming the
line. A path may lead through links only to a file inside the task folder or the target of its
``images/`` link (``bounds.resolves_inside``, the rule of a Hugging Face cell's path), unless
``data.image_paths=any``: a file it refuses is unreadable, skipped and named.

Two specs read it, one per stage of the VTAB protocol [P §4.1, App. B.1.1]: ``vtab800:DIR`` is
the sweep's (train800 trains, val200 validates) and ``vtab:DIR`` the final run's (all 1,000,
train800val200, train; test is reported). Each list is one source (``ListSource``) of the one
image container (``decoded.DecodedImages``): verified, cached per state, decoded and replaced as
every source is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ...config import DataConfig, ModelConfig
from ...config.data import ImagePaths
from ...errors import DataError, MissingFileError
from ..bounds import MAX_PATH, resolves_inside, shown, text_lines
from ..contract import SourceState
from ..decoded import DecodedImages, Reading, ReadOptions
from ..listing import Listing, reading_of
from ..verify import listing_key
from .cells import label_from_text
from .folder import FolderSource

if TYPE_CHECKING:
    from typing_extensions import Unpack

# The VTAB-1k lists, by file name.
LISTS = ("train800", "val200", "train800val200", "test")
# What each spec's splits read: the sweep's and the final run's.
STAGES: dict[str, dict[str, str]] = {
    "vtab800": {"train": "train800", "val": "val200"},
    "vtab": {"train": "train800val200", "test": "test"},
}
MAX_LINE = MAX_PATH + 32  # a path and its label


def read_list(path: Path) -> tuple[list[str], list[int]]:
    """The (relative path, label) lines of a list file, blank lines skipped; a ``DataError``
    naming the line for anything else (a path may hold spaces: the label is the last word)."""
    if not path.is_file():
        raise MissingFileError(
            f"list file {path} not found (expected {path.parent}/{{{','.join(LISTS)}}}.txt of "
            "'relative/path label' lines)"
        )
    files: list[str] = []
    labels: list[int] = []
    for number, line in enumerate(text_lines(path, "a list of 'relative/path label' lines"), 1):
        if len(line) > MAX_LINE:
            raise DataError(
                f"{path}:{number}: a line of {len(line):,} characters: expected 'relative/path "
                f"label' of at most {MAX_LINE:,}"
            )
        if "\0" in line:
            raise DataError(f"{path}:{number}: {shown(line)} holds a NUL character: expected text")
        if not line.strip():
            continue
        name, _, label = line.strip().rpartition(" ")
        if not name:
            raise DataError(
                f"{path}:{number}: {shown(line.strip(), 80)}: expected 'relative/path label', "
                "the label an integer >= 0"
            )
        if os.path.isabs(name) or ".." in Path(name).parts:
            raise DataError(f"{path}:{number}: {shown(name)}: expected a path inside {path.parent}")
        files.append(name.strip())
        labels.append(label_from_text(label, f"{path}:{number}"))  # ASCII, below MAX_LABEL
    if not files:
        raise DataError(f"{path} lists no image: expected 'relative/path label' lines")
    return files, labels


def list_classes(task_dir: Path) -> list[str]:
    """The label numbers as text, ``"0"`` to the largest label of any list in ``task_dir``."""
    largest = max(max(read_list(task_dir / f"{name}.txt")[1]) for name in present(task_dir))
    return [str(k) for k in range(largest + 1)]


def present(task_dir: Path) -> list[str]:
    """The VTAB-1k lists ``task_dir`` holds, in ``LISTS`` order."""
    return [name for name in LISTS if (task_dir / f"{name}.txt").is_file()]


class ListSource(FolderSource):
    """The images one list file names, in its order: ``files`` relative to ``task_dir`` (a
    folder's source whose listing is the list), each of at most ``max_bytes``, and with
    ``image_paths='dataset'`` only where it resolves inside ``task_dir`` or the target of its
    ``images/`` link (a file elsewhere is unreadable)."""

    def __init__(
        self,
        task_dir: Path,
        list_name: str,
        classes: list[str],
        *,
        max_bytes: int,
        image_paths: ImagePaths = "dataset",
    ) -> None:
        files, labels = read_list(task_dir / f"{list_name}.txt")
        super().__init__(task_dir, classes, files, labels, max_bytes)
        self.task_dir = task_dir
        self.list_name = list_name
        self.image_paths = image_paths

    @property
    def where(self) -> str:
        return f"{self._base}/{self.list_name}.txt"

    def read(self, record: int) -> bytes:
        stored = self.files[record]
        if self.image_paths == "dataset" and not resolves_inside(
            stored, self.task_dir, (self.task_dir / "images",)
        ):
            raise OSError(
                f"{shown(stored)} leads outside the task folder {self.task_dir} and its images/: "
                "read it only with data.image_paths=any"
            )
        return super().read(record)

    def state(self) -> SourceState:
        """Keyed by the list's absolute path, the sha256 of the files it names, in its order
        (``listing_key``: their names, sizes and times), and what a file may be (its bytes,
        where it may lead)."""
        folder = self.task_dir.resolve()
        name = f"{folder.name}-{self.list_name}"
        digest = f"{listing_key(folder, self.files)}-{self.max_bytes}-{self.image_paths}"
        return SourceState(f"{folder}/{self.list_name}.txt", name, digest)


class ListImages(DecodedImages):
    """The images of one VTAB-1k list, ``task_dir/<list_name>.txt``; items (uint8 (C, H, W),
    label). ``image_paths`` is ``data.image_paths`` (where a listed path may lead through
    links); ``mode``, ``verify``, ``max_bad_fraction``, ``verify_workers``, ``verify_cache`` and
    the bounds are ``ImageFolderDataset``'s: the container is the same."""

    source: ListSource

    def __init__(
        self,
        task_dir: str | os.PathLike,
        list_name: str,
        *,
        image_paths: ImagePaths = "dataset",
        **reading: Unpack[Reading],
    ) -> None:
        options = ReadOptions(**reading)
        self.task_dir = Path(task_dir)
        if not self.task_dir.is_dir():
            raise MissingFileError(
                f"VTAB-1k task folder {self.task_dir} not found (expected DIR/train800.txt, "
                "val200.txt, train800val200.txt, test.txt beside DIR/images/)"
            )
        self.list_name = list_name
        source = ListSource(
            self.task_dir,
            list_name,
            list_classes(self.task_dir),
            max_bytes=options.max_image_bytes,
            image_paths=image_paths,
        )
        super().__init__(source, options)


def listing(cfg: DataConfig, model: ModelConfig | None, seed: int) -> Listing:
    """``vtab:DIR`` or ``vtab800:DIR``: the lists its stage reads (``STAGES``)."""
    stage, task_dir = STAGES[cfg.source.kind], cfg.source.path
    assert task_dir is not None

    def read(split: str, channels: int | None, verify: bool) -> ListImages:
        how = reading_of(cfg, channels, verify)
        return ListImages(task_dir, stage[split], image_paths=cfg.image_paths, **how)

    return Listing(task_dir, tuple(stage), read, lambda split: f"{stage.get(split, split)}.txt")
