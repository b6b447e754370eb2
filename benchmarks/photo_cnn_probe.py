"""How much a small convolutional network trained from scratch gets on a photo folder at 32 px:
the yardstick beside ``photo_linear_probe.py`` for the ViTs trained from scratch on the same
folder (benchmarks/RESULTS.md, issue 46 item 2).

    .venv/bin/python benchmarks/photo_cnn_probe.py /tmp/photos --epochs 40 --seed 0

The network: a 3x3 stem of 32 channels, then four residual-free stages of two 3x3 convolutions
with batch norm (32, 64, 128, 128 channels; the last three at stride 2), global average pooling,
dropout 0.3 and a linear head: 0.6M parameters, the inductive bias the paper credits CNNs with at
small data [P §4.2]. Each image is fitted to 36x36 (PIL's ``ImageOps.fit``, bicubic) and
standardised with the training split's statistics; training takes random 32x32 crops (no flips:
they change which way a photo is turned) with SGD (Nesterov, lr 0.05 one-cycle, weight decay
5e-4, label smoothing 0.1, batches of 128); evaluation the centre crop. It prints the validation
and test accuracy every 5 epochs and the test accuracy at the best validation one. Unreadable
files are left out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps
from torch import nn

from vitkit.data.sources.folder import image_files

SIDE, CROP = 36, 32


def load(split: Path, classes: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """``split``'s images (N, 3, SIDE, SIDE) in [0, 1] and their labels (N,)."""
    pixels, labels = [], []
    for label, name in enumerate(classes):
        for path in image_files(split / name):
            try:
                with Image.open(path) as image:
                    fitted = ImageOps.fit(
                        image.convert("RGB"), (SIDE, SIDE), Image.Resampling.BICUBIC
                    )
            except OSError:
                continue
            pixels.append(np.asarray(fitted))
            labels.append(label)
    x = torch.tensor(np.stack(pixels)).permute(0, 3, 1, 2).float() / 255
    return x, torch.tensor(labels)


def stage(inputs: int, outputs: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False),
        nn.BatchNorm2d(outputs),
        nn.ReLU(),
        nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False),
        nn.BatchNorm2d(outputs),
        nn.ReLU(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="with train/, val/ and test/ of class folders")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    classes = sorted(d.name for d in (args.folder / "train").iterdir() if d.is_dir())
    x, y = load(args.folder / "train", classes)
    x_val, y_val = load(args.folder / "val", classes)
    x_test, y_test = load(args.folder / "test", classes)
    mean, std = x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True)
    x, x_val, x_test = (x - mean) / std, (x_val - mean) / std, (x_test - mean) / std
    torch.manual_seed(args.seed)
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, 1, 1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        stage(32, 32, 1),
        stage(32, 64, 2),
        stage(64, 128, 2),
        stage(128, 128, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.3),
        nn.Linear(128, len(classes)),
    )
    batch, per_epoch = 128, len(x) // 128
    optimizer = torch.optim.SGD(
        net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True
    )
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, 0.05, total_steps=args.epochs * per_epoch, pct_start=0.1
    )
    margin = (SIDE - CROP) // 2

    def accuracy(images: torch.Tensor, labels: torch.Tensor) -> float:
        net.eval()
        with torch.no_grad():
            centre = images[:, :, margin : margin + CROP, margin : margin + CROP]
            return (net(centre).argmax(1) == labels).float().mean().item()

    generator = torch.Generator().manual_seed(args.seed)
    best = (-1.0, 0.0)  # validation accuracy, test accuracy then
    print("| epoch | val accuracy | test accuracy |\n|---|---|---|")
    for epoch in range(1, args.epochs + 1):
        net.train()
        order = torch.randperm(len(x), generator=generator)
        for i in range(per_epoch):
            chosen = order[i * batch : (i + 1) * batch]
            dy, dx = torch.randint(0, SIDE - CROP + 1, (2,), generator=generator).tolist()
            loss = F.cross_entropy(
                net(x[chosen][:, :, dy : dy + CROP, dx : dx + CROP]), y[chosen], label_smoothing=0.1
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        if epoch % 5 == 0 or epoch == args.epochs:
            val, test = accuracy(x_val, y_val), accuracy(x_test, y_test)
            best = max(best, (val, test))
            print(f"| {epoch} | {val:.4f} | {test:.4f} |")
    print(
        f"seed {args.seed}: test accuracy {accuracy(x_test, y_test):.4f} at the end, {best[1]:.4f} "
        f"at the best validation accuracy ({best[0]:.4f}); {time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
