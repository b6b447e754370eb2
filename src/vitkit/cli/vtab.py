"""``vitkit vtab``: VTAB-1k on a checkpoint, the paper's protocol (transfer/vtab.py)."""

from __future__ import annotations

import argparse
import math
import reprlib
import sys
from pathlib import Path

from ..errors import ConfigError
from .common import Verb, add_run_arguments, checkpoint_name


def _numbers(text: str, kind: type, what: str, most: float = math.inf) -> list:
    """``--lrs``, ``--steps``: positive numbers up to ``most``, each once."""
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or not all(0 < v <= most for v in values):
        bound = f" up to {most:,}" if most < math.inf else ""
        raise ConfigError(
            f"--{what} {reprlib.repr(text)}: expected positive numbers{bound} separated by commas"
        )
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise ConfigError(f"--{what} {reprlib.repr(text)}: {twice} twice: give each once")
    return values


def _name(checkpoint: str) -> str:
    """A checkpoint as a run folder names it: ``ViT-B/16@in21k`` -> ``ViT-B_16@in21k``,
    ``runs/x/best`` -> ``x``, ``ViT-B_16.npz`` -> ``ViT-B_16``."""
    import re

    return re.sub(r"[^A-Za-z0-9._@-]+", "_", checkpoint_name(checkpoint))


def _vtab(args: argparse.Namespace) -> None:
    import json

    from ..config import RunConfig, parse_set
    from ..transfer.paper import MAX_STEPS
    from ..transfer.vtab import Candidate, VtabSetup, check_flags, run_vtab, table
    from ..transfer.vtab_tasks import find_tasks

    lrs = _numbers(args.lrs, float, "lrs")
    steps = _numbers(args.steps, int, "steps", MAX_STEPS)
    candidates = tuple(Candidate(lr, n) for lr in lrs for n in steps)
    sets = tuple(args.set or ())
    # before the checkpoint is read (a name may download it)
    check_flags(candidates, args.resolution, sets)
    parse_set(RunConfig, list(sets))
    only = args.tasks.split(",") if args.tasks else None
    tasks = find_tasks(args.root, args.task or (), only)  # the data first
    from ..io.api import read

    pretrained, _, _ = read(args.checkpoint, num_heads=args.num_heads)
    given = Path(args.checkpoint)  # a file by its absolute path: resumed from anywhere alike
    protocol = VtabSetup(
        checkpoint=str(given.resolve()) if given.exists() else args.checkpoint,
        pretrained=pretrained,
        candidates=candidates,
        resolution=args.resolution,
        sets=sets,
        per_task=args.per_task,
        sweep=not args.no_sweep,
    )
    out = Path(args.out) if args.out else Path("runs") / f"vtab-{_name(args.checkpoint)}"
    print(f"{len(tasks)} task(s): " + ", ".join(f"{d.task.name} ({d.spec})" for d in tasks))
    from ..runtime.stops import StoppedError
    from ..train.rundir import RunLock

    with RunLock(out, flag="--out") as lock:  # one protocol at a time in its folder
        lock.make()
        try:
            result = run_vtab(
                protocol,
                tasks,
                out,
                progress=not args.no_progress,
                said=lambda line: print(line, flush=True),
            )
        except StoppedError as e:
            print(f"vitkit vtab: {e}; run the same command to resume", file=sys.stderr)
            raise SystemExit(128 + e.signum) from None
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(table(result))
    print(f"wrote {out / 'vtab.json'} (every run below {out}; the same command resumes)")


def add_verbs(verb: Verb) -> None:
    example = "vitkit vtab ViT-B/16@in21k /data/vtab-1k --resolution 384"
    p = verb(
        "vtab",
        "VTAB-1k on a checkpoint [P 4.1]: sweep on train800/val200, one setting chosen by the "
        "mean val200 accuracy, trained on all 1,000 and tested; group means and the mean",
        _vtab,
        example,
    )
    p.add_argument("checkpoint", help="pre-trained weights (any checkpoint vitkit reads)")
    p.add_argument(
        "root",
        nargs="?",
        default=None,
        help="the prepared VTAB-1k folder: ROOT/<task>/{train800,val200,train800val200,test}.txt "
        "and ROOT/<task>/images/ (the release's folder names: cifar, clevr_dist, kitti, "
        "dsprites_loc, smallnorb_azi, ...)",
    )
    p.add_argument(
        "--task",
        action="append",
        metavar="NAME=SPEC",
        help="a task's data as any spec vitkit reads (hf:, wds:, a folder, vtab:DIR); 1,000 "
        "images of its train split are drawn (seeded), its test split tested",
    )
    p.add_argument("--tasks", default=None, help="only these tasks, separated by commas")
    p.add_argument(
        "--out", default=None, help="where the runs go (default: runs/vtab-<checkpoint>)"
    )
    p.add_argument(
        "--resolution",
        type=int,
        default=None,
        help="fine-tuning resolution (default: the checkpoint's; the paper's: 384)",
    )
    p.add_argument("--lrs", default="0.001,0.01", help="the sweep's learning rates")
    p.add_argument("--steps", default="500,2500", help="the sweep's numbers of steps")
    p.add_argument(
        "--per-task", action="store_true", help="choose each task's setting on its own val200"
    )
    p.add_argument(
        "--no-sweep", action="store_true", help="no sweep: the paper's lr 0.01, 2,500 steps"
    )
    add_run_arguments(
        p,
        sets="a setting of every run, e.g. train.device=cpu (`vitkit config` lists them)",
        run_dir=None,  # --out, above
        checkpoint=True,
    )
    p.add_argument("--json", action="store_true", help="the result as JSON, not a table")
