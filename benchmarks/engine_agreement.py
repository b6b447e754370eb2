"""How often the default engine's top-1 class is fp32's, on a checkpoint's own test split: the
forward passes of ``vitkit eval CKPT`` (no flags: the engine and precision ``auto`` decides)
against eager torch in fp32, image by image, with each one's time.

    .venv/bin/python benchmarks/engine_agreement.py runs/fmnist-speed/best
"""

from __future__ import annotations

import argparse
import time

import torch

from vitkit.config.inference import InferenceConfig
from vitkit.data import BatchOptions
from vitkit.data.run_data import batches_of, evaluation_split
from vitkit.eval.metrics import evaluate
from vitkit.inference import Inference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    results = {}
    for label, settings in [
        ("default", InferenceConfig()),
        ("torch fp32", InferenceConfig(engine="torch", precision="fp32")),
    ]:
        inference = Inference.open(args.checkpoint, settings, device="cpu")
        split = evaluation_split(None, inference.meta.run, inference.model.cfg, source="ckpt")
        options = BatchOptions.evaluation(inference.model.cfg, batch_size=args.batch_size)
        inference.prepare(args.batch_size, images=len(split.dataset), calibration=split)
        start = time.perf_counter()
        result = evaluate(
            inference, batches_of(split.dataset, options).epoch(0), 10, predictions=True
        )
        seconds = time.perf_counter() - start
        print(
            f"{label}: top-1 {result['accuracy']:.4f} on {result['count']:,} images, {seconds:.1f} s"
        )
        results[label] = result["predictions"]
    same = (results["default"] == results["torch fp32"]).float().mean().item()
    print(f"the same top-1 class as torch fp32 for {100 * same:.2f}% of the images")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
