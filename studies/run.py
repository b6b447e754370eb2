"""The paper's findings reproduced small, on Fashion-MNIST (docs/guides/reproduction.md).

    python studies/run.py a c e        # run what is missing of studies a, c and e
    python studies/run.py --list       # every run, its command, done or not

Every run is a plain ``vitkit`` command with its own directory under ``runs/studies/``; a finished
run's numbers go to ``studies/results.json`` (kept in git, read by ``studies/plots.py``) and it is
skipped next time. A run killed half-way resumes from its last checkpoint when the script is run
again (the loop's exact resume), so the studies can be run in several sittings. Wall times are measured
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
# the `fmnist` recipe's run (the main job's model); studies d and e look into its best weights
MAIN_JOB = ROOT / "runs" / "fmnist"
FIGURES = "docs/reproduction"


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
    fewshot: tuple[int, ...] = ()  # then few-shot linear accuracy of the best weights

    @property
    def key(self) -> str:
        return f"{self.study}/{self.name}"

    @property
    def run_dir(self) -> Path:
        return self.directory or RUNS / self.study / self.name

    @property
    def command(self) -> list[str]:
        if self.argv[0] not in ("train", "finetune"):
            return ["vitkit", *self.argv]
        return ["vitkit", *self.argv, "--run-dir", str(self.run_dir.relative_to(ROOT))]


# (a) data requirements: per-class subset sizes, 500 to 60,000 images
SIZES = (50, 250, 1250, 6000)
MODELS = {"vit": "fmnist", "resnet": "fmnist-resnet", "hybrid": "fmnist-hybrid"}
SUBSET_BUDGET = budget(600, 60)


def subset(n: int) -> list[str]:
    return [] if n == 6000 else ["--set", f"data.per_class={n}"]


def classifier_run(classifier: str, lr: str, seed: int = 0) -> Run:
    """Study c: one classifier at one learning rate, study a's budget, then its 5-shot linear
    accuracy (the paper's Fig. 9 measures ImageNet 5-shot)."""
    name = f"{classifier}-lr{lr}" + (f"-seed{seed}" if seed else "")
    seeded = ("--set", f"train.seed={seed}") if seed else ()
    argv = ("train", "--recipe", "fmnist", "--set", f"model.classifier={classifier}",
            "--set", f"optim.lr={lr}", *seeded, *budget(600, 60))  # fmt: skip
    return Run("c", name, argv, fewshot=(5,))


def studies() -> list[Run]:
    runs = [
        Run("a", f"{model}-{n}", ("train", "--recipe", recipe, *subset(n), *SUBSET_BUDGET))
        for n in SIZES
        for model, recipe in MODELS.items()
    ]
    # (b) masked patch prediction on all 60k images (labels unused), then fine-tuning on few
    # labels with the same recipe and budget as study a's ViT from scratch (a/vit-N)
    runs.append(
        Run(
            "b",
            "mpp",
            ("train", "--recipe", "fmnist", "--objective", "mpp", *budget(2000, 100)),
            fewshot=(1, 5, 25),
        )
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
    # (c) class token vs GAP at the paper's two learning rates (Fig. 9), with study
    # a's budget
    runs += [classifier_run(c, lr) for lr in ("3e-4", "8e-4") for c in ("token", "gap")]
    # a second seed where the two differ least, to see the noise
    runs += [classifier_run(c, "8e-4", seed=1) for c in ("token", "gap")]
    # (e) fine-tuning the main job's weights at 2x the resolution (posemb interpolated) against the
    # original resolution: the paper's fine-tuning recipe (SGD 0.9, no weight decay, clip 1)
    # (d) what the main job's ViT learned (a 4x4 grid of 7-px patches), and the same ViT on a
    # 7x7 grid of 4-px patches, where locality has room to show
    runs.append(Run("d", "main", ("train", "--recipe", "fmnist"), directory=MAIN_JOB))
    runs.append(
        Run(
            "d",
            "inspect-main",
            ("inspect", "runs/fmnist/best", "--out", f"{FIGURES}/inspect-fmnist"),
        )
    )
    runs.append(
        Run(
            "d",
            "vit-p4",
            ("train", "--recipe", "fmnist", "--set", "model.patch_size=4", *budget(600, 60)),
        )
    )
    runs.append(
        Run(
            "d",
            "inspect-p4",
            ("inspect", "runs/studies/d/vit-p4/best", "--out", f"{FIGURES}/inspect-p4"),
        )
    )
    runs.append(Run("e", "base", ("train", "--recipe", "fmnist"), directory=MAIN_JOB))
    for size in (28, 56):
        runs.append(
            Run(
                "e",
                f"ft-{size}px",
                (
                    "finetune", "--init-from", str((MAIN_JOB / "best").relative_to(ROOT)),
                    "--recipe", "fmnist", "--set", f"model.image_size={size}",
                    "--set", "optim.name=sgd", "--set", "optim.lr=0.01",
                    "--set", "optim.weight_decay=0.0", *budget(300, 30),
                ),
            )
        )  # fmt: skip
    return runs


def _inspection(out: Path) -> dict:
    """Study d's numbers from an inspect folder: mean attention distance per layer (over heads:
    mean, min, max) against uniform attention on the same grid, and position-embedding
    similarity by grid distance (neighbours, same row or column, the rest)."""
    import numpy as np
    import torch

    from vitkit.inspect import attention_distance

    data = json.loads((out / "attention_distance.json").read_text())
    distance = np.array(data["mean_attention_distance_px"])  # (L, H)
    gh, gw = data["grid"]
    t = gh * gw
    uniform = attention_distance(
        [torch.full((1, 1, t, t), 1.0 / t)],
        grid=(gh, gw),
        num_prefix=0,
        pixels_per_patch=data["pixels_per_patch"],
    ).item()
    sim = np.load(out / "posemb_similarity.npz")["similarity"].reshape(t, t)
    rows, cols = np.divmod(np.arange(t), gw)
    dr, dc = np.abs(rows[:, None] - rows[None]), np.abs(cols[:, None] - cols[None])
    off = ~np.eye(t, dtype=bool)
    neighbours = off & (dr + dc == 1)
    line = off & ((dr == 0) | (dc == 0)) & ~neighbours
    rest = off & ~neighbours & ~line
    return {
        "distance_by_layer": {
            "mean": distance.mean(1).round(2).tolist(),
            "min": distance.min(1).round(2).tolist(),
            "max": distance.max(1).round(2).tolist(),
        },
        "uniform_attention_distance": round(uniform, 2),
        "posemb_cosine": {
            "neighbours": round(float(sim[neighbours].mean()), 3),
            "same_row_or_column": round(float(sim[line].mean()), 3),
            "other": round(float(sim[rest].mean()), 3),
        },
    }


def _fewshot(best: Path, shots: tuple[int, ...]) -> dict:
    """Few-shot linear accuracy (mean over 3 seeds) of a checkpoint on Fashion-MNIST."""
    import vitkit
    from vitkit.config import DataConfig
    from vitkit.data.run_data import build_data
    from vitkit.eval.fewshot import fewshot_model

    model = vitkit.load(best)
    data = build_data(DataConfig(), model.cfg, seed=0, in_chans=model.cfg.in_chans)
    assert data.test is not None  # Fashion-MNIST's test split
    result = fewshot_model(
        model, data.train, data.test, shots=shots, seeds=3, image_size=model.cfg.image_size
    )
    return {f"fewshot_{k}shot": round(r["mean"], 4) for k, r in result.items()}


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
    quiet = ["--no-progress"] if run.argv[0] in ("train", "finetune") else []
    subprocess.run([sys.executable, "-m", "vitkit", *command[1:], *quiet], cwd=ROOT, check=True)
    wall = time.perf_counter() - started
    record = {"command": shlex.join(command), "wall_s": round(wall, 1), "resumed": resumed}
    if run.argv[0] == "inspect":
        record.update(_inspection(ROOT / run.argv[run.argv.index("--out") + 1]))
    else:
        record.update({k: v for k, v in _final_eval(run.run_dir).items() if k != "split"})
    if run.fewshot:
        record.update(_fewshot(run.run_dir / "best", run.fewshot))
    _store(run.key, record)
    print(f"[{run.key}] {record}", flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("studies", nargs="*", default=[], help="a b c d e (default: all)")
    parser.add_argument(
        "--list", action="store_true", help="list the runs and whether they are done"
    )
    parser.add_argument("--redo", action="append", default=[], help="run KEY again (e.g. a/vit-50)")
    args = parser.parse_args()
    done = _load()
    order = args.studies or sorted({r.study for r in studies()})
    chosen = sorted(
        (r for r in studies() if r.study in order), key=lambda r: order.index(r.study)
    )  # in the order asked, each study's runs in their own order
    for run in chosen:
        if args.list:
            state = "done" if run.key in done else "todo"
            print(f"{state}  {run.key:<16} {shlex.join(run.command)}")
        elif run.key not in done or run.key in args.redo:
            execute(run)


if __name__ == "__main__":
    main()
