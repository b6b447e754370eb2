"""``vitkit transfer``: the paper's transfer protocol on a checkpoint (transfer/finetuning.py)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ..errors import VitkitError
from ..transfer.paper import DEFAULT_LR
from .common import Verb, add_run_arguments, checkpoint_name

EXAMPLE = (
    "vitkit transfer ViT-B/16@in21k --data cifar10:~/data/cifar-10-batches-py "
    "--data pets=hf:~/data/oxford-iiit-pet --data ~/data/flowers102   |   a quick look: "
    "--steps 0.01 --set train.batch_size=32 --set train.accum_steps=1"
)


def _default_run_dir(checkpoint: str) -> Path:
    """``runs/transfer-<checkpoint>``: runs/x/best -> x, ViT-B_16.npz -> vit-b_16,
    ViT-B/16@in21k -> vit-b-16-in21k."""
    name = checkpoint_name(checkpoint)
    return Path("runs") / ("transfer-" + re.sub(r"[^a-z0-9_]+", "-", name.lower()).strip("-"))


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(x) for x in text.split(","))
    except ValueError:
        rates = ()
    if not rates or min(rates) <= 0:
        raise VitkitError(f"--lrs {text!r}: expected learning rates like 0.001,0.003,0.01,0.03")
    return rates


def _transfer(args: argparse.Namespace) -> None:
    import json
    import logging

    from ..compose import check_data_exists
    from ..config import RunConfig, parse_set
    from ..files import atomic_write, atomic_write_text, check_output_file
    from ..transfer.finetuning import TABLE, Options, datasets, settings_line, table, transfer
    from ..transfer.paper import check_paper_model, parse_steps
    from .common import log_to_stdout

    # everything a user can get wrong, before torch is imported
    if args.json is not None:
        check_output_file(Path(args.json), ".json")
    chosen = datasets(args.data)
    for dataset in chosen:
        check_data_exists(dataset.spec)
    sets = tuple(args.set or ())
    parse_set(RunConfig, list(sets))
    # a file by its absolute path: the record (and each run's config) names it wherever the
    # command runs from; a pretrained name as it is
    given = Path(args.checkpoint).expanduser()
    checkpoint = str(given.resolve()) if given.exists() else args.checkpoint
    options = Options(  # checks what the protocol decides, the rates and the resolution
        checkpoint=checkpoint,
        resolution=args.resolution,
        sweep=args.sweep,
        lr=args.lr,
        lrs=None if args.lrs is None else _rates(args.lrs),
        holdout=args.holdout,
        steps=None if args.steps is None else parse_steps(args.steps),
        sets=sets,
        paper_model=None if args.paper is None else check_paper_model(args.paper),
        num_heads=args.num_heads,
        progress=not args.no_progress,
    )
    if args.holdout is not None and not 0 < args.holdout < 1:
        raise VitkitError(f"--holdout {args.holdout}: expected a fraction between 0 and 1")
    run_dir = Path(args.run_dir) if args.run_dir else _default_run_dir(args.checkpoint)
    log_to_stdout(logging.INFO if args.verbose else logging.WARNING)
    for dataset in chosen:
        print(settings_line(dataset, options))

    from ..runtime.stops import StoppedError
    from ..train.rundir import RunLock

    with RunLock(run_dir) as lock:  # one protocol at a time in its folder
        lock.make()
        try:
            summary = transfer(chosen, options, run_dir)
        except StoppedError as e:
            print(f"vitkit transfer: {e}; run the same command to resume", file=sys.stderr)
            raise SystemExit(128 + e.signum) from None
    lines = table(summary)
    text = "\n".join(lines) + "\n"
    atomic_write(run_dir / TABLE, lambda p: p.write_text(text))
    print()
    print(text, end="")
    print(f"\nwrote {run_dir / TABLE} and {run_dir / 'transfer.json'} (the record; resumes)")
    if args.json is not None:
        atomic_write_text(Path(args.json), json.dumps(summary, indent=2) + "\n")
        print(f"wrote {args.json}")


def add_verbs(verb: Verb) -> None:
    p = verb(
        "transfer",
        "the paper's transfer protocol on a checkpoint: per dataset a learning-rate sweep on a "
        "holdout of train, then all of train, tested (ImageNet: ReaL too); resumes [P Table 2, "
        "Table 4, B.1.1]",
        _transfer,
        EXAMPLE,
    )
    p.add_argument("checkpoint", help="pre-trained weights: a file, a run's best/, or PRESET@TAG")
    p.add_argument(
        "--data",
        action="append",
        required=True,
        metavar="[NAME=]SPEC",
        help="a dataset, repeatable; its name (NAME, else the spec's: cifar10, a folder's name) "
        "picks the paper's settings: imagenet, cifar10, cifar100, pets, flowers (and their "
        "usual spellings: oxford-iiit-pet, flowers102, ilsvrc2012, ...); any other takes "
        "CIFAR's (10,000 steps, 2%% holdout, lr 0.001..0.03)",
    )
    p.add_argument(
        "--resolution",
        type=int,
        default=None,
        metavar="PX",
        help="fine-tuning resolution (default: 384, the paper's)",
    )
    p.add_argument(
        "--sweep",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="sweep the dataset's learning rates on a holdout (default); --no-sweep: one run "
        "on all of train with --lr",
    )
    p.add_argument(
        "--lr",
        type=float,
        default=DEFAULT_LR,
        help=f"the learning rate with --no-sweep (default {DEFAULT_LR:g}: the middle of the "
        "paper's sweeps, and its VTAB rate)",
    )
    p.add_argument(
        "--lrs", default=None, metavar="A,B,...", help="the rates swept (default: the dataset's)"
    )
    p.add_argument(
        "--holdout",
        type=float,
        default=None,
        metavar="FRACTION",
        help="the fraction of every class of train held out (default: the dataset's: 0.1 "
        "Pets and Flowers, 0.02 CIFAR, 0.01 ImageNet)",
    )
    p.add_argument(
        "--steps",
        default=None,
        help="a whole number: that many steps for every run (e.g. 200); a number with a "
        "decimal point: the dataset's Table 4 steps scaled (0.01: 100 of CIFAR's 10,000, 5 of "
        "Pets' 500; at least 1)",
    )
    p.add_argument(
        "--paper",
        default=None,
        metavar="PRESET@PRE-TRAINING",
        help="the paper's model to compare with, e.g. ViT-B/16@in1k, ViT-H/14@jft (default: "
        "the checkpoint's name, for ViT-*@in21k)",
    )
    add_run_arguments(
        p,
        sets="a setting of every run (`vitkit config` lists them), e.g. train.batch_size=32",
        run_dir="where the runs and the record go (default: runs/transfer-<checkpoint>); running "
        "the same command again resumes",
        checkpoint=True,
    )
    p.add_argument("--json", default=None, metavar="FILE", help="also write the summary here")
    p.add_argument("--verbose", action="store_true", help="each run's statements and log lines")
