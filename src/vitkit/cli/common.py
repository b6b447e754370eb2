"""What several verbs share: help texts, ``--device``, reading a checkpoint with its class names
and preprocessing, images from files, folders and globs, and the registration of a verb's
parser."""

from __future__ import annotations

import argparse
import glob
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, get_args

from ..config import Device
from ..errors import MissingFileError, VitkitError

if TYPE_CHECKING:
    import torch

    from ..data import Preprocess
    from ..io.metadata import WeightsMeta
    from ..model import ResNetClassifier, VisionTransformer

NPROC_HELP = (
    "data-parallel on N processes of this machine: runs this command under torchrun "
    "--standalone --nproc-per-node N (docs/guides/scale-out.md)"
)

FAST_HELP = (
    "compile the model with frozen weights (vitkit.optimize_for_inference): the same logits, "
    "faster once compiled (tens of seconds): worth it for many images"
)

DEBUG_HELP = "show the traceback of any error (also VITKIT_DEBUG=1)"

PRECISIONS = ("auto", "fp32", "bf16")
PRECISION_HELP = (
    "the arithmetic of the forward passes: auto (bf16 autocast on CUDA, and on a CPU with "
    "native bf16 (AVX512_BF16, AMX) when a batch is large enough to gain; else fp32), fp32, or "
    "bf16"
)
INT8_HELP = (
    "; or int8 on a CPU (torchao: calibrated on the checkpoint's training images, checked "
    "against fp32 on held-out images and refused past --int8-max-change; tens of seconds "
    "first: worth it for many images)"
)


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


def fast(model: Any, enabled: bool, autocast: torch.dtype | None = None) -> Any:
    """``model``, or its compiled inference path with ``--fast`` (computing in bf16 when
    ``autocast`` is)."""
    if not enabled:
        return model
    from ..runtime.inference import optimize_for_inference

    return optimize_for_inference(model, bf16=autocast is not None)


def add_precision_argument(parser: argparse.ArgumentParser, *, int8: bool = False) -> None:
    """``--precision auto|fp32|bf16`` (and ``int8`` with its settings, where ``int8``) on a verb
    that runs a model; ``resolve_precision`` reads it, ``int8_inference`` int8."""
    if not int8:
        parser.add_argument("--precision", choices=PRECISIONS, default="auto", help=PRECISION_HELP)
        return
    from ..config.int8 import CALIBRATION, MAX_TOP1_CHANGE

    parser.add_argument(
        "--precision",
        choices=(*PRECISIONS, "int8"),
        default="auto",
        help=PRECISION_HELP + INT8_HELP,
    )
    parser.add_argument(
        "--int8-calibration",
        type=int,
        default=CALIBRATION,
        metavar="N",
        help="training images int8 is calibrated on",
    )
    parser.add_argument(
        "--int8-max-change",
        type=float,
        default=MAX_TOP1_CHANGE,
        metavar="POINTS",
        help="the most int8 may move top-1 accuracy on held-out images before it is refused",
    )


def int8_inference(
    args: argparse.Namespace, model: Any, split: Any, device: torch.device, *, say: Any = None
) -> Any:
    """``--precision int8``: ``model`` calibrated and checked on ``split`` (``eval.int8``),
    said in one line on ``say`` (None: stdout)."""
    if device.type != "cpu":
        raise VitkitError(f"--precision int8 runs on the CPU (x86 int8 kernels): not on {device}")
    if args.fast:
        raise VitkitError("--fast with --precision int8: int8 is compiled already; give one")
    from ..eval.int8 import int8_model

    calibrated = int8_model(
        model,
        split,
        batch_size=args.batch_size,
        source=args.checkpoint,
        calibration=args.int8_calibration,
        max_change=args.int8_max_change,
    )
    print(calibrated.said(split), file=say or sys.stdout, flush=True)
    return calibrated.model


def resolve_precision(
    precision: str, model: Any, batch: int, device: torch.device, *, say: Any = None
) -> torch.dtype | None:
    """``--precision`` made concrete for forward passes of ``batch`` images of ``model`` on
    ``device`` (``runtime.arithmetic.inference_precision``), said in one line on ``say`` (a
    file; None: stdout): the autocast dtype, None for fp32."""
    import torch

    from ..model.flops import count_flops
    from ..runtime.arithmetic import inference_precision

    gflop = count_flops(model.cfg) * max(batch, 1) / 1e9
    chosen, why = inference_precision(precision, device, gflop=gflop)  # type: ignore[arg-type]  # argparse's choices
    print(f"precision {chosen} ({why})", file=say or sys.stdout, flush=True)
    return torch.bfloat16 if chosen == "bf16" else None


def resolution(cfg: Any) -> str:
    """A config's image size as printed: '224' for a square, 'HxW' otherwise."""
    h, w = cfg.image_hw
    return str(h) if h == w else f"{h}x{w}"


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


def printable(name: str) -> str:
    """A name from a file (a class name a checkpoint records) as a terminal may show it: its
    non-printable characters escaped as Python writes them (a newline as ``\\n``, an escape
    sequence's ``\\x1b``, U+202E, which turns the rest of a line around, as ``\\u202e``)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint as a verb runs it (``open_checkpoint``)."""

    model: VisionTransformer | ResNetClassifier  # in eval mode
    meta: WeightsMeta  # what travels with the weights, as recorded (and checked when read)
    names: list[str]  # a name per output as printed (``printable``), else the class's number
    preprocess: Preprocess  # the recorded one, else the official one at the model's resolution


def open_checkpoint(path: str) -> Checkpoint:
    """A checkpoint's model, what travels with it, and the class names and preprocessing a verb
    uses, from one read."""
    from ..data import Preprocess
    from ..io.api import load_with_meta

    model, meta = load_with_meta(path)
    recorded = meta.class_names or [str(i) for i in range(model.cfg.num_classes)]
    preprocess = meta.preprocess or Preprocess(
        image_size=model.cfg.image_size, in_chans=model.cfg.in_chans
    )
    return Checkpoint(model, meta, [printable(name) for name in recorded], preprocess)


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
