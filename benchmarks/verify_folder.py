"""How long ``ImageFolderDataset`` takes to verify a folder: serial, split across processes, read
from the cache, and at the cheaper levels.

    .venv/bin/python benchmarks/verify_folder.py /tmp/jpegs            # a make_jpeg_folder tree
    .venv/bin/python benchmarks/verify_folder.py /tmp/jpegs --workers 2 --rounds 5 --mode none

Each row constructs ``ImageFolderDataset(FOLDER, "train", mode=MODE, verify=...)`` and reports the
median wall time over ``--rounds`` (the rows alternate, so drift hits all), and files per second.
The cache rows use a fresh ``$VITKIT_HOME`` (a temporary folder): "cache: write" is a pass plus
the write, "cache: hit" a construction that finds it (listing, one ``stat`` per file, the JSON).
``--mode none`` is ``mode=None`` (the channels decided while verifying: one decode for a colour
folder); the default gives ``mode='RGB'``. The page cache is warm after the first round: these are
times of a folder on a local disk that has been read once, not of a cold network file system.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vitkit.data import ImageFolderDataset
from vitkit.runtime.cores import usable_cores


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="FOLDER/train/<class>/<image>")
    parser.add_argument("--workers", type=int, default=usable_cores())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mode", choices=["RGB", "L", "none"], default="RGB")
    args = parser.parse_args(argv)
    mode = None if args.mode == "none" else args.mode
    os.environ["VITKIT_HOME"] = tempfile.mkdtemp(prefix="vitkit-home-")

    def build(**kwargs: object) -> Callable[[], ImageFolderDataset]:
        return lambda: ImageFolderDataset(args.folder, "train", mode=mode, **kwargs)  # type: ignore[arg-type]

    def write() -> ImageFolderDataset:
        for entry in Path(os.environ["VITKIT_HOME"], "verified").glob("*.json"):
            entry.unlink()
        return ImageFolderDataset(args.folder, "train", mode=mode, verify_workers=args.workers)

    rows: dict[str, Callable[[], ImageFolderDataset]] = {
        "full, serial": build(verify_cache=False, verify_workers=0),
        f"full, {args.workers} processes": build(verify_cache=False, verify_workers=args.workers),
        "header, serial": build(verify="header", verify_cache=False, verify_workers=0),
        f"cache: write ({args.workers} processes)": write,
        "cache: hit": build(),
    }
    if mode is not None:
        rows["none (listing only)"] = build(verify="none")
    times: dict[str, list[float]] = {name: [] for name in rows}
    n = 0
    for r in range(args.rounds):
        for name in rows if r % 2 == 0 else reversed(rows):
            start = time.perf_counter()
            n = len(rows[name]())
            times[name].append(time.perf_counter() - start)
    print(f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`  ")
    print(f"{n} files, mode={mode!r}, {len(os.sched_getaffinity(0))} cores usable\n")
    print("| construction | seconds (median) | min-max | files/s |")
    print("|---|---|---|---|")
    for name, got in times.items():
        median = statistics.median(got)
        print(f"| {name} | {median:.3f} | {min(got):.3f}-{max(got):.3f} | {n / median:,.0f} |")


if __name__ == "__main__":
    main()
