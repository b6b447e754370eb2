"""``data.auto_augment`` on a batch: vitkit's ``apply_each`` (each op once over the images that
drew it) against the same plans one image at a time (``apply``, what a loader worker runs), and
timm's RandAugment on PIL images (what a timm user's loader runs; for ``rand`` policies),
alternating, medians.

    .venv/bin/python benchmarks/augment_batches.py                          # 7 rounds, 1 thread
    .venv/bin/python benchmarks/augment_batches.py --shapes 8x3x32x32 --rounds 1   # seconds

The batch is random uint8 pixels (the ops' cost does not depend on them); the plans are drawn
once from ``--policy`` (``data.auto_augment``'s string) and applied by both vitkit paths, which
are checked to agree pixel for pixel. timm's transform is ``rand_augment_transform(policy,
{"translate_const": 0.45 x size, "img_mean": 128})`` on ``PIL.Image``s made before the
timing; it draws its own plans (the same distribution, magnitudes clipped at 9.9: see below). Prints ms a batch and the ratios.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch

from vitkit.config.augment import parse_auto_augment
from vitkit.data.autoaugment import apply, apply_each, plan


def shape_of(text: str) -> tuple[int, int, int, int]:
    b, c, h, w = (int(part) for part in text.split("x"))
    return b, c, h, w


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(shape: tuple[int, int, int, int], text: str, rounds: int) -> dict[str, float]:
    """Median ms a batch of ``shape`` of each contender, alternating over ``rounds``."""
    from PIL import Image
    from timm.data.auto_augment import rand_augment_transform

    B, C, H, W = shape
    policy, g = parse_auto_augment(text), torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    plans = [plan(policy, g) for _ in range(B)]
    batch = apply_each(images, plans)
    one = torch.stack([apply(x, steps) for x, steps in zip(images, plans, strict=True)])
    assert torch.equal(batch, one), "a batch at a time differs from one at a time"
    mode = "RGB" if C == 3 else "L"
    pictures = [Image.fromarray(x.permute(1, 2, 0).squeeze(-1).numpy(), mode) for x in images]
    grey = (128,) * 3 if C == 3 else 128  # PIL's fill: a colour per channel
    hparams = {"translate_const": int(0.45 * min(H, W)), "img_mean": grey}
    runs = {
        "batch": lambda: apply_each(images, plans),
        "one": lambda: [apply(x, s) for x, s in zip(images, plans, strict=True)],
    }
    if policy.policy == "rand":  # timm has no TrivialAugment; its AutoAugment is another call
        # magnitudes clipped at 9.9, not 10: at 10 timm's PosterizeIncreasing keeps 0 bits,
        # which PIL refuses (ValueError), about one image in 40 of rand-m9-mstd0.5-inc1
        timm_aa = rand_augment_transform(text, {**hparams, "magnitude_max": 9.9})
        runs["timm"] = lambda: [timm_aa(p) for p in pictures]
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(timed(run))
    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    return {"timm": math.nan, **ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="rand-m9-mstd0.5-inc1")
    parser.add_argument(
        "--shapes", nargs="+", default=["128x3x32x32", "256x1x28x28", "64x3x224x224"]
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"policy {args.policy}, {args.threads} thread(s), medians of {args.rounds} rounds")
    print("| batch | vitkit a batch at a time | vitkit one at a time | timm (PIL) | one / batch | timm / batch |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for text in args.shapes:
        ms = measure(shape_of(text), args.policy, args.rounds)
        print(
            f"| {text} | {ms['batch']:.1f} | {ms['one']:.1f} | {ms['timm']:.1f} "
            f"| {ms['one'] / ms['batch']:.2f} | {ms['timm'] / ms['batch']:.2f} |"
        )


if __name__ == "__main__":
    main()
