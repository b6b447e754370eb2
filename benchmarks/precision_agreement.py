"""Does bf16 inference keep a checkpoint's predictions? One checkpoint evaluated on one split in
fp32 and in bf16 autocast (the arithmetic ``auto`` chooses on a CPU with native bf16), and as
``vitkit eval CKPT`` runs it without flags (``default``: the engine and precision ``auto``
decides, OpenVINO where it takes it), the same batches: each one's top-1 agreement with fp32,
its accuracy, and the time of its pass (the default's first: its conversion included).

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

from vitkit.data import BatchOptions
from vitkit.data.run_data import batches_of, evaluation_split
from vitkit.eval.metrics import evaluate
from vitkit.inference import Inference


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data", default=None, help="a data spec (default: the checkpoint's)")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    checkpoint = Inference.open(args.checkpoint, device="cpu")
    model = checkpoint.model
    split = evaluation_split(args.data, checkpoint.meta.run, model.cfg, source=args.checkpoint)
    options = BatchOptions.evaluation(model.cfg, batch_size=args.batch_size)
    batches = batches_of(split.dataset, options)
    results, seconds = {}, {}
    default = Inference.open(args.checkpoint, device="cpu")  # as vitkit eval without flags
    default.prepare(args.batch_size, images=len(split.dataset), calibration=split)
    for name, run, dtype in (
        ("fp32", model, None),
        ("bf16", model, torch.bfloat16),
        ("default", default, None),
    ):
        start = time.perf_counter()
        results[name] = evaluate(
            run, batches.epoch(0), model.cfg.num_classes, autocast=dtype, predictions=True
        )
        seconds[name] = time.perf_counter() - start
    fp32 = results["fp32"]
    print(f"{args.checkpoint} on {split.name}: {fp32['count']:,} images")
    outside = False
    for name, result in results.items():
        agree = (fp32["predictions"] == result["predictions"]).double().mean().item()
        moved = 100 * (result["accuracy"] - fp32["accuracy"])
        print(
            f"  {name}: top-1 {100 * result['accuracy']:.2f}%, {seconds[name]:.1f} s; top-1 "
            f"agreement with fp32 {100 * agree:.2f}%, accuracy moved {moved:+.2f} points"
        )
        outside |= agree < 0.995 or abs(moved) > 0.1
    if outside:
        sys.exit("precision_agreement: outside the bounds (>= 99.5% agreement, <= 0.1 point)")


if __name__ == "__main__":
    main()
