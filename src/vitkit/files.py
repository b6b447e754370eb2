"""File-system primitives that every layer writes through: vitkit's cache folder, files and
directories written atomically, and an exclusive lock between processes.

Below both ``data`` and ``io`` (it imports only ``errors``): ``data`` caches its verifications
and writes shards with these, ``io`` its checkpoints and downloads, ``train`` its run directories.
``home()`` is the cache folder (``weights/``, ``verified/``); ``atomic_write``,
``atomic_directory`` and ``atomic_files`` rename a finished temporary sibling into place, so a reader (or a process
killed at any moment) finds the old one whole or the new one whole; ``exclusive`` is a ``flock``
processes take in turns; ``read_regular`` reads a regular file of bounded size only (a dataset
may name a FIFO, a device or ``/dev/zero``); ``DISK_ERRNOS`` are the errors that mean the disk
failed us, which the command line reports in one line naming the file.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import UserFileError

log = logging.getLogger(__name__)

# Errors that mean the disk failed us: no space, quota, file size limit (RLIMIT_FSIZE).
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class TooLargeError(OSError):
    """A file holds more bytes than its reader allows."""


def read_regular(path: str | os.PathLike, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path``; ``OSError`` when it cannot be read, is not a
    regular file (a directory, a FIFO, a device) or holds more than ``max_bytes`` (``TooLargeError``)."""
    # O_NONBLOCK: opening a FIFO does not wait for a writer (it is refused below)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before open(): a folder's IsADirectoryError
        os.close(fd)  # named the descriptor ("Is a directory: 3"), not the path
        raise OSError(f"{os.fsdecode(path)} is not a regular file")
    with open(fd, "rb") as f:
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise TooLargeError(f"{os.fsdecode(path)} holds more than {max_bytes:,} bytes")
    return data


def home() -> Path:
    """vitkit's cache folder: ``$VITKIT_HOME``, else ``$XDG_CACHE_HOME/vitkit``, else
    ``~/.cache/vitkit``."""
    if os.environ.get("VITKIT_HOME"):
        return Path(os.environ["VITKIT_HOME"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(cache).expanduser() / "vitkit"


def sha256_of(path: str | os.PathLike) -> str:
    """The sha256 of the file ``path``, as hex."""
    return hex_digests(path, "sha256")[0]


def hex_digests(path: str | os.PathLike, *algorithms: str) -> list[str]:
    """The digests of the file ``path`` by each of ``algorithms`` (hashlib's names), as hex, from
    one read of it."""
    hashes = [hashlib.new(name, usedforsecurity=False) for name in algorithms]
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            for h in hashes:
                h.update(block)
    return [h.hexdigest() for h in hashes]


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Write ``path`` through ``write(tmp_path)`` and an atomic rename: never a half-written file.
    The file gets the mode ``open`` would give it (``0o666`` less the umask), also when ``write``
    replaces it (safetensors writes a file of its own, ``0o600``, and renames it over ours). A
    full disk is the ``OSError`` it is (errno in ``DISK_ERRNOS``), naming ``path``, which the
    command line reports in one line; ``write`` raises it (``save_torch``, ``save_safetensors``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # os.open, not mkstemp (0o600 whatever the umask): a checkpoint handed to a teammate or a
    # shared cache stays readable where the user's umask says so
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    mode = stat.S_IMODE(os.fstat(fd).st_mode)  # the umask applied, without reading it
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fchmod(f.fileno(), mode)  # a writer that replaced the file made it 0o600
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:  # the name the user knows
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def atomic_write_text(path: Path, text: str) -> Path:
    """``text`` (UTF-8) as the file ``path``, through ``atomic_write``: a symbolic link there is
    replaced, never written through (a link named ``index.html`` overwrote its target); a folder
    there is a ``UserFileError`` (``IsADirectoryError`` was a traceback)."""
    check_file_to_write(path)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path


# The records that make a folder a checkpoint or a run directory: a checkpoint's and a training
# run's config.json (io/checkpoint.py CONFIG_FILE), a transfer's (transfer/finetuning.py RECORD)
# and a VTAB-1k evaluation's settings (transfer/vtab.py SETTINGS_FILE).
RECORDS = ("config.json", "transfer.json", "vtab-settings.json")
# Written beside those records by the writer of the folder, and of a name a command's own output
# (``--json``) could take: a Hugging Face checkpoint's image processor (io/formats/hf_processor.py
# PROCESSOR_FILE) and a VTAB-1k evaluation's result (cli/vtab.py).
WRITTEN_BESIDE = ("preprocessor_config.json", "vtab.json")


def check_file_to_write(path: Path) -> None:
    """A ``UserFileError`` when ``path`` cannot be a file ``atomic_write`` writes: a folder, or
    below a file. A command that writes one at its end checks first, not after hours of runs."""
    if path.is_dir():
        raise UserFileError(f"{path} is a folder: expected the name of a file to write")
    try:
        mode = os.stat(path).st_mode  # through a link: /dev/stdout is one
    except OSError:
        mode = None  # none there, or a dangling link: the file written replaces it
    if mode is not None and not stat.S_ISREG(mode):  # a device, a FIFO, a socket
        raise UserFileError(
            f"{path} is not a regular file (a device, a pipe or a socket), which the file "
            "written would replace: expected the name of a file to write"
        )  # as root, --json /dev/full replaced the device with a file; a FIFO's reader hung
    _nearest_folder(path, path.parents)


def _nearest_folder(path: Path, candidates: Iterable[Path]) -> Path | None:
    """The first of ``candidates`` (``path`` and the folders above it, nearest first) that
    exists, where ``path`` would be written; a ``UserFileError`` when it is a file."""
    for parent in candidates:
        if parent.exists():
            if not parent.is_dir():
                raise UserFileError(f"{path}: {parent} is a file: expected a folder to write in")
            return parent
    return None


def _check_writable(folder: Path | None, what: str) -> None:
    """A ``UserFileError`` naming ``what`` when nothing can be written in ``folder`` (/proc,
    /sys, read-only): found by writing a temporary file, as the permissions do not tell root's."""
    if folder is None:
        return
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise UserFileError(f"cannot write {what}: {e.strerror or e}") from None


def check_output_file(path: Path, suffix: str) -> None:
    """``check_file_to_write`` for a file a user names for a command to write (``--json``,
    ``export``'s; ``suffix``: what such a file is named, e.g. ``.onnx``), and a
    ``UserFileError`` when it is an existing file of a checkpoint or a run directory (its folder
    holds one of ``RECORDS``) other than an earlier one of its kind, which writing would replace:
    ``export --onnx best/model.safetensors`` and ``fewshot --json best/config.json`` destroyed
    the checkpoint they read, ``transfer --json`` another transfer's record. ``best/model.onnx``
    exported again is replaced."""
    check_file_to_write(path)
    held = [name for name in RECORDS if (path.parent / name).is_file()]
    ours = path.suffix.lower() == suffix and path.name not in RECORDS + WRITTEN_BESIDE
    if path.is_file() and held and not ours:
        raise UserFileError(
            f"{path} is a file of a checkpoint or a run directory (beside {', '.join(held)}), "
            "which writing would replace: expected a new file, or one outside it"
        )
    if path.parent.is_dir():  # a folder nothing can be written in (/proc, read-only): now
        _check_writable(path.parent, str(path))


def check_folder_to_write(path: Path) -> None:
    """A ``UserFileError`` before a command's work when ``path`` cannot be the folder it writes
    in: a file, below a file, or in a folder nothing can be written in (/sys, /proc, read-only):
    ``inspect --out`` and ``convert`` gave a traceback after the model's work."""
    if path.exists() and not path.is_dir():
        raise UserFileError(f"{path} is a file: expected a folder to write in")
    _check_writable(_nearest_folder(path, (path, *path.parents)), f"in {path}")


@contextmanager
def exclusive(path: Path, waiting: str) -> Iterator[None]:
    """An exclusive ``flock`` on the file ``path`` (created if missing) for the block, so that
    processes asking at once take turns; the kernel releases it if the holder dies. ``waiting``
    ends the log line shown while another process holds it ("waiting for another process that is
    ..."). No lock where ``fcntl`` does not exist (Windows). ``OSError`` if ``path`` cannot be
    opened for writing or is a symbolic link."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    # O_NOFOLLOW: a link planted at ``path`` is an OSError (ELOOP), never a file created or
    # locked elsewhere through it
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    with open(os.open(path, flags, 0o666), "ab") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process that is %s", waiting)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def atomic_files(directory: Path) -> Iterator[Path]:
    """A hidden folder to write new files of ``directory`` in; when the block ends without error
    they join it: the folder becomes ``directory`` by one rename where it does not exist, else
    each file is renamed into it (an error midway moves back the new ones moved, a file that
    replaced one stays). A reader (or a process killed at any moment) finds none of them or all
    of them, except in the instant of those renames. A failed write (a full disk) is the
    ``OSError`` naming the file's place in ``directory``, the name the user knows. The folder is
    deleted on error; one a killed process left is hidden (a leading dot)."""
    if directory.exists() and not directory.is_dir():
        raise UserFileError(f"{directory} exists and is not a directory")
    tag = uuid.uuid4().hex[:8]
    exists = directory.is_dir()
    # inside an existing directory (whose parent we may not write), beside a new one
    tmp = (
        directory / f".tmp-{tag}" if exists else directory.with_name(f".tmp-{directory.name}-{tag}")
    )
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if not exists:
            os.replace(tmp, directory)
            return
        moved: list[str] = []
        try:
            for name in sorted(os.listdir(tmp)):
                new = not os.path.lexists(directory / name)
                os.replace(tmp / name, directory / name)
                moved += [name] if new else []
        except BaseException:
            for name in moved:
                os.replace(directory / name, tmp / name)
            raise
    except OSError as e:
        if e.filename is None or Path(e.filename).parent != tmp:
            raise
        raise OSError(e.errno, e.strerror, str(directory / Path(e.filename).name)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def atomic_directory(path: Path) -> Iterator[Path]:
    """A fresh temporary sibling of directory ``path`` to fill; when the block ends without error
    it becomes ``path`` by a rename, so a reader (or a run killed at any moment) finds the previous
    directory whole or the new one whole, never a mix (or, for the instant between two renames
    when one replaces the other, neither). An existing ``path`` is moved aside only then, and
    deleted once the new one is in place; on error the temporary is deleted and the old one
    stays. Temporary names start with ``.tmp-`` (a killed process's leftovers are found by that
    prefix). The writer fsyncs what it writes, if it must (``atomic_write`` does)."""
    if path.exists() and not path.is_dir():
        raise UserFileError(f"{path} exists and is not a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkdir, not mkdtemp, so the umask applies; a rename is atomic within one filesystem
    tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex[:8]}")
    old = tmp.with_name(f"{tmp.name}-old")
    tmp.mkdir()
    try:
        yield tmp
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException:
        if old.exists() and not path.exists():  # the second rename failed: put the old one back
            os.replace(old, path)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def remove_partial_directories(parent: Path) -> None:
    """Finish or undo what a process killed inside ``atomic_directory`` left in ``parent``,
    then delete its temporaries. Killed between the two renames, it left no ``NAME`` but its
    old one aside (``.tmp-NAME-X-old``) and the new one whole (``.tmp-NAME-X``, complete before
    the first rename): the new one becomes ``NAME`` (the old one, where the new one is gone)."""
    for old in parent.glob(".tmp-*-old"):
        found = re.fullmatch(r"\.tmp-(.+)-[0-9a-f]{8}-old", old.name)
        if found is None or (parent / found[1]).exists():
            continue
        new = old.with_name(old.name.removesuffix("-old"))
        os.replace(new if new.is_dir() else old, parent / found[1])
    for tmp in parent.glob(".tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)
