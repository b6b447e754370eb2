"""The verbs that train: ``train`` and ``finetune`` (one loop, train/loop.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, get_args

from ..config import Objective
from ..errors import VitkitError
from .common import NPROC_HELP, Verb, add_run_arguments, log_to_stdout

if TYPE_CHECKING:
    from pathlib import Path

    from ..compose import Composed, Request
    from ..train.loop import RunResult
    from ..train.rundir import RunLock


def _torchrun(nproc: int, argv: Sequence[str], parse: Callable[[list[str]], Any]) -> None:
    """``--nproc N``: replace this process with ``torchrun --standalone --nproc-per-node N -m
    vitkit <the same arguments but --nproc>`` (torch.distributed.run, PyTorch's own launcher,
    through cli/torchrun.py; it would take ``--nproc`` for an abbreviation of its
    ``--nproc-per-node``). ``parse``: the command line's parser, which must find no ``--nproc``
    left (an abbreviation of it)."""
    import os

    if nproc < 1:
        raise VitkitError(f"--nproc {nproc}: expected a number of processes >= 1")
    rest, skip = [], False
    for arg in argv:
        if not skip and arg != "--nproc" and not arg.startswith("--nproc="):
            rest.append(arg)
        skip = arg == "--nproc"
    if parse(rest).nproc is not None:
        raise VitkitError("--nproc: write it in full (--nproc N or --nproc=N)")
    command = [sys.executable, "-m", "vitkit.cli.torchrun", "--standalone"]  # a stop: one line
    command += [f"--nproc-per-node={nproc}", "-m", "vitkit", *rest]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


def _compose(args: argparse.Namespace) -> tuple[Request, Composed]:
    """The run a command asks for; everything that needs no torch is checked before the
    checkpoint (fine-tuning) is read."""
    from ..compose import Request, check_data_exists, check_run_data_exists, compose
    from ..config import RunConfig, parse_set
    from ..config.overrides import split_set

    request = Request(
        recipe=args.recipe,
        model=getattr(args, "model", None),
        data=args.data,
        sets=tuple(args.set or ()),
        objective=getattr(args, "objective", None),
        init_from=getattr(args, "init_from", None),
    )
    if request.init_from is None:
        composed = compose(request)
    else:  # the settings' types and the files first: reading the checkpoint imports torch
        parse_set(RunConfig, [s for s in request.sets if split_set(s)[0] not in ("model", "data")])
        if request.data is not None:
            check_data_exists(request.data)
        from ..io.api import read

        pretrained, _, meta = read(request.init_from, num_heads=args.num_heads)
        composed = compose(request, checkpoint=pretrained, checkpoint_data=meta.trained_on)
    check_run_data_exists(composed.run)
    return request, composed


def _say_choices(composed: Composed) -> list[str]:
    """Where the values that are not the recipe's came from, grouped by origin."""
    from ..compose import flat

    values = flat(composed.run.to_dict())
    groups: dict[str, list[str]] = {}
    for key, origin in composed.origin.items():
        if origin != f"recipe {composed.recipe.name}":
            groups.setdefault(origin, []).append(f"{key}={values[key]!r}")
    lines = [
        f"recipe   {composed.recipe.name}: every other setting (`vitkit config` lists them, with "
        "their origin)"
    ]
    lines += [f"         {origin}: {', '.join(items)}" for origin, items in groups.items()]
    return lines


def _train(args: argparse.Namespace) -> None:
    import logging
    import os
    from pathlib import Path

    from ..compose import default_run_dir

    request, composed = _compose(args)
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(request, composed)
    if args.nproc is not None:
        from ..runtime.machine import launched

        if launched():
            raise VitkitError("--nproc starts torchrun: leave it out of a command torchrun runs")
        _torchrun(args.nproc, args.argv, args.parse)
    main = os.environ.get("RANK", "0") == "0"  # the process that reports (torchrun's rank 0)
    # the run's statements and, with --no-progress, its log lines: rank 0's, on stdout
    log_to_stdout(logging.INFO if main else logging.WARNING)
    from ..train.rundir import RunLock

    # a run directory another process trains in stops this one here, before its data is read
    with RunLock(run_dir, enabled=main) as lock:
        _run(args, composed, run_dir, lock, main=main)


def _run(
    args: argparse.Namespace, composed: Composed, run_dir: Path, lock: RunLock, *, main: bool
) -> None:
    """The run ``composed`` in ``run_dir`` (whose ``lock`` is held): prepared, its choices
    stated, trained, summed up."""
    import os

    from ..compose import prepare
    from ..runtime.stops import StoppedError
    from ..train import distributed
    from ..train.loop import train_prepared

    world = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's
    prepared = prepare(
        composed, run_dir, lock=lock, resume_from=getattr(args, "resume", None), world=world
    )
    if main:
        for line in _say_choices(prepared.composed):
            print(line)
    try:
        with distributed.process_group(prepared.device):
            result = train_prepared(prepared, progress=not args.no_progress)
    except StoppedError as e:
        if main:
            print(f"vitkit train: {e}; run the same command to resume", file=sys.stderr)
        raise SystemExit(128 + e.signum) from None
    except RuntimeError as e:
        if not distributed.lost_peer(e):
            raise
        raise VitkitError(
            f"lost contact with another process ({distributed.describe(e)}): one died or hung "
            f"(collectives wait {distributed.timeout_s():g} s, {distributed.TIMEOUT_ENV}); "
            "torchrun's report names it"
        ) from None
    if main:
        for line in _summary(prepared.composed, result, run_dir):
            print(line)


def _summary(composed: Composed, result: RunResult, run_dir: Path) -> list[str]:
    """The end of a run: its final figures, and its time to accuracy where its recipe has
    targets, else the best validation accuracy and when it came."""
    from ..runtime.clock import process_seconds
    from ..train.report import best_evaluation, time_to_accuracy

    run = composed.run
    mpp = run.train.objective == "mpp"
    what = "masked-patch colour accuracy" if mpp else "accuracy"
    best = best_evaluation(run_dir)
    evaluation = result.evaluation
    line = f"{result.split} {what} {evaluation.accuracy:.4f}"
    if evaluation.top5 is not None:
        line += f" (top-5 {evaluation.top5:.4f})"
    line += f" on {evaluation.count:,} {'patches' if mpp else 'images'}"
    for shots, acc in evaluation.fewshot.items():
        line += f"; {shots}-shot linear {acc['mean']:.4f}"
    for name, per_shots in evaluation.fewshot_data.items():
        line += f"; {name} " + ", ".join(
            f"{shots}-shot {acc['mean']:.4f}" for shots, acc in per_shots.items()
        )
    if result.split == "val":
        line += " (no test split: the last evaluation)"
    elif best is not None and best["split"] == "val":
        line += " with the best weights"
    lines = [
        f"{line}; {process_seconds() / 60:.1f} min after the process started; best weights in "
        f"{run_dir}/best"
    ]
    if result.ended_early is not None:  # said first: the figures are of a run ended early
        lines.insert(0, result.ended_early)
    targets = composed.recipe.targets
    if targets is not None and run.train.objective == "classification":

        def reached(key: str) -> str:
            timing = time_to_accuracy(
                run_dir, targets=targets.accuracies, at_minutes=targets.at_minutes, key=key
            )
            text = ", ".join(
                f"{100 * t:g}% at {s / 60:.1f} min"
                if s is not None
                else f"{100 * t:g}% not reached"
                for t, s in timing["seconds_to"].items()
            )
            at = timing["accuracy_at"]
            return f"{text}; at {timing['at_minutes']:g} min: {'—' if at is None else f'{at:.4f}'}"

        flips = run.data.test_flip
        lines.append(
            "time to accuracy (metrics.jsonl, from process start"
            + (", each test image with its mirror" if flips else "")
            + f"): {reached('accuracy')}"
            + (f" (one view: {reached('accuracy_one_view')})" if flips else "")
        )
    elif best is not None:
        into = best.get("run_s")  # absent from a log an earlier vitkit wrote
        lines.append(
            f"best {best['split']} {what} {best['accuracy']:.4f} at step {best['step']:,}"
            + ("" if into is None else f", {into / 60:.1f} min into the run")
        )
    return lines


def _recipes_epilog(example: str) -> str:
    """The recipes, one line each, and an example: the end of ``train --help``."""
    from ..recipes import RECIPES

    width = max(len(name) for name in RECIPES)
    lines = [f"  {name:<{width}}  {r.about}" for name, r in RECIPES.items()]
    return (
        "recipes (--recipe; scratch when --data is given without one):\n"
        + "\n".join(lines)
        + (f"\n\nexample: {example}")
    )


def _run_arguments(p: argparse.ArgumentParser, *, finetune: bool, example: str) -> None:
    """The arguments train and finetune share, and the recipes at the end of their help."""
    from ..config import DATA_SPECS

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = _recipes_epilog(example)
    p.add_argument(
        "--data",
        default=None,
        metavar="SPEC",
        help=f"what to train on: {DATA_SPECS}"
        + (" (default: the checkpoint's data)" if finetune else ""),
    )
    p.add_argument(
        "--recipe",
        default=None,
        help="the hyperparameters (default: "
        + ("finetune" if finetune else "scratch with --data")
        + "); the list below",
    )
    add_run_arguments(
        p,
        sets="a setting, read by its type, e.g. optim.lr=3e-4, data.flip=true (`vitkit config` "
        "lists them); model=PRESET and data=SPEC as --model and --data",
        run_dir="where checkpoints and metrics go (default: runs/<recipe>[-<model>]-<data>[-<hash "
        "of the data's path and the --set items>], the same for the same command: running it "
        "again resumes)",
        checkpoint=finetune,
        progress="no progress bar: one line per log window",
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="CHECKPOINT",
        help="continue from a checkpoint of another run directory (RUN/checkpoints/step_00000020, "
        "or step_20) when "
        "this one holds none",
    )
    p.add_argument("--nproc", type=int, default=None, metavar="N", help=NPROC_HELP)


def add_verbs(verb: Verb) -> None:
    example = "vitkit train --data photos/ --model ViT-Ti/16   |   vitkit train --recipe fmnist"
    p = verb(
        "train",
        "train a model on your data, or run a recipe (resumes if the run directory has a "
        "checkpoint)",
        _train,
        example,
    )
    p.add_argument(
        "--model",
        default=None,
        metavar="PRESET",
        help="the architecture and resolution, a preset name (`vitkit presets`); the recipe's "
        "regularisation is kept",
    )
    _run_arguments(p, finetune=False, example=example)
    p.add_argument(
        "--objective",
        choices=get_args(Objective),
        default=None,
        help="mpp: masked patch prediction [P 4.6] on the recipe's images, labels unused "
        "(same as --set train.objective=mpp, label smoothing, mixup, CutMix and erasing off)",
    )

    example = "vitkit finetune --init-from runs/x/best --data photos/ --set model.image_size=64"
    p = verb(
        "finetune",
        "fine-tune pre-trained weights: new zero head, posemb resized [P B.1.1]",
        _train,
        example,
    )
    p.add_argument(
        "--init-from", required=True, help="pre-trained checkpoint (any format vitkit reads)"
    )
    _run_arguments(p, finetune=True, example=example)
