"""Images named by list files: the prepared VTAB-1k folders (``vtab:DIR``, ``vtab800:DIR``).

The layout in common use for VTAB-1k (the releases of the NOAH and VPT papers' code, and most
parameter-efficient tuning work since): one folder per task, ``DIR/images/...`` and four lists
of ``relative/path label`` lines beside it, ``train800.txt``, ``val200.txt``,
``train800val200.txt`` and ``test.txt``; a path is relative to ``DIR``, a label an integer from
0. A list names its images and labels and nothing else, so the classes are the label numbers as
text, ``"0"`` to the largest label of any list of the folder (every split agrees).

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

from ..errors import DataError, MissingFileError
from .cells import label_from_text
from .decoded import DecodedImages, Reading, ReadOptions
from .folder import FolderSource
from .source import SourceState
from .verify import listing_key

if TYPE_CHECKING:
    from typing_extensions import Unpack

# The VTAB-1k lists, by file name.
LISTS = ("train800", "val200", "train800val200", "test")
# What each spec's splits read: the sweep's and the final run's.
STAGES: dict[str, dict[str, str]] = {
    "vtab800": {"train": "train800", "val": "val200"},
    "vtab": {"train": "train800val200", "test": "test"},
}


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
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        name, _, label = line.strip().rpartition(" ")
        if not name:
            raise DataError(
                f"{path}:{number}: {line.strip()[:80]!r}: expected 'relative/path label', the "
                "label an integer >= 0"
            )
        if os.path.isabs(name) or ".." in Path(name).parts:
            raise DataError(f"{path}:{number}: {name!r}: expected a path inside {path.parent}")
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


def is_list_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a prepared VTAB-1k task folder (it holds ``train800val200.txt``)."""
    return (Path(path) / "train800val200.txt").is_file()


class ListSource(FolderSource):
    """The images one list file names, in its order: ``files`` relative to ``task_dir`` (a
    folder's source whose listing is the list)."""

    def __init__(self, task_dir: Path, list_name: str, classes: list[str]) -> None:
        files, labels = read_list(task_dir / f"{list_name}.txt")
        super().__init__(task_dir, classes, files, labels)
        self.task_dir = task_dir
        self.list_name = list_name

    @property
    def where(self) -> str:
        return f"{self._base}/{self.list_name}.txt"

    def state(self) -> SourceState:
        """Keyed by the list's absolute path and the sha256 of the files it names, in its order
        (``listing_key``: their names, sizes and times)."""
        folder = self.task_dir.resolve()
        name = f"{folder.name}-{self.list_name}"
        return SourceState(f"{folder}/{self.list_name}.txt", name, listing_key(folder, self.files))


class ListImages(DecodedImages):
    """The images of one VTAB-1k list, ``task_dir/<list_name>.txt``; items (uint8 (C, H, W),
    label). ``mode``, ``verify``, ``max_bad_fraction``, ``verify_workers`` and ``verify_cache``
    are ``ImageFolderDataset``'s: the container is the same."""

    source: ListSource

    def __init__(
        self,
        task_dir: str | os.PathLike,
        list_name: str,
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
        super().__init__(ListSource(self.task_dir, list_name, list_classes(self.task_dir)), options)
