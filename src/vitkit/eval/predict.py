"""Predictions for image files: each file's top classes with their probabilities, in batches
(``vitkit predict``); a file that cannot be read is said, not fatal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..data.inference import read_image
from ..errors import VitkitError


def ranked(
    model: Any,
    paths: list[Path],
    preprocess: Any,
    names: list[str],
    *,
    top: int,
    batch_size: int,
    device: torch.device,
    autocast: torch.dtype | None = None,
) -> Iterator[tuple[Path, list[tuple[str, float]] | str]]:
    """Each image's ``top`` (label, probability) pairs, best first, or why it cannot be read
    (warned too), in the order of ``paths``; ``batch_size`` images per forward pass, under
    ``autocast`` (a dtype) if given."""
    import warnings

    from ..data import UnreadableImageWarning

    for start in range(0, len(paths), batch_size):
        chunk = paths[start : start + batch_size]
        images: dict[Path, Any] = {}  # the chunk's readable images, each (1, C, H, W)
        results: dict[Path, list[tuple[str, float]] | str] = {}
        for path in chunk:
            try:
                images[path] = read_image(path, preprocess)
            except VitkitError as e:
                results[path] = str(e)
                warnings.warn(f"{e}; skipped", UnreadableImageWarning, stacklevel=1)
        if images:
            x = torch.cat(list(images.values())).to(device)  # (B, C, H, W)
            with (
                torch.inference_mode(),
                torch.autocast(device.type, dtype=autocast, enabled=autocast is not None),
            ):
                probs = model(x).float().softmax(dim=-1)  # (B, K)
            best = probs.topk(min(top, probs.shape[-1]), dim=-1)  # (B, top) values, indices
            for path, ps, ids in zip(
                images, best.values.tolist(), best.indices.tolist(), strict=True
            ):
                results[path] = [(names[i], p) for p, i in zip(ps, ids, strict=True)]
        for path in chunk:
            yield path, results[path]
