"""What a checkpoint's integrity checks cost (issue 43 item 4): writing and reading our format
(``io.checkpoint.write_ours`` / ``read_ours``) of a randomly initialised model, with the parts
they now take apart: the sha256 of ``model.safetensors`` (recorded on writing, checked on reading)
and the check that every weight is finite. Medians of ``--rounds`` calls, the file in the page
cache (as it is right after a run wrote it).

    .venv/bin/python benchmarks/checkpoint_integrity.py --model ViT-B/16 --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import vitkit
from vitkit.files import sha256_of
from vitkit.io.checkpoint import WEIGHTS_FILE, check_finite, read_ours, write_ours


def median_s(call: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ViT-B/16")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    model = vitkit.create_model(args.model)
    state = model.state_dict()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "checkpoint"
        write = median_s(lambda: write_ours(model.cfg, state, directory), args.rounds)
        read = median_s(lambda: read_ours(directory), args.rounds)
        weights = directory / WEIGHTS_FILE
        digest = median_s(lambda: sha256_of(weights), args.rounds)
        finite = median_s(lambda: check_finite(state, weights), args.rounds)
        megabytes = weights.stat().st_size / 1e6
    print(
        f"{args.model} ({megabytes:.0f} MB): write_ours {write:.3f} s, read_ours {read:.3f} s; "
        f"of each, the sha256 {digest:.3f} s ({megabytes / digest:.0f} MB/s) and, of reading, "
        f"the finite check {finite:.3f} s (medians of {args.rounds})"
    )


if __name__ == "__main__":
    main()
