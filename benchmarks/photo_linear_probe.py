"""How much a linear classifier gets from a photo folder's coarse layout: each image resized to
S x S colour pixels (PIL, bilinear), standardised with the training split's statistics, a
softmax regression fitted by L-BFGS with an L2 penalty, its test accuracy for each penalty.

    .venv/bin/python benchmarks/photo_linear_probe.py /tmp/photos --sizes 8 16

Each penalty's validation and test accuracy is printed, and last the test accuracy of the
penalty (and size) the validation split chooses, as a model selected on val200 is: a yardstick
for the ViTs trained from scratch on the same folder (benchmarks/RESULTS.md, issue 46 item 2).
The best test figure of the table is an upper bound. Unreadable files are left out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vitkit.data.sources.folder import image_files


def load(split: Path, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The images of ``split``'s class folders (in name order) as (N, 3 * size * size) pixels
    in [0, 1], and their labels (N,)."""
    classes = sorted(d.name for d in split.iterdir() if d.is_dir())
    pixels, labels = [], []
    for label, name in enumerate(classes):
        for path in image_files(split / name):
            try:
                with Image.open(path) as image:
                    small = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
            except OSError:
                continue
            pixels.append(np.asarray(small, np.float32).ravel() / 255)
            labels.append(label)
    return torch.tensor(np.stack(pixels)), torch.tensor(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="with train/, val/ and test/ of class folders")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--penalties", type=float, nargs="+", default=[1e-3, 1e-2, 1e-1, 1.0])
    args = parser.parse_args()
    torch.manual_seed(0)
    print("| pixels | L2 | train accuracy | val accuracy | test accuracy |\n|---|---|---|---|---|")
    chosen = (-1.0, "", 0.0)  # validation accuracy, the row, its test accuracy
    for size in args.sizes:
        x, y = load(args.folder / "train", size)
        x_val, y_val = load(args.folder / "val", size)
        x_test, y_test = load(args.folder / "test", size)
        mean, std = x.mean(0), x.std(0) + 1e-6
        x, x_val, x_test = (x - mean) / std, (x_val - mean) / std, (x_test - mean) / std
        for penalty in args.penalties:
            linear = torch.nn.Linear(x.shape[1], int(y.max()) + 1)
            optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=300)

            def closure(
                linear=linear, optimizer=optimizer, penalty=penalty, x=x, y=y
            ) -> torch.Tensor:
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(linear(x), y)
                loss = loss + penalty * linear.weight.square().sum()
                loss.backward()
                return loss

            optimizer.step(closure)
            with torch.no_grad():
                train = (linear(x).argmax(1) == y).float().mean().item()
                val = (linear(x_val).argmax(1) == y_val).float().mean().item()
                test = (linear(x_test).argmax(1) == y_test).float().mean().item()
            print(f"| {size}x{size} | {penalty:g} | {train:.3f} | {val:.3f} | {test:.3f} |")
            chosen = max(chosen, (val, f"{size}x{size}, L2 {penalty:g}", test))
    print(f"chosen on val: {chosen[1]} (val {chosen[0]:.3f}): test accuracy {chosen[2]:.3f}")


if __name__ == "__main__":
    main()
