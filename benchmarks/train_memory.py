"""Memory of one fp32 training step (forward, cross-entropy, backward, AdamW step) above the
resting weights and Adam state, at two batch sizes, with and without activation checkpointing per
block: the measured inputs of docs/guides/scale-out.md's memory-per-device table.

    .venv/bin/python benchmarks/train_memory.py                      # ViT-B/16 at 224, batches 4, 8
    .venv/bin/python benchmarks/train_memory.py --models ViT-S/16 --batch 2 4

The difference between the two batches, divided by their difference, is the memory one more
image costs (activations kept for the backward pass); the measurement is ``peak_memory`` of
``benchmarks/throughput.py`` (CPU: peak RSS above the resting level; CUDA: peak allocated). The
last column is the price: seconds per step at the larger batch (median of ``--repeats``).
"""

from __future__ import annotations

import argparse
import statistics
from functools import partial

import torch
import torch.nn.functional as F

import vitkit
from throughput import peak_memory, timed
from vitkit.train.distributed import checkpoint_blocks


def train_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> None:
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["ViT-B/16"])
    parser.add_argument("--batch", nargs=2, type=int, default=[4, 8], metavar=("B1", "B2"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps (median)")
    args = parser.parse_args()
    device = torch.device(args.device)
    print("| model | checkpointing | " + " | ".join(f"batch {b} MiB" for b in args.batch), end="")
    print(f" | MiB per image | s/step (batch {args.batch[1]}) |\n|---|---|---|---|---|---|")
    for name in args.models:
        for checkpointing in (False, True):
            torch.manual_seed(0)
            model = vitkit.create_model(name).to(device)
            if checkpointing:
                checkpoint_blocks(model.blocks)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            (h, w), classes = model.cfg.image_hw, model.cfg.num_classes
            mib, seconds = [], 0.0
            for b in args.batch:
                x = torch.randn(b, model.cfg.in_chans, h, w, device=device)
                y = torch.randint(0, classes, (b,), device=device)
                step = partial(train_step, model, optimizer, x, y)
                step()  # warm-up: Adam's state is resting from here on
                peak = peak_memory(step, device)
                mib.append(float("nan") if peak is None else peak / 2**20)
                seconds = statistics.median(timed(step, 1, device) for _ in range(args.repeats))
            per_image = (mib[1] - mib[0]) / (args.batch[1] - args.batch[0])
            cells = " | ".join(f"{m:.0f}" for m in mib)
            print(
                f"| {name} | {'yes' if checkpointing else 'no'} | {cells} | {per_image:.0f} "
                f"| {seconds:.2f} |"
            )


if __name__ == "__main__":
    main()
