"""Start-up: how long the short commands take, each a fresh ``python -m vitkit`` process.

    .venv/bin/python benchmarks/startup.py                                  # this tree, 5 rounds
    .venv/bin/python benchmarks/startup.py --variant before=/tmp/base/src --variant after=src
    .venv/bin/python benchmarks/startup.py --variant glibc=src,VITKIT_JEMALLOC=0 --variant jemalloc=src

The commands, on tiny inputs so that start-up is most of their time:

* ``train``: ``vitkit train --recipe smoke --set train.duration=4st --no-progress`` (ViT of 15k
  parameters on 16 px synthetic images, one evaluation, one checkpoint, the report's figures) in a
  fresh run directory; **to step 2** is the ``time_s`` of its second step in ``metrics.jsonl``
  (seconds since the process started: the interpreter, the imports and building the run);
* ``predict``: ``vitkit predict CKPT IMAGE``, one 64x48 PNG (resized to the model's 16 px);
* ``eval``: ``vitkit eval CKPT``, the checkpoint's 32 synthetic test images;

CKPT is the best weights of an untimed first train run. Each ``--variant LABEL=SRC[,KEY=VALUE...]``
runs the commands with ``PYTHONPATH=SRC`` and the environment variables given; every round runs
each variant once, their order alternating, so a change of load hits all. The table shows the
median over ``--rounds`` of the wall time from launch to exit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = ["train", "--recipe", "smoke", "--set", "train.duration=4st", "--no-progress"]


def _variant(text: str) -> tuple[str, dict[str, str]]:
    """``LABEL=SRC[,KEY=VALUE...]`` as (label, the environment to run it in)."""
    label, _, rest = text.partition("=")
    src, *pairs = rest.split(",")
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    env.update(pair.split("=", 1) for pair in pairs)
    return label, env


def _run(command: list[str], env: dict[str, str]) -> float:
    """Seconds from launch to exit of ``python -m vitkit COMMAND`` (its output discarded)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "vitkit", *command],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def _second_step(run_dir: Path) -> float:
    """The process time of the second step the run logged (``metrics.jsonl``)."""
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(row["time_s"] for row in steps if "split" not in row and row["step"] == 2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--variant",
        action="append",
        metavar="LABEL=SRC[,KEY=VALUE...]",
        help="a source tree (and environment) to time; repeat to compare (default: this tree)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    src = Path(__file__).resolve().parents[1] / "src"
    variants = [_variant(v) for v in args.variant or [f"this={src}"]]
    load = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="vitkit-startup-"))
    from PIL import Image

    image = work / "image.png"
    Image.new("RGB", (64, 48), (200, 30, 90)).save(image)
    _run([*TRAIN, "--run-dir", str(work / "first")], variants[0][1])
    checkpoint = str(work / "first" / "best")
    commands = {"predict": ["predict", checkpoint, str(image)], "eval": ["eval", checkpoint]}

    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for label, env in variants if r % 2 == 0 else variants[::-1]:
            run_dir = work / f"{label}-{r}"
            times.setdefault((label, "train"), []).append(
                _run([*TRAIN, "--run-dir", str(run_dir)], env)
            )
            times.setdefault((label, "to step 2"), []).append(_second_step(run_dir))
            for name, command in commands.items():
                times.setdefault((label, name), []).append(_run(command, env))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    columns = ["train", "to step 2", "predict", "eval"]
    print(f"| variant | {' | '.join(f'{c} (s)' for c in columns)} |")
    print(f"|---|{'---:|' * len(columns)}")
    for label, _ in variants:
        cells = [f"{statistics.median(times[label, c]):.2f}" for c in columns]
        print(f"| {label} | {' | '.join(cells)} |")
    print(f"medians of {args.rounds} rounds; load average {load} before, {os.getloadavg()} after")


if __name__ == "__main__":
    main()
