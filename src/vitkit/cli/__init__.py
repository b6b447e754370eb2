"""``vitkit <verb>``: the command line.

Each verb imports what it needs when it runs, so ``vitkit --help`` never imports torch. Every
error a user can cause (``VitkitError``, and an ``OSError`` of a full disk or a folder we may not
write) is one line on stderr and exit status 2; anything else is a bug in vitkit and keeps its
traceback; an allocation the machine refused is one line too, naming an address-space limit
where one is set (runtime/allocator.py). ``--debug`` (or ``VITKIT_DEBUG=1``) shows the
traceback of any error. A Python warning is one line on stderr too, ``vitkit: warning:
<message>``, while ``main`` runs. A process that has been in torchrun's process group ends in
``main``, with the same exit status, without the interpreter's shutdown
(``train.distributed.end_process``).

The verbs live by what they work on: ``models`` (presets, summary, convert, export),
``training`` (train, finetune), ``transfer`` (the paper's transfer protocol), ``vtab`` (the
VTAB-1k protocol), ``evaluation`` (eval, predict, fewshot, inspect), ``data`` (data pack).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import TextIO

from ..errors import UserFileError, VitkitError
from ..version import __version__
from . import data, evaluation, models, settings, training, transfer, vtab
from .common import DEBUG_HELP


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vitkit",
        description="The Vision Transformer (Dosovitskiy et al., ICLR 2021) on PyTorch.",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    parser.add_argument("--version", action="version", version=f"vitkit {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(
        name: str, help: str, run: Callable[[argparse.Namespace], None], example: str
    ) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help, description=help, epilog=f"example: {example}")
        p.set_defaults(run=run)
        p.add_argument(  # after the verb too; SUPPRESS keeps a `vitkit --debug VERB` given before
            "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
        )
        return p

    models.add_verbs(verb)
    training.add_verbs(verb)
    transfer.add_verbs(verb)
    evaluation.add_verbs(verb)
    settings.add_verbs(verb)
    data.add_verbs(verb)
    vtab.add_verbs(verb)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is not None:  # a caller in this process
        return _main(list(argv))
    # the command line: the allocator, once
    from ..runtime.allocator import fit_address_limit, preload_jemalloc

    preload_jemalloc()
    fit_address_limit()
    try:
        status = _main(sys.argv[1:])
    except BaseException as e:
        if not _joined_process_group():
            raise
        status = _exit_status(e)
    if _joined_process_group():  # a process of torchrun's: gloo's threads outlive the group
        from ..train.distributed import end_process

        end_process(status)
    return status


def _main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv, args.parse = argv, parser.parse_args  # --nproc: the same arguments under torchrun
    debug = args.debug or os.environ.get("VITKIT_DEBUG", "0") not in ("", "0")
    with warnings.catch_warnings():  # restores the caller's showwarning and filters on return
        warnings.showwarning = _show_warning
        return _run(args, debug)


# The verbs whose runs take SIGTERM and SIGINT as stop requests (``runtime.stops``).
TRAINING_VERBS = frozenset({"train", "finetune", "transfer", "vtab"})


def _on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _run(args: argparse.Namespace, debug: bool) -> int:
    """Run the verb: its user errors as one line and exit status 2. A SIGTERM ends it as Ctrl-C
    does, through its ``finally`` blocks (status 143): the default action ended the process where
    it stood, and ``data pack``, ``export`` and ``convert`` left their hidden staging folders
    (``files.atomic_files``) behind. The verbs that train take it as a stop request instead
    (``runtime.stops``), and keep the default action until then (torchrun's tests read a
    process's handler as "in its steps")."""
    main_thread = threading.current_thread() is threading.main_thread()  # signals: there only
    ours = main_thread and args.verb not in TRAINING_VERBS
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if ours else None
    try:
        args.run(args)
    except BrokenPipeError:  # `vitkit config | head`: the reader has all it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  # nothing more to flush at exit
        return 0
    except (VitkitError, OSError, MemoryError, RuntimeError, ImportError) as e:
        line = None if debug else _user_line(e)
        if line is None:
            raise  # a bug in vitkit: its traceback says where
        print(f"vitkit {args.verb}{_rank()}: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"vitkit {args.verb}: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


def _joined_process_group() -> bool:
    """Whether this process has been in torchrun's process group (``train.distributed`` says; a
    verb that never imported it has not been: importing it here would import torch for all)."""
    distributed = sys.modules.get("vitkit.train.distributed")
    return distributed is not None and distributed.joined()


def _exit_status(e: BaseException) -> int:
    """The exit status the interpreter would give ``e`` ending the command, with what it would
    write: a ``SystemExit``'s status (a stop's 128 + its signal: cli/training.py), else 1 and the
    traceback."""
    if isinstance(e, SystemExit):
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    sys.excepthook(type(e), e, e.__traceback__)
    return 1


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` for the command line: the message alone, on one line of stderr
    (its lines joined), without the file name and source line meant for a developer."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    print(f"vitkit: warning: {text}", file=sys.stderr if file is None else file)


# Errors of the machine, not of vitkit: a full disk, a quota or a file size limit (io.checkpoint's
# DISK_ERRNOS: not imported, it would import torch), a folder we may not write.
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES})


def _user_line(e: BaseException) -> str | None:
    """The one line an error of the user's or the machine's is (None: a bug, kept whole): a
    ``VitkitError``, an ``OSError`` of ``ENVIRONMENT_ERRNOS``, or an allocation refused
    (``runtime.allocator.out_of_memory``: ``MemoryError``, ``ENOMEM``, torch's and oneDNN's)."""
    if isinstance(e, VitkitError) or (isinstance(e, OSError) and e.errno in ENVIRONMENT_ERRNOS):
        return _one_line(e)
    from ..runtime.allocator import out_of_memory

    return out_of_memory(e)


def _one_line(e: BaseException) -> str:
    """The first line of an error's message (an ``OSError`` says which file)."""
    if isinstance(e, OSError) and not isinstance(e, UserFileError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _rank() -> str:
    """`` [rank R]`` in a process started by torchrun with several processes, else nothing."""
    world = os.environ.get("WORLD_SIZE", "1")
    return f" [rank {os.environ.get('RANK', '0')}]" if world != "1" else ""


if __name__ == "__main__":
    sys.exit(main())
