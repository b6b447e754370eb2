"""End to end against timm: ``vitkit train`` and a training script assembled from timm's own
package, on the same JPEG folder, model, batch and augmentation, each a fresh process, alternating.

    .venv/bin/python benchmarks/make_jpeg_folder.py /tmp/jpegs
    .venv/bin/python benchmarks/train_e2e.py /tmp/jpegs                      # ViT-Ti/16 at 224
    .venv/bin/python benchmarks/train_e2e.py /tmp/jpegs --rounds 5 --out /tmp/e2e.md
    .venv/bin/python benchmarks/train_e2e.py /tmp/jpegs --rounds 1 --steps 2 --log-every 1 \\
        --warmup 1 --batch 4 --image-size 32                                  # smoke

Both processes do the same work, in the same order:

1. start Python, import, list the folder (vitkit: and read its verification from the cache under
   ``$VITKIT_HOME``, filled by an untimed first run), hold out 300 of the 3,000 images (every
   class's tenth part) for validation, build the model (ViT-Ti/16: ``--model`` is a vitkit preset,
   ``--timm-model`` the same architecture in timm) with the seed 0;
2. train ``--steps`` steps of ``--batch`` images in fp32 on the CPU: inception crop (area
   0.05-1, aspect ratio 3/4-4/3, bilinear) to ``--image-size``, flip with p 0.5, mean and std 0.5,
   no mixup, no RandAugment; AdamW (lr 1e-3, betas 0.9/0.999, weight decay 0.05, none on biases,
   norms, position embedding and class token), linear warmup for ``--warmup`` steps then cosine to
   0, label smoothing 0.1, gradient norm clipped to 1; ``--workers`` loader processes;
3. evaluate the 300 held-out images once, and write a checkpoint (weights and optimizer) and the
   best weights.

* ``vitkit``: ``python -m vitkit train --data FOLDER --model ViT-Ti/16 --set ...`` (the keys of
  step 2 set explicitly, evaluation and checkpoint at the last step only), in a fresh run
  directory each round.
* ``timm``: this file's ``timm`` mode: ``timm.data.ImageDataset`` + ``create_loader``
  (``is_training=True`` with the augmentation above, ``color_jitter=None``, no prefetcher: the CPU
  has nothing to prefetch to) for training, ``create_loader(is_training=False)`` for validation,
  ``timm.create_model``, ``timm.optim.create_optimizer_v2("adamw")``, ``timm.scheduler
  .CosineLRScheduler`` stepped per update, ``timm.loss.LabelSmoothingCrossEntropy``,
  ``timm.utils.dispatch_clip_grad`` and ``timm.utils.CheckpointSaver``, in the order of
  ``train_one_epoch`` and ``main`` in timm's ``train.py`` (which the package does not ship; read
  at commit 2aabaef039d918d453b58714ab84562609981112), with its per-step ``loss.item()``.

Method. One untimed run of each first (vitkit verifies the folder into the cache; both warm the
page cache), then ``--rounds`` rounds, each running both processes one after the other, the order
alternating. Each round gives, per contender: **whole process** images/s = steps x batch / the
wall time from launch to exit (start-up, the final evaluation and the checkpoint included), and
**steady state** images/s = the images of every log window but the first (``--log-every`` steps
each; the first holds the loader's start) over their seconds (vitkit: its ``metrics.jsonl``,
whose windows count training only; timm: the same windows timed the same way). The table shows
medians over rounds, the median of the per-round ratios vitkit / timm, and the seconds spent
outside the log windows (start-up, the first batch's wait, evaluation, checkpoint, exit). The process environment
is the same on both sides: ``--allocator jemalloc`` (the default) preloads jemalloc into the timm
process as the ``vitkit`` command does into itself (``vitkit.runtime.allocator``), ``glibc`` into
neither.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loader import TIMM_AUGMENT, machine, publish, versions
from vitkit.runtime import allocator

HOLDOUT_EVERY = 10  # timm validates every 10th file of each class: vitkit's holdout of 0.1
LR, WEIGHT_DECAY, LABEL_SMOOTHING, GRAD_CLIP = 1e-3, 0.05, 0.1, 1.0


def vitkit_command(args: argparse.Namespace, run_dir: Path) -> list[str]:
    steps = f"{args.steps}st"
    settings = {
        "model.image_size": args.image_size,
        "data.inception_crop": "true",
        "data.flip": "true",
        "data.rand_augment": "false",
        "data.num_workers": args.workers,
        "data.holdout": 1 / HOLDOUT_EVERY,
        "data.validation": "holdout",
        "optim.name": "adam",
        "optim.lr": LR,
        "optim.beta1": 0.9,
        "optim.beta2": 0.999,
        "optim.weight_decay": WEIGHT_DECAY,
        "optim.schedule": "cosine",
        "optim.end_lr": 0.0,
        "optim.warmup": f"{args.warmup}st",
        "optim.grad_clip": GRAD_CLIP,
        "train.label_smoothing": LABEL_SMOOTHING,
        "train.mixup": 0.0,
        "train.ema": "none",
        "train.precision": "fp32",
        "train.device": "cpu",
        "train.batch_size": args.batch,
        "train.duration": steps,
        "train.log_every": f"{args.log_every}st",
        "train.eval_every": steps,
        "train.save_every": steps,
        "train.seed": 0,
    }
    sets = [item for key, value in settings.items() for item in ("--set", f"{key}={value}")]
    return [
        sys.executable,
        *("-m", "vitkit", "train", "--data", str(args.folder), "--model", args.model),
        *sets,
        *("--run-dir", str(run_dir), "--no-progress"),
    ]


def vitkit_windows(run_dir: Path, batch: int) -> list[tuple[int, float]]:
    """(images, seconds) of each log window, from the run's metrics.jsonl."""
    windows, last = [], 0
    with open(run_dir / "metrics.jsonl") as f:
        for line in f:
            record = json.loads(line)
            if "images_per_s" in record:
                images = (record["step"] - last) * batch
                windows.append((images, images / record["images_per_s"]))
                last = record["step"]
    return windows


def timm_train(args: argparse.Namespace) -> None:
    """The timm contender: one training process (module docstring), its windows on stdout."""
    import torch
    from timm import create_model
    from timm.data import ImageDataset, create_loader
    from timm.loss import LabelSmoothingCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.scheduler import CosineLRScheduler
    from timm.utils import CheckpointSaver, dispatch_clip_grad

    torch.manual_seed(0)
    train_set = ImageDataset(str(args.folder / "train"))
    eval_set = ImageDataset(str(args.folder / "train"))
    samples = train_set.reader.samples  # [(path, class)], each class's files in order
    train_set.reader.samples = [s for i, s in enumerate(samples) if i % HOLDOUT_EVERY]
    eval_set.reader.samples = samples[::HOLDOUT_EVERY]
    classes = len({target for _, target in samples})
    model = create_model(
        args.timm_model, num_classes=classes, img_size=args.image_size, pretrained=False
    )
    size = (3, args.image_size, args.image_size)
    cpu = torch.device("cpu")
    common = {"num_workers": args.workers, "use_prefetcher": False, "device": cpu}
    train_loader = create_loader(
        train_set,
        input_size=size,
        batch_size=args.batch,
        is_training=True,
        **TIMM_AUGMENT,
        **common,
    )
    eval_loader = create_loader(
        eval_set,
        input_size=size,
        batch_size=args.batch,
        is_training=False,
        interpolation="bilinear",
        mean=TIMM_AUGMENT["mean"],
        std=TIMM_AUGMENT["std"],
        **common,
    )
    optimizer = create_optimizer_v2(
        model, "adamw", lr=LR, weight_decay=WEIGHT_DECAY, betas=(0.9, 0.999)
    )
    scheduler = CosineLRScheduler(
        optimizer, t_initial=args.steps, warmup_t=args.warmup, t_in_epochs=False, lr_min=0.0
    )
    loss_fn = LabelSmoothingCrossEntropy(smoothing=LABEL_SMOOTHING)
    out = Path(args.timm_out)
    saver = CheckpointSaver(model, optimizer, checkpoint_dir=str(out), recovery_dir=str(out))

    model.train()
    step, epoch, losses = 0, 0, 0.0
    batches = iter(train_loader)
    window_images, window_start = 0, time.perf_counter()
    while step < args.steps:
        try:
            images, targets = next(batches)
        except StopIteration:  # a new epoch: timm's loaders keep their workers
            epoch += 1
            batches = iter(train_loader)
            continue
        loss = loss_fn(model(images), targets)
        loss.backward()
        dispatch_clip_grad(model.parameters(), value=GRAD_CLIP, mode="norm")
        optimizer.step()
        losses += loss.item()  # train.py's losses_m.update(loss.item(), ...)
        optimizer.zero_grad()
        step += 1
        scheduler.step_update(num_updates=step)
        window_images += images.shape[0]
        if step % args.log_every == 0 or step == args.steps:
            now = time.perf_counter()
            print(json.dumps({"images": window_images, "seconds": now - window_start}), flush=True)
            window_images, window_start = 0, now

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, targets in eval_loader:
            correct += int((model(images).argmax(-1) == targets).sum())
            total += targets.numel()
    saver.save_checkpoint(epoch, metric=correct / total)
    print(json.dumps({"accuracy": correct / total, "evaluated": total}), flush=True)


def run_once(name: str, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """One fresh process of ``name``: its whole-process and steady-state images/s."""
    out = scratch / f"{name}-run"
    shutil.rmtree(out, ignore_errors=True)
    if name == "vitkit":
        command = vitkit_command(args, out)
    else:
        out.mkdir(parents=True)
        same = ("model", "timm_model", "image_size", "batch", "steps", "warmup", "log_every")
        options = [f"--{key.replace('_', '-')}={getattr(args, key)}" for key in (*same, "workers")]
        command = [
            sys.executable,
            __file__,
            "timm",
            str(args.folder),
            *options,
            f"--timm-out={out}",
        ]
    env = {**os.environ, "VITKIT_HOME": str(scratch / "home")}
    if args.allocator == "glibc":
        env[allocator.SWITCH_ENV] = "0"  # the vitkit command preloads jemalloc otherwise
    elif name == "timm":  # what the vitkit command does for itself
        library = allocator.find_jemalloc()
        assert library is not None  # main() checked
        env["LD_PRELOAD"] = " ".join(p for p in (library, env.get("LD_PRELOAD", "")) if p)
        env.setdefault("MALLOC_CONF", allocator.MALLOC_CONF)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(
            f"{name} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    if name == "vitkit":
        windows = vitkit_windows(out, args.batch)
    else:
        records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        windows = [(r["images"], r["seconds"]) for r in records if "images" in r]
    trained = sum(n for n, _ in windows)
    if trained != args.steps * args.batch:
        sys.exit(f"{name} trained {trained} images, expected {args.steps} x {args.batch}")
    steady = windows[1:] or windows
    return {
        "whole": trained / wall,
        "steady": sum(n for n, _ in steady) / sum(s for _, s in steady),
        "wall": wall,
        "outside": wall - sum(s for _, s in windows),  # start-up, evaluation, checkpoint, exit
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=["timm"], help=argparse.SUPPRESS)
    parser.add_argument("folder", type=Path, help="FOLDER/train/<class>/<image> (make_jpeg_folder)")
    parser.add_argument("--model", default="ViT-Ti/16", help="vitkit's preset")
    parser.add_argument("--timm-model", default="vit_tiny_patch16_224", help="the same in timm")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=4, help="warmup steps")
    parser.add_argument("--log-every", type=int, default=4)
    parser.add_argument("--workers", type=int, default=max(len(os.sched_getaffinity(0)) - 1, 1))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--allocator",
        choices=["jemalloc", "glibc"],
        default="jemalloc",
        help="both processes' malloc: jemalloc as the vitkit command preloads it, or glibc's",
    )
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    parser.add_argument("--timm-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mode == "timm":
        timm_train(args)
        return
    if args.steps < 2 * args.log_every:
        parser.error("--steps must hold at least two log windows (--log-every)")
    if args.warmup >= args.steps:
        parser.error("--warmup must be shorter than --steps")
    if args.allocator == "jemalloc" and allocator.find_jemalloc() is None:
        parser.error("jemalloc is not installed (Debian: libjemalloc2): use --allocator glibc")
    contenders = ("vitkit", "timm")
    with tempfile.TemporaryDirectory(prefix="train_e2e-") as tmp:
        scratch = Path(tmp)
        for name in contenders:  # untimed: vitkit's verification cache, both sides' page cache
            first = run_once(name, args, scratch)
            print(f"first run {name}: {first['wall']:.1f} s (untimed)", flush=True)
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
        for r in range(args.rounds):
            for name in contenders if r % 2 == 0 else reversed(contenders):
                got = run_once(name, args, scratch)
                results[name].append(got)
                print(
                    f"round {r} {name}: {got['whole']:.2f} img/s whole process "
                    f"({got['wall']:.1f} s, {got['outside']:.1f} s outside training), "
                    f"{got['steady']:.2f} img/s steady",
                    flush=True,
                )
    lines = [
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}  ",
        f"Machine: {machine()}; device cpu, fp32, allocator {args.allocator} for both  ",
        f"Versions: {versions()}  ",
        f"{args.model} (timm: {args.timm_model}) at {args.image_size}, batch {args.batch}, "
        f"{args.steps} steps, {args.workers} workers, {args.rounds} rounds, medians",
        "",
        "| contender | whole process img/s | min-max | vs timm | steady img/s | min-max | vs timm "
        "| s outside training |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        cells = []
        for key in ("whole", "steady"):
            got = [row[key] for row in rows]
            ratio = statistics.median(
                a[key] / b[key] for a, b in zip(rows, results["timm"], strict=True)
            )
            cells.append(
                f"{statistics.median(got):.2f} | {min(got):.2f}-{max(got):.2f} | {ratio:.3f}"
            )
        outside = statistics.median(row["outside"] for row in rows)
        lines.append(f"| {name} | {' | '.join(cells)} | {outside:.1f} |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
