"""Training-data throughput on CPU: vitkit's batches over the same JPEGs stored four ways (a
folder, tar shards, a Hugging Face dataset read with random access, the same parquet files
streamed) against timm's ``create_loader`` over the folder, in one process, alternating.

    pip install scikit-image && .venv/bin/python benchmarks/make_jpeg_folder.py /tmp/jpegs
    .venv/bin/python benchmarks/loader.py /tmp/jpegs                       # 2 workers, 5 rounds
    .venv/bin/python benchmarks/loader.py /tmp/jpegs --sources folder timm --workers 1 2 --out A.md
    .venv/bin/python benchmarks/loader.py /tmp/jpegs --rounds 1 --batches 2 --batch 8   # smoke
    .venv/bin/python benchmarks/loader.py /tmp/jpegs --per-image 300      # the work of one image

Every source does the same work per image: decode a JPEG, take an inception crop (area 0.05-1,
aspect ratio 3/4-4/3) resized to ``--image-size`` (bilinear, antialiased), flip it with p 0.5:

* ``folder``: ``ImageFolderDataset(FOLDER, "train")``;
* ``wds``: the folder packed by ``vitkit.data.sources.shards.pack_folder`` (``vitkit data pack``) into
  shards of 500 images, read as ``WebDatasetShards``;
* ``hf``: the folder's bytes as parquet files (``datasets``: an ``Image`` feature and a
  ``ClassLabel``, rows in a seeded random order, 4 files of row groups of 100 rows), opened as
  the run opens ``--data hf:PATH`` (``open_hf``; ``datasets`` converts them to memory-mapped
  Arrow once, in the scratch folder) and read with random access (``HFImages``);
* ``hf-stream``: the same parquet files with ``data.streaming=True`` (``ParquetStream``, windows
  of 1,000 rows);

each through ``batches_of(dataset, BatchOptions(train=True, inception_crop=True, flip=True,
image_size=S, num_workers=W, uint8=True))``, the training loop's options (``Batches``, or
``StreamBatches`` for the stream): uint8 images, scaled on the device. ``--float`` hands over
float32 scaled in the main process instead (``to_float``, inside the timing), as the figures in
benchmarks/RESULTS.md before issue 25 were measured.

* ``timm``: ``create_loader(ImageDataset(FOLDER/train), is_training=True, scale=(0.05, 1),
  interpolation="bilinear", hflip=0.5, color_jitter=None, mean=std=(0.5,)*3,
  use_prefetcher=False, num_workers=W)``: PIL decode, crop and resize, then ``ToTensor`` and
  ``Normalize`` in the workers (float32 always). ``color_jitter=None`` because timm jitters by
  default and vitkit does not; no prefetcher, because that moves the normalisation to a GPU.

The shards and parquet files are written to ``--scratch`` before any timing (default: a
temporary folder, removed at the end; a given one is kept, and read again by the next run). Every dataset is built (and verified, as a run verifies it)
before the first round.

Method. For each worker count the loaders are built once; each round times ``--batches``
batches of each, the order reversed every other round, after ``W`` batches of warm-up (workers
started, each with one batch done), so the timing is the steady state of an epoch, not worker
start-up (an epoch start costs every loader the same: a fresh DataLoader, timm's included). Each
round gives one images/s per loader, and one images per CPU-second: the CPU time (user and
system) the process and its workers used over the same batches, from ``/proc``. On a machine
shared with other work the images/s move with its load from round to round; the CPU time is the
work itself, which the load changes far less, so the second figure compares the sources where
the first cannot. The table shows medians over rounds, the medians of the per-round ratios to
the folder and to timm, and how many cores at that rate of work would feed one H100 training
ViT-B/16 in bf16 at 2,500-3,500 images/s (timm's and others' reported figures for an H100: the
range, not a measurement here).

``--per-image N`` times instead the work a loader worker does for one image of the folder, in
this process, on one thread, N images per contender and round, alternating: ``vitkit`` decodes
first (``dataset[i]``, ``inception_crop``, the flip), ``vitkit-crop-first`` draws the box before
decoding (``ImageFolderDataset.inception_crop``: large JPEGs decoded at a reduced size; what
``Batches``' workers do since the loader branch), ``timm`` its dataset's item (PIL decode, crop
and resize, flip, ``ToTensor``, ``Normalize``). It leaves out what the DataLoader adds:
collation, the transfer to the main process and, for vitkit, the scaling to float there.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import features

from vitkit.data import BatchOptions, ImageFolderDataset

H100_IMAGES_PER_S = (2500, 3500)  # ViT-B/16 bf16 training on one H100: what it must be fed
SOURCES = ("folder", "wds", "hf", "hf-stream", "timm")
SHARD_SIZE = 500  # images per tar shard
PARQUET_FILES, ROW_GROUP = 4, 100  # the parquet files and their row groups, in rows

Loader = Callable[[int], Iterator[tuple[torch.Tensor, torch.Tensor]]]  # round -> batches


def write_formats(folder: Path, scratch: Path) -> tuple[Path, Path]:
    """The folder's train images as tar shards (``scratch/wds``) and as parquet files
    (``scratch/parquet``), the same bytes; returns the two folders (kept from an earlier run
    when ``scratch`` holds both)."""
    import datasets

    from vitkit.data.sources.shards import pack_folder

    shards, parquet = scratch / "wds", scratch / "parquet" / "data"
    if shards.is_dir() and parquet.is_dir():
        return shards, parquet.parent
    start = time.perf_counter()
    pack_folder(folder, shards, shard_size=SHARD_SIZE, splits=["train"])
    images = ImageFolderDataset(folder, "train")
    samples = images.samples  # built once: a list of every (file, label)
    order = np.random.default_rng(0).permutation(len(samples))  # as pack_folder mixes
    parquet.mkdir(parents=True)
    feature = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=images.classes)}
    )
    for f, part in enumerate(np.array_split(order, PARQUET_FILES)):
        rows = [samples[k] for k in part.tolist()]
        table = datasets.Dataset.from_dict(
            {
                "image": [{"bytes": path.read_bytes(), "path": None} for path, _ in rows],
                "label": [label for _, label in rows],
            },
            features=feature,
        )
        name = f"train-{f:05d}-of-{PARQUET_FILES:05d}.parquet"
        table.to_parquet(parquet / name, batch_size=ROW_GROUP)  # a row group per batch
    print(f"wrote shards and parquet files in {time.perf_counter() - start:.1f} s", flush=True)
    return shards, parquet.parent


def dataset_of(source: str, folder: Path, formats: tuple[Path, Path] | None) -> Any:
    """The training images of ``source`` (not timm), built and verified as a run builds them."""
    from vitkit.config import DataConfig
    from vitkit.data.sources.hf import open_hf
    from vitkit.data.sources.shards import WebDatasetShards

    if source == "folder":
        return ImageFolderDataset(folder, "train")
    assert formats is not None
    shards, parquet = formats
    if source == "wds":
        return WebDatasetShards(shards, "train")
    cfg = DataConfig(dataset=f"hf:{parquet}", streaming=source == "hf-stream")
    return open_hf(cfg).dataset("train", mode="RGB")  # a stream: windows of 1,000 rows


def vitkit_loader(dataset: Any, *, batch: int, size: int, workers: int, uint8: bool) -> Loader:
    """Training batches of ``dataset`` as the training loop makes them."""
    from vitkit.data.run_data import batches_of

    batches = batches_of(
        dataset,
        BatchOptions(
            batch_size=batch,
            train=True,
            seed=0,
            image_size=size,
            inception_crop=True,
            flip=True,
            num_workers=workers,
            uint8=uint8,
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
    """timm's training loader over the folder (the module docstring)."""
    from timm.data import ImageDataset, create_loader

    loader = create_loader(
        ImageDataset(str(folder / "train")),
        input_size=(3, size, size),
        batch_size=batch,
        is_training=True,
        **TIMM_AUGMENT,
        num_workers=workers,
        # workers started each round, as vitkit's each epoch, so that a round's CPU time is
        # its own (persistent ones would finish their prefetched batches in the next round)
        persistent_workers=False,
        use_prefetcher=False,
        pin_memory=False,
        device=torch.device("cpu"),
    )
    return lambda _round: iter(loader)


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
    samples = dataset.samples
    for i in range(n):  # how often the crop-first path decodes smaller (the boxes timed below)
        with Image.open(samples[i][0]) as image:
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


def cpu_seconds() -> float | None:
    """CPU time (user + system) this process and its live children (the loader's workers) have
    used so far; None where ``/proc`` does not say."""
    import multiprocessing

    total = sum(os.times()[:2])
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command's name
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total


def time_round(
    loader: Loader, round_: int, *, warmup: int, batches: int
) -> tuple[float, float | None]:
    """Images per second over ``batches`` batches after ``warmup`` ones, and images per
    CPU-second of the process and its workers over the same batches (None where ``/proc`` does
    not tell)."""
    it = loader(round_)
    for _ in range(warmup):
        next(it)
    n = 0
    cpu = cpu_seconds()  # the workers are running now: warm-up started them
    start = time.perf_counter()
    for _ in range(batches):
        images, _labels = next(it)
        assert images.dtype in (torch.uint8, torch.float32) and images.ndim == 4
        n += images.shape[0]
    elapsed = time.perf_counter() - start
    used = cpu_seconds()
    del it  # ends the epoch's workers
    if used is None or cpu is None or used <= cpu:  # no /proc, or under its 10 ms resolution
        return n / elapsed, None
    return n / elapsed, n / (used - cpu)


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


def ratio(got: list[float], base: list[float] | None) -> str:
    """The median of the per-round ratios ``got / base``; a dash without ``base`` (or a round of
    it)."""
    if base is None or got is base or len(base) != len(got):
        return "—"
    return f"{statistics.median(a / b for a, b in zip(got, base, strict=True)):.3f}"


def compare(
    args: argparse.Namespace, sources: list[str], formats: tuple[Path, Path] | None
) -> list[str]:
    """The table rows of every worker count: each source's images/s and images per CPU-second,
    alternating rounds."""
    images = {s: dataset_of(s, args.folder, formats) for s in sources if s != "timm"}
    lines = []
    for workers in args.workers:
        options = dict(batch=args.batch, size=args.image_size, workers=workers)
        loaders = {
            s: timm_loader(args.folder, **options)
            if s == "timm"
            else vitkit_loader(images[s], **options, uint8=not args.float)
            for s in sources
        }
        rates: dict[str, list[float]] = {name: [] for name in loaders}
        work: dict[str, list[float]] = {name: [] for name in loaders}  # images per CPU-second
        for r in range(args.rounds):
            order = list(loaders) if r % 2 == 0 else list(reversed(loaders))
            for name in order:
                rate, per_cpu = time_round(
                    loaders[name], r, warmup=max(workers, 1), batches=args.batches
                )
                rates[name].append(rate)
                if per_cpu is not None:
                    work[name].append(per_cpu)
                print(
                    f"workers {workers} round {r} {name}: {rate:.1f} img/s, "
                    f"{per_cpu or float('nan'):.1f} img per CPU-s",
                    flush=True,
                )
        for name, got in rates.items():
            cpu, cells = work[name], ["—"] * 4
            if len(cpu) == len(got):
                cells = [
                    f"{statistics.median(cpu):.1f}",
                    ratio(cpu, work.get("folder")),
                    ratio(cpu, work.get("timm")),
                    "-".join(f"{n / statistics.median(cpu):.1f}" for n in H100_IMAGES_PER_S),
                ]
            lines.append(
                f"| {workers} | {name} | {statistics.median(got):.1f} | "
                f"{min(got):.1f}-{max(got):.1f} | {ratio(got, rates.get('folder'))} | "
                f"{ratio(got, rates.get('timm'))} | {' | '.join(cells)} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="FOLDER/train/<class>/<image> (make_jpeg_folder)")
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=16, help="timed batches per round")
    parser.add_argument(
        "--sources",
        "--contenders",  # its name before the sources were compared; 'vitkit' is 'folder'
        nargs="+",
        default=list(SOURCES),
        choices=[*SOURCES, "vitkit"],
    )
    parser.add_argument("--float", action="store_true", help="float32 batches (module docstring)")
    parser.add_argument(
        "--scratch", type=Path, help="shards and parquet here, kept for the next run"
    )
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    parser.add_argument("--per-image", type=int, metavar="N", help="time one image's work instead")
    args = parser.parse_args(argv)
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
            speedup = statistics.median(b / a for a, b in zip(got, timm, strict=True))
            lines.append(
                f"| {name} | {statistics.median(got):.3f} | {min(got):.3f}-{max(got):.3f} | "
                f"{1e3 / statistics.median(got):.0f} | {speedup:.3f} |"
            )
        publish(lines, args.out)
        return
    sources = list(dict.fromkeys("folder" if s == "vitkit" else s for s in args.sources))
    lines = [
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}  ",
        f"Machine: {machine()}  ",
        f"Versions: {versions()}  ",
        f"Batch {args.batch}, {args.image_size}x{args.image_size}, "
        f"{'float32' if args.float else 'uint8'} batches, {args.rounds} rounds of "
        f"{args.batches} batches, medians",
        "",
        "| workers | source | img/s (median) | min-max | vs folder | vs timm | img per CPU-s "
        "(median) | vs folder | vs timm | cores for 2,500-3,500 img/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    if not {"wds", "hf", "hf-stream"} & set(sources):
        publish(lines + compare(args, sources, None), args.out)
        return
    import datasets

    with tempfile.TemporaryDirectory(prefix="loader-bench-") as tmp:
        scratch = args.scratch or Path(tmp)
        # datasets' Arrow copy of the parquet files goes beside them, not to the user's cache
        datasets.config.HF_DATASETS_CACHE = scratch / "hf-cache"
        formats = write_formats(args.folder, scratch)
        publish(lines + compare(args, sources, formats), args.out)


if __name__ == "__main__":
    main()
