"""The figures the guides show of a run and of ``vitkit inspect``, made from tiny runs when the
site is built (``make docs``): a run of the ``fmnist`` recipe's model for 300 steps on
Fashion-MNIST, then ``vitkit inspect`` of its best weights; and ``vitkit inspect`` of a colour
model (the ``smoke`` recipe's, at 32 px, trained 20 steps on synthetic colour images), the page
``browser_check.py`` opens to see the maps drawn on colour images.

    .venv/bin/python docs/make_figures.py docs/generated           # once; kept until deleted
    .venv/bin/python docs/make_figures.py docs/generated --again   # made again

Writes ``OUT/run/{curves,confusion}.png``, ``OUT/inspect/`` (its ``index.html``, the Fig. 7
panels and the attention rollout) and ``OUT/inspect-colour/``. The studies' figures, from runs of
10 minutes or more, are committed under ``docs/reproduction/`` instead.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

RUN = [
    "train", "--recipe", "fmnist", "--no-progress",
    "--set", "train.duration=300st", "--set", "optim.warmup=30st",
    "--set", "train.eval_every=100st", "--set", "train.save_every=300st",
]  # fmt: skip
COLOUR = [
    "train", "--recipe", "smoke", "--no-progress", "--set", "model.image_size=32",
    "--set", "train.duration=20st", "--set", "train.eval_every=20st",
]  # fmt: skip
FIGURES = ("curves.png", "confusion.png")
PAGES = ("inspect", "inspect-colour")  # each OUT/PAGE/index.html


def vitkit(*args: str) -> None:
    """Run ``vitkit ARGS`` with this interpreter; its output goes to this script's."""
    subprocess.run([sys.executable, "-m", "vitkit", *args], check=True)


def make(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        vitkit(*RUN, "--run-dir", str(run_dir))
        (out / "run").mkdir(parents=True, exist_ok=True)
        for name in FIGURES:
            shutil.copy(run_dir / name, out / "run" / name)
        colour_dir = Path(tmp) / "colour"
        vitkit(*COLOUR, "--run-dir", str(colour_dir))
        for page, run in zip(PAGES, (run_dir, colour_dir), strict=True):
            shutil.rmtree(out / page, ignore_errors=True)
            vitkit(
                "inspect", str(run / "best"), "--out", str(out / page),
                "--num-images", "64", "--max-maps", "8",
            )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--again", action="store_true", help="make them even if they exist")
    args = parser.parse_args(argv)
    made = [args.out / "run" / name for name in FIGURES]
    made += [args.out / page / "index.html" for page in PAGES]
    if args.again or not all(path.is_file() for path in made):
        make(args.out)
    print(f"figures in {args.out}: {', '.join(str(p.relative_to(args.out)) for p in made)}")


if __name__ == "__main__":
    main()
