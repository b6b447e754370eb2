"""What several verbs share: help texts, ``--device``, ``--workers``, images from files, folders
and globs, and the registration of a verb's parser."""

from __future__ import annotations

import argparse
import glob
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, get_args

from ..config import Device
from ..errors import MissingFileError, VitkitError

if TYPE_CHECKING:
    import torch


NPROC_HELP = (
    "data-parallel on N processes of this machine: runs this command under torchrun "
    "--standalone --nproc-per-node N (docs/guides/scale-out.md)"
)

DEBUG_HELP = "show the traceback of any error (also VITKIT_DEBUG=1)"


class Verb(Protocol):
    """Adds a verb to the command line: its name, one line of help, the function that runs it
    and an example; returns its parser, for the verb's own arguments."""

    def __call__(
        self, name: str, help: str, run: Callable[[argparse.Namespace], None], example: str
    ) -> argparse.ArgumentParser: ...


class _Stdout(logging.Handler):
    """Log records as lines of whatever ``sys.stdout`` is when they are emitted."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stdout, flush=True)


def log_to_stdout(level: int) -> None:
    """vitkit's log (a run's statements, and its progress lines without a progress bar) as plain
    lines on stdout, from ``level`` up; once per process, whatever the verbs run in it."""
    logger = logging.getLogger("vitkit")
    logger.setLevel(level)
    if not any(isinstance(h, _Stdout) for h in logger.handlers):
        logger.addHandler(_Stdout())
        logger.propagate = False  # not twice through a root handler someone else configured


def add_run_arguments(
    parser: argparse.ArgumentParser,
    *,
    sets: str,
    run_dir: str | None,
    checkpoint: bool,
    progress: str = "no progress bars",
) -> None:
    """The arguments of the verbs that train (train, finetune, transfer, vtab): ``--set`` (its
    help: ``sets``), ``--run-dir`` (its help: ``run_dir``; None where the verb names its folder
    otherwise, as vtab's ``--out``), ``--num-heads`` where the verb reads a ``checkpoint``, and
    ``--no-progress`` (its help: ``progress``)."""
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help=sets)
    if run_dir is not None:
        parser.add_argument("--run-dir", default=None, help=run_dir)
    if checkpoint:
        add_num_heads_argument(parser)
    parser.add_argument("--no-progress", action="store_true", help=progress)


def add_num_heads_argument(parser: argparse.ArgumentParser) -> None:
    """``--num-heads``: for the checkpoints that do not record their heads (``io.api.read``)."""
    parser.add_argument(
        "--num-heads", type=int, default=None, help="heads, if the checkpoint lacks them"
    )


def resolution(cfg: Any) -> str:
    """A config's image size as printed: '224' for a square, 'HxW' otherwise."""
    h, w = cfg.image_hw
    return str(h) if h == w else f"{h}x{w}"


def require_positive(args: argparse.Namespace, *names: str) -> None:
    """A ``VitkitError`` naming the first of the options ``names`` (``args``' attributes) whose
    value is below 1, and only that one."""
    for name in names:
        value = getattr(args, name)
        if value < 1:
            raise VitkitError(f"--{name.replace('_', '-')} {value}: expected a positive number")


def image_size_arg(text: str) -> int | tuple[int, int]:
    """``--image-size``: 'S' for S x S images, or 'HxW'."""
    try:
        sides = tuple(int(side) for side in text.lower().split("x"))
    except ValueError:
        sides = ()
    if len(sides) not in (1, 2):
        raise VitkitError(f"--image-size {text!r}: expected S or HxW, e.g. 384 or 384x512")
    return sides[0] if len(sides) == 1 else (sides[0], sides[1])


def checkpoint_name(checkpoint: str) -> str:
    """A checkpoint as a protocol's default run folder names it: ``ViT-B/16@in21k`` as it is,
    ``runs/x/best`` (or ``runs/x/checkpoints/step_N``'s run) -> ``x``, ``ViT-B_16.npz`` ->
    ``ViT-B_16``."""
    path = Path(checkpoint)
    if "@" in checkpoint:
        return checkpoint
    if path.name == "best" or path.name.startswith("step_"):
        return path.parent.name
    return path.stem


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """``--device auto|cpu|cuda`` on a verb's parser; ``resolve_device`` turns it into a device."""
    parser.add_argument(
        "--device",
        choices=get_args(Device),
        default="auto",
        help="where the model runs (auto: CUDA when torch sees a GPU, else the CPU)",
    )


def add_workers_argument(parser: argparse.ArgumentParser) -> None:
    """``--workers N`` on a verb that reads a dataset; ``resolve_workers`` reads it."""
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="processes decoding images (0: this one; default: the cores less one)",
    )


def resolve_workers(workers: int | None) -> int:
    """``--workers``: the number given, else this machine's (``runtime.machine.loader_workers``)."""
    from ..runtime.machine import loader_workers

    if workers is None:
        return loader_workers()
    if workers < 0:
        raise VitkitError(f"--workers {workers}: expected a number >= 0")
    return workers


def resolve_device(name: str) -> torch.device:
    """The device ``--device`` names (``runtime.machine.choose_device``): ``auto`` is CUDA when
    torch sees a GPU, else the CPU; ``cuda`` without one is an error."""
    from ..runtime.machine import this_device

    return this_device(name, setting="--device")  # type: ignore[arg-type]  # checked there


def image_inputs(inputs: Sequence[str]) -> list[Path]:
    """The image files a command line names, in the order given: a file as it is named, every
    image file below a folder (recursively, sorted, hidden ones skipped), and the image files and
    folders a glob matches (``photos/*.jpg``, ``photos/**/*.png``; quoted, so that vitkit expands
    it). Image files are those ending in one of ``data.folder.IMAGE_SUFFIXES``, in any case. An
    input that names no image is a ``MissingFileError`` naming it."""
    from ..data.sources.folder import IMAGE_SUFFIXES, image_files

    found: list[Path] = []
    for text in inputs:
        path = Path(text)
        if path.is_file():
            files = [path]
        elif path.is_dir():
            files = image_files(path)
        elif any(c in text for c in "*?["):
            files = []
            for match in sorted(Path(m) for m in glob.glob(text, recursive=True)):
                if match.is_dir():
                    files += image_files(match)
                elif match.suffix.lower() in IMAGE_SUFFIXES:
                    files.append(match)
            files = list(dict.fromkeys(files))  # 'a/**' matches a folder and the files below it
        else:
            raise MissingFileError(f"{text}: no such file or folder, and not a glob pattern")
        if not files:
            raise MissingFileError(
                f"{text} matches no image file: expected files ending in "
                f"{', '.join(IMAGE_SUFFIXES)}"
            )
        found += files
    return found
