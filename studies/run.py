"""The paper's findings reproduced small, on Fashion-MNIST (docs/REPRODUCTION.md).

    python studies/run.py a c e        # run what is missing of studies a, c and e
    python studies/run.py --list       # every run, its command, done or not

Every run is a plain ``vitkit`` command with its own directory under ``runs/studies/``; a finished
run's numbers go to ``studies/results.json`` (kept in git, read by ``studies/plots.py``) and it is
skipped next time. A run killed half-way resumes from its last checkpoint when the script is run
again (the loop's exact resume), so the studies can span several sessions. Wall times are measured
on a 2-core machine shared with other work: read them as rough costs, not benchmarks.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "studies" / "results.json"
RUNS = ROOT / "runs" / "studies"
MAIN_JOB = ROOT / "runs" / "fmnist"  # `make run`; study e fine-tunes its best weights


def budget(steps: int, warmup: int) -> list[str]:
    """A fixed optimizer-step budget (so small subsets see many epochs, as in the paper's Fig. 3/4
    where every dataset gets the same schedule), evaluated once at the end, saved every 100 steps."""
    return [
        *("--set", f"train.duration={steps}st"),
        *("--set", f"optim.warmup={warmup}st"),
        *("--set", f"train.eval_every={steps}st"),
        *("--set", "train.save_every=100st"),
    ]


@dataclass(frozen=True)
class Run:
    study: str
    name: str
    argv: tuple[str, ...]  # vitkit's arguments, without --run-dir
    directory: Path | None = None  # default: runs/studies/<study>/<name>

    @property
    def key(self) -> str:
        return f"{self.study}/{self.name}"

    @property
    def run_dir(self) -> Path:
        return self.directory or RUNS / self.study / self.name

    @property
    def command(self) -> list[str]:
        return ["vitkit", *self.argv, "--run-dir", str(self.run_dir.relative_to(ROOT))]


# (a) data requirements: per-class subset sizes, 500 to 60,000 images
SIZES = (50, 250, 1250, 6000)
MODELS = {"vit": "fmnist", "resnet": "fmnist-resnet", "hybrid": "fmnist-hybrid"}
SUBSET_BUDGET = budget(600, 60)


def subset(n: int) -> list[str]:
    return [] if n == 6000 else ["--set", f"data.per_class={n}"]


def studies() -> list[Run]:
    runs = [
        Run("a", f"{model}-{n}", ("train", "--recipe", recipe, *subset(n), *SUBSET_BUDGET))
        for n in SIZES
        for model, recipe in MODELS.items()
    ]
    # (b) masked patch prediction on all 60k images (labels unused), then fine-tuning on few
    # labels with the same recipe and budget as study a's ViT from scratch (a/vit-N)
    runs.append(
        Run("b", "mpp", ("train", "--recipe", "fmnist", "--objective", "mpp", *budget(2000, 100)))
    )
    mpp = str((RUNS / "b" / "mpp" / "best").relative_to(ROOT))
    runs += [
        Run(
            "b",
            f"mpp-ft-{n}",
            ("finetune", "--init-from", mpp, "--recipe", "fmnist", *subset(n), *SUBSET_BUDGET),
        )
        for n in (50, 250)
    ]
    # (c) class token vs GAP at the paper's two learning rates (Fig. 9) and one higher
    runs += [
        Run(
            "c",
            f"{classifier}-lr{lr}",
            (
                "train",
                "--recipe",
                "fmnist",
                "--set",
                f"model.classifier={classifier}",
                "--set",
                f"optim.lr={lr}",
                *budget(1000, 100),
            ),
        )
        for lr in ("3e-4", "8e-4", "3e-3")
        for classifier in ("token", "gap")
    ]
    # (e) fine-tuning the main job's weights at 2x the resolution (posemb interpolated) against the
    # original resolution: the paper's fine-tuning recipe (SGD 0.9, no weight decay, clip 1)
    runs.append(Run("e", "base", ("train", "--recipe", "fmnist"), directory=MAIN_JOB))
    for size in (28, 56):
        runs.append(
            Run(
                "e",
                f"ft-{size}px",
                (
                    "finetune", "--init-from", str((MAIN_JOB / "best").relative_to(ROOT)), "--recipe", "fmnist",
                    "--set", f"model.image_size={size}", "--set", "optim.name=sgd", "--set", "optim.lr=0.01",
                    "--set", "optim.weight_decay=0.0", *budget(300, 30),
                ),
            )
        )  # fmt: skip
    return runs


def _final_eval(run_dir: Path) -> dict:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    tests = [json.loads(line) for line in lines if '"split": "test"' in line]
    if not tests:
        raise RuntimeError(f"{run_dir}: no test evaluation in metrics.jsonl")
    return tests[-1]


def _load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}


def _store(key: str, record: dict) -> None:
    results = _load()
    results[key] = record
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(results.items())), indent=1) + "\n")
    tmp.replace(RESULTS)


def execute(run: Run) -> dict:
    command = run.command
    resumed = run.run_dir.joinpath("checkpoints").is_dir()
    print(f"[{run.key}] {shlex.join(command)}", flush=True)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "vitkit", *command[1:], "--no-progress"], cwd=ROOT, check=True
    )
    wall = time.perf_counter() - started
    record = {"command": shlex.join(command), "wall_s": round(wall, 1), "resumed": resumed}
    record.update({k: v for k, v in _final_eval(run.run_dir).items() if k != "split"})
    _store(run.key, record)
    print(f"[{run.key}] {record}", flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("studies", nargs="*", default=[], help="a b c e (default: all)")
    parser.add_argument(
        "--list", action="store_true", help="list the runs and whether they are done"
    )
    parser.add_argument("--redo", action="append", default=[], help="run KEY again (e.g. a/vit-50)")
    args = parser.parse_args()
    done = _load()
    chosen = [r for r in studies() if not args.studies or r.study in args.studies]
    for run in chosen:
        if args.list:
            state = "done" if run.key in done else "todo"
            print(f"{state}  {run.key:<16} {shlex.join(run.command)}")
        elif run.key not in done or run.key in args.redo:
            execute(run)


if __name__ == "__main__":
    main()
