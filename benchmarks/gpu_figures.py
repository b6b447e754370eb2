"""The figures of a benchmarks/gpu_checks.sh run, one line each, every line ending with the
machine they were measured on (so that a line copied into RESULTS.md keeps its provenance).

    python3 benchmarks/gpu_figures.py "NVIDIA H200, driver 580.159.04, torch 2.11.0, CUDA 13.0" \\
        /tmp/gpu-out /tmp/e2e_eager /tmp/e2e_compiled

Reads what the steps wrote under OUT (``harness.json`` from benchmarks/throughput.py,
``variants.json`` from benchmarks/compile_variants.py, ``profile.json`` from
benchmarks/step_profile.py), and each RUN_DIR's ``metrics.jsonl`` (``vitkit train``: the median
images/s of the log windows after the first, which holds start-up and compilation). What a step
did not write is left out.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def _read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def figures(out: Path, run_dirs: Sequence[Path]) -> Iterator[str]:
    """Each figure as ``name: value``."""
    harness = _read(out / "harness.json")
    for r in harness["rows"] if harness else []:
        ratio = "" if r["ratio_to_timm"] is None else f", {r['ratio_to_timm']:.3f}x its timm"
        yield (
            f"harness {r['model']} {r['task']} {r['precision']} batch {r['batch']} "
            f"{r['contender']}: {r['images_per_s']:.1f} img/s{ratio}"
        )
    variants = _read(out / "variants.json")
    for r in variants["rows"] if variants else []:
        warm = f"warm-up {r['compile_s']:.0f} s (cap {variants['compile_cap_s']} s)"
        value = (
            f"failed ({r['failed']})"
            if "failed" in r
            else f"{r['images_per_s']:.1f} img/s, {r['ratio_to_timm']:.3f}x timm-compiled"
        )
        yield f"variant {r['variant']} ({variants['what']}): {value}, {warm}"
    profile = _read(out / "profile.json")
    if profile:
        kinds = ", ".join(f"{k} {ms:.2f}" for k, ms in profile["ms_per_step"].items())
        yield f"profile {profile['what']}: {profile['step_ms']:.2f} ms/step ({kinds} ms)"
    for run in run_dirs:
        metrics = run / "metrics.jsonl"
        if not metrics.exists():
            continue
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        rates = [r["images_per_s"] for r in rows if "images_per_s" in r][1:]
        if rates:
            yield f"e2e {run.name}: {statistics.median(rates):.1f} img/s ({len(rates)} windows)"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("machine", help="GPU name, driver, torch and CUDA versions")
    parser.add_argument("out", type=Path, help="the folder the steps wrote to")
    parser.add_argument("run_dirs", type=Path, nargs="*", help="vitkit train's run directories")
    args = parser.parse_args(argv)
    for figure in figures(args.out, args.run_dirs):
        print(f"{figure} | {args.machine}")


if __name__ == "__main__":
    main()
