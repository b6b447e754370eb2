"""Does bf16 inference keep a checkpoint's predictions? One checkpoint evaluated on one split in
fp32 and in bf16 autocast (the arithmetic ``auto`` chooses on a CPU with native bf16), the same
batches: top-1 agreement, each precision's accuracy, and the time of each pass.

    .venv/bin/python benchmarks/precision_agreement.py runs/fmnist-speed/best
    .venv/bin/python benchmarks/precision_agreement.py runs/x/best --data photos/ --batch-size 64

The main job's check (benchmarks/RESULTS.md, "bf16 on a CPU"): on Fashion-MNIST's 10,000 test
images, bf16 and fp32 agree on top-1 for >= 99.5% of them and accuracy moves by <= 0.1 point.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from vitkit.cli.common import open_checkpoint
from vitkit.data import BatchOptions
from vitkit.data.run_data import batches_of, evaluation_split
from vitkit.eval.metrics import evaluate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data", default=None, help="a data spec (default: the checkpoint's)")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    checkpoint = open_checkpoint(args.checkpoint)
    model = checkpoint.model
    split = evaluation_split(args.data, checkpoint.meta.run, model.cfg, source=args.checkpoint)
    options = BatchOptions.evaluation(model.cfg, batch_size=args.batch_size)
    batches = batches_of(split.dataset, options)
    results, seconds = {}, {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        start = time.perf_counter()
        results[name] = evaluate(
            model, batches.epoch(0), model.cfg.num_classes, autocast=dtype, predictions=True
        )
        seconds[name] = time.perf_counter() - start
    fp32, bf16 = results["fp32"], results["bf16"]
    agree = (fp32["predictions"] == bf16["predictions"]).double().mean().item()
    moved = 100 * (bf16["accuracy"] - fp32["accuracy"])
    print(f"{args.checkpoint} on {split.name}: {fp32['count']:,} images")
    for name, result in results.items():
        print(f"  {name}: top-1 {100 * result['accuracy']:.2f}%, {seconds[name]:.1f} s")
    print(f"  top-1 agreement {100 * agree:.2f}%; accuracy moved {moved:+.2f} points")
    if agree < 0.995 or abs(moved) > 0.1:
        sys.exit("precision_agreement: outside the bounds (>= 99.5% agreement, <= 0.1 point)")


if __name__ == "__main__":
    main()
