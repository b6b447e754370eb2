"""Training-data throughput on CPU: vitkit's ``Batches`` over ``ImageFolderDataset`` (the path the
training loop uses) against timm's ``create_loader``, in one process, alternating.

    pip install scikit-image && .venv/bin/python benchmarks/make_jpeg_folder.py /tmp/jpegs
    .venv/bin/python benchmarks/loader.py /tmp/jpegs                       # 2 workers, 5 rounds
    .venv/bin/python benchmarks/loader.py /tmp/jpegs --workers 1 2 --rounds 7 --out A.md
    .venv/bin/python benchmarks/loader.py /tmp/jpegs --rounds 1 --batches 2 --batch 8   # smoke
    .venv/bin/python benchmarks/loader.py /tmp/jpegs --per-image 300      # the work of one image

Both sides do the same work per image: decode a JPEG, take an inception crop (area 0.05-1, aspect
ratio 3/4-4/3) resized to ``--image-size`` (bilinear, antialiased), flip it with p 0.5, and hand
over float32 (B, 3, S, S) scaled with mean and std 0.5 (into [-1, 1]):

* ``vitkit``: ``Batches(ImageFolderDataset(FOLDER, "train"), BatchOptions(train=True,
  inception_crop=True, flip=True, image_size=S, num_workers=W))``. Its workers send uint8
  images; the main process scales them to float (``to_float``), so that cost is inside the
  timing.
* ``timm``: ``create_loader(ImageDataset(FOLDER/train), is_training=True, scale=(0.05, 1),
  interpolation="bilinear", hflip=0.5, color_jitter=None, mean=std=(0.5,)*3,
  use_prefetcher=False, num_workers=W)``: PIL decode, crop and resize, then ``ToTensor`` and
  ``Normalize`` in the workers. ``color_jitter=None`` because timm jitters by default and vitkit
  does not; no prefetcher, because that moves the normalisation to a GPU.

Method. For each worker count the two loaders are built once; each round times ``--batches``
batches of each, the order alternating between rounds, after ``W`` batches of warm-up (workers
started, each with one batch done), so the timing is the steady state of an epoch, not worker
start-up (an epoch start costs both sides the same: a fresh DataLoader). Each round gives one
images/s per loader; the table shows medians over rounds, the median of the per-round ratios
vitkit / timm, images/s per core (the cores this process may run on, ``os.sched_getaffinity``:
workers and the main process share them), and how many such cores would feed one H100 training
ViT-B/16 in bf16 at 2,500-3,500 images/s (timm's and others' reported figures for an H100:
the range, not a measurement here).

``--per-image N`` times instead the work a loader worker does for one image, in this process, on
one thread, N images per contender and round, alternating: ``vitkit`` decodes first
(``dataset[i]``, ``inception_crop``, the flip), ``vitkit-crop-first`` draws the box before
decoding (``ImageFolderDataset.inception_crop``: large JPEGs decoded at a reduced size; what
``Batches``' workers do since the loader branch), ``timm`` its dataset's item (PIL decode, crop and resize,
flip, ``ToTensor``, ``Normalize``). It leaves out what the DataLoader adds: collation, the
transfer to the main process and, for vitkit, the scaling to float there.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from PIL import features

from vitkit.data import Batches, BatchOptions, ImageFolderDataset

H100_IMAGES_PER_S = (2500, 3500)  # ViT-B/16 bf16 training on one H100: what it must be fed

Loader = Callable[[int], Iterator[tuple[torch.Tensor, torch.Tensor]]]  # round -> batches


def vitkit_loader(folder: Path, *, batch: int, size: int, workers: int) -> Loader:
    dataset = ImageFolderDataset(folder, "train")
    batches = Batches(
        dataset,
        BatchOptions(
            batch_size=batch,
            train=True,
            seed=0,
            image_size=size,
            inception_crop=True,
            flip=True,
            num_workers=workers,
        ),
    )
    return batches.epoch


# vitkit's training augmentation in timm's words: inception crop, flip, mean and std 0.5, no jitter
TIMM_AUGMENT: dict[str, Any] = {
    "scale": (0.05, 1.0),
    "ratio": (3 / 4, 4 / 3),
    "hflip": 0.5,
    "color_jitter": None,
    "interpolation": "bilinear",
    "mean": (0.5, 0.5, 0.5),
    "std": (0.5, 0.5, 0.5),
}


def timm_loader(folder: Path, *, batch: int, size: int, workers: int) -> Loader:
    from timm.data import ImageDataset, create_loader

    loader = create_loader(
        ImageDataset(str(folder / "train")),
        input_size=(3, size, size),
        batch_size=batch,
        is_training=True,
        **TIMM_AUGMENT,
        num_workers=workers,
        use_prefetcher=False,
        pin_memory=False,
        device=torch.device("cpu"),
    )
    return lambda _round: iter(loader)


CONTENDERS: dict[str, Callable[..., Loader]] = {"vitkit": vitkit_loader, "timm": timm_loader}


def per_image(
    folder: Path, *, size: int, count: int, rounds: int
) -> tuple[dict[str, list[float]], str]:
    """ms per image of each contender's per-image work (module docstring), ``rounds`` rounds."""
    from PIL import Image
    from timm.data import ImageDataset, create_transform

    from vitkit.data.codec import reduction
    from vitkit.data.transforms import crop_box, inception_crop, random_crop_flip

    torch.set_num_threads(1)  # as in a DataLoader worker
    dataset = ImageFolderDataset(folder, "train")
    timm_dataset = ImageDataset(
        str(folder / "train"),
        transform=create_transform(
            size,
            is_training=True,
            **TIMM_AUGMENT,
        ),
    )

    def vitkit(i: int) -> None:
        g = torch.Generator().manual_seed(i)
        image = inception_crop(dataset[i][0], size, generator=g)
        random_crop_flip(image[None], padding=0, flip=True, generator=g)

    def crop_first(i: int) -> None:
        g = torch.Generator().manual_seed(i)
        image, _ = dataset.inception_crop(i, size, generator=g)
        random_crop_flip(image[None], padding=0, flip=True, generator=g)

    n = min(count, len(dataset))
    reduced = 0
    for i in range(n):  # how often the crop-first path decodes smaller (the boxes timed below)
        with Image.open(dataset.samples[i][0]) as image:
            width, height = image.size
        box = crop_box(
            height,
            width,
            area=(0.05, 1.0),
            ratio=(3 / 4, 4 / 3),
            generator=torch.Generator().manual_seed(i),
        )
        reduced += reduction(box[2:], (size, size)) > 1
    work = {"vitkit": vitkit, "vitkit-crop-first": crop_first, "timm": timm_dataset.__getitem__}
    times: dict[str, list[float]] = {name: [] for name in work}
    for r in range(rounds):
        for name in work if r % 2 == 0 else reversed(work):
            start = time.perf_counter()
            for i in range(n):
                work[name](i)
            times[name].append((time.perf_counter() - start) / n * 1e3)
            print(f"round {r} {name}: {times[name][-1]:.3f} ms/image", flush=True)
    return times, f"crop-first decodes {reduced} of {n} images at a reduced size"


def time_round(loader: Loader, round_: int, *, warmup: int, batches: int) -> float:
    """Images per second over ``batches`` batches after ``warmup`` ones."""
    it = loader(round_)
    for _ in range(warmup):
        next(it)
    n = 0
    start = time.perf_counter()
    for _ in range(batches):
        images, _labels = next(it)
        assert images.dtype == torch.float32 and images.ndim == 4
        n += images.shape[0]
    elapsed = time.perf_counter() - start
    del it  # ends the epoch's workers (vitkit) or returns the persistent ones (timm)
    return n / elapsed


def machine() -> str:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {len(os.sched_getaffinity(0))} cores usable"


def versions() -> str:
    found = []
    for name in ("torch", "torchvision", "timm", "pillow", "numpy", "simplejpeg"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found) + f", libjpeg-turbo {features.version('libjpeg_turbo')} (Pillow's)"


def publish(lines: list[str], out: Path | None) -> None:
    """Print a result table (markdown lines) and, if ``out`` is given, write it there too."""
    table = "\n".join(lines)
    print(table)
    if out:
        out.write_text(table + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="FOLDER/train/<class>/<image> (make_jpeg_folder)")
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=16, help="timed batches per round")
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    parser.add_argument("--per-image", type=int, metavar="N", help="time one image's work instead")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    if args.per_image:
        times, note = per_image(
            args.folder, size=args.image_size, count=args.per_image, rounds=args.rounds
        )
        timm = times["timm"]
        lines = [
            f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`  ",
            f"Machine: {machine()}; one thread  ",
            f"Versions: {versions()}  ",
            f"{note}",
            "",
            "| per image | ms (median) | min-max | images/s on one core | vs timm |",
            "|---|---|---|---|---|",
        ]
        for name, got in times.items():
            ratio = statistics.median(b / a for a, b in zip(got, timm, strict=True))
            lines.append(
                f"| {name} | {statistics.median(got):.3f} | {min(got):.3f}-{max(got):.3f} | "
                f"{1e3 / statistics.median(got):.0f} | {ratio:.3f} |"
            )
        publish(lines, args.out)
        return
    lines = [
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}  ",
        f"Machine: {machine()}  ",
        f"Versions: {versions()}  ",
        f"Batch {args.batch}, {args.image_size}x{args.image_size}, {args.rounds} rounds of "
        f"{args.batches} batches, medians",
        "",
        "| workers | loader | img/s (median) | min-max | img/s per core | cores for 2,500-3,500 "
        "img/s | vs timm (median of rounds) |",
        "|---|---|---|---|---|---|---|",
    ]
    for workers in args.workers:
        loaders = {
            name: CONTENDERS[name](
                args.folder, batch=args.batch, size=args.image_size, workers=workers
            )
            for name in args.contenders
        }
        rates: dict[str, list[float]] = {name: [] for name in loaders}
        for r in range(args.rounds):
            order = list(loaders) if r % 2 == 0 else list(reversed(loaders))
            for name in order:
                rate = time_round(loaders[name], r, warmup=max(workers, 1), batches=args.batches)
                rates[name].append(rate)
                print(f"workers {workers} round {r} {name}: {rate:.1f} img/s", flush=True)
        for name, got in rates.items():
            median = statistics.median(got)
            per_core = median / cores
            need = "-".join(f"{n / per_core:.0f}" for n in H100_IMAGES_PER_S)
            ratio = "—"
            if name != "timm" and "timm" in rates:
                ratio = f"{statistics.median(a / b for a, b in zip(got, rates['timm'], strict=True)):.3f}"
            lines.append(
                f"| {workers} | {name} | {median:.1f} | {min(got):.1f}-{max(got):.1f} | "
                f"{per_core:.1f} | {need} | {ratio} |"
            )
    publish(lines, args.out)


if __name__ == "__main__":
    main()
