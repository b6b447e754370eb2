"""The Python API against the ``vitkit`` command: eager ViT forward passes in a plain Python
process (``import vitkit``, which sets glibc's malloc to keep freed memory), in one with glibc's
defaults (``VITKIT_MALLOPT=0``), and under jemalloc preloaded with the command's ``MALLOC_CONF``
(what ``vitkit predict/eval`` run on). Each contender is a fresh process; they alternate, round
after round, and the medians are printed with each one's ratio to jemalloc.

    .venv/bin/python benchmarks/allocator.py --model ViT-S/16 --batch 32 --precision bf16 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from vitkit.runtime.allocator import MALLOC_CONF, MALLOPT_ENV, SWITCH_ENV, find_jemalloc

# One contender's process: images/s of the median of ``steps`` forward passes after 2 warm-ups.
CHILD = """
import sys, time, statistics
import torch, vitkit
name, batch, precision, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.manual_seed(0)
model = vitkit.create_model(name, num_classes=1000).eval()
x = torch.randn(batch, 3, *model.cfg.image_hw)
times = []
with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
    for _ in range(steps + 2):
        start = time.perf_counter()
        model(x)
        times.append(time.perf_counter() - start)
print(batch / statistics.median(times[2:]))
"""


def contenders() -> dict[str, dict[str, str]]:
    """Each contender's environment, beside this one's (LD_PRELOAD and the switches cleared)."""
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", MALLOPT_ENV, SWITCH_ENV)}
    found = {
        "python (import vitkit)": base,
        "python, glibc defaults": {**base, MALLOPT_ENV: "0"},
    }
    library = find_jemalloc()
    if library is not None:
        found["command (jemalloc)"] = {
            **base,
            "LD_PRELOAD": library,
            "MALLOC_CONF": os.environ.get("MALLOC_CONF", MALLOC_CONF),
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ViT-S/16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--steps", type=int, default=6, help="timed forward passes a process")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    envs = contenders()
    rates: dict[str, list[float]] = {name: [] for name in envs}
    command = [sys.executable, "-c", CHILD, args.model, str(args.batch), args.precision]
    for round_ in range(args.rounds):
        for name, env in envs.items():
            out = subprocess.run(
                [*command, str(args.steps)], env=env, capture_output=True, text=True, check=True
            )
            rates[name].append(float(out.stdout))
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {r[-1]:.1f}" for n, r in rates.items()))
    reference = statistics.median(rates.get("command (jemalloc)", [float("nan")]))
    print(f"{args.model}, batch {args.batch}, {args.precision}, eager; images/s, median (min-max):")
    for name, values in rates.items():
        median = statistics.median(values)
        print(
            f"  {name:<24} {median:7.1f} ({min(values):.1f}-{max(values):.1f})  "
            f"{median / reference:.2f}x the command"
        )


if __name__ == "__main__":
    main()
