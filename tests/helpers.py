"""Shared test helpers: tiny configs and random weights that make logit comparisons meaningful."""

from __future__ import annotations

import resource
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from vitkit.config import ModelConfig


def tiny(**overrides: Any) -> ModelConfig:
    """A 2-layer, 64-wide ViT on 32x32 images (4x4 patches of 8 pixels), 10 classes."""
    base: dict[str, Any] = dict(
        image_size=32,
        patch_size=8,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        mlp_dim=128,
        num_classes=10,
    )
    return ModelConfig(**{**base, **overrides})


def randomize(model: nn.Module, std: float = 0.2, seed: int = 0) -> nn.Module:
    """Re-draw every parameter so logits are O(1) and the (zero-initialised) head is not zero;
    returns the model in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return model.eval()


def stopped_copy(run_dir: Path, to: Path, step: int) -> Path:
    """A copy of the run directory ``run_dir`` as if killed after checkpoint ``step`` (later
    checkpoints removed): what a resumed run starts from."""
    shutil.copytree(run_dir, to)
    for later in (to / "checkpoints").iterdir():
        if int(later.name.removeprefix("step_")) > step:
            shutil.rmtree(later)
    return to


def file_size_limit(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess``: the child's files may not grow past ``limit`` bytes
    (RLIMIT_FSIZE: a write past it fails with EFBIG, as one on a full disk with ENOSPC). Past it
    the kernel sends SIGXFSZ, which kills: ignored."""

    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_files


# What makes each EXIF orientation's stored pixels from the upright picture: the inverse of the
# turn ``ImageOps.exif_transpose`` applies.
_STORED_AS = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def exif_photo(path: Path, picture: Image.Image, orientation: int, fmt: str = "JPEG") -> Path:
    """``picture`` stored turned as a phone stores it, with the EXIF orientation tag (1-8) that
    turns it back, and another tag before it; a JPEG at quality 95 (or ``fmt``)."""
    turn = _STORED_AS.get(orientation)
    stored = picture if turn is None else picture.transpose(turn)
    exif = Image.Exif()
    exif[0x010F] = "vitkit test camera"
    exif[0x0112] = orientation
    stored.save(path, fmt, exif=exif.tobytes(), **({"quality": 95} if fmt == "JPEG" else {}))
    return path


def vtab_task_folder(root: Path, classes: int, fmt: str, seed: int, sizes: dict[str, int]) -> Path:
    """A stand-in VTAB-1k task folder: ``root/images/<list>/<i>.<ext>`` and ``root/<list>.txt``
    for the lists of ``sizes`` (train800, val200, test: their images), each class a colour plus
    noise; train800val200 lists train800's lines then val200's, as the release does."""
    rng = np.random.default_rng(seed)
    ext = {"PNG": "png", "JPEG": "jpg"}[fmt]
    lines: dict[str, list[str]] = {}
    for name, n in sizes.items():
        (root / "images" / name).mkdir(parents=True)
        lines[name] = []
        for i in range(n):
            label = i % classes
            colour = np.array([80 * label, 255 - 80 * label, 100])
            pixels = np.clip(colour + rng.integers(-20, 20, (12, 14, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / "images" / name / f"{i}.{ext}", fmt)
            lines[name].append(f"images/{name}/{i}.{ext} {label}")
    lines["train800val200"] = lines["train800"] + lines["val200"]
    for name, listed in lines.items():
        (root / f"{name}.txt").write_text("\n".join(listed) + "\n")
    return root
