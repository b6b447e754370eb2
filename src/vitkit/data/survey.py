"""How large a split's images are, from their headers: what a run says when its model sees far
less than its images hold (a 32 px model on photographs of 2,000 px).

``shorter_sides`` reads the headers (nothing decoded) of at most ``SAMPLE`` images of a split,
chosen from the seed, and gives the median of their shorter sides once turned upright (EXIF
orientation: a portrait photograph stored landscape has its width as its shorter side). The
answer is cached beside the split's verification (``vitkit.data.verify``: the same folder, keyed
by the same state of the source, the images chosen and the seed), so a run that starts again
reads no image for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..files import atomic_write
from .codec import DECODE_ERRORS, upright_size
from .decoded import DecodedImages
from .verify import cache_path

log = logging.getLogger(__name__)

SAMPLE = 1000  # images whose headers are read
_FORMAT = 1  # of the cache entries


@dataclass(frozen=True)
class Sides:
    """The median shorter side (upright, in pixels) of ``images`` readable headers out of
    ``sampled`` images chosen."""

    median: int
    images: int
    sampled: int

    def hint(self, model_hw: tuple[int, int]) -> str | None:
        """One line when the model's resolution (``model_hw``, its shorter side) is under a
        quarter of the median shorter side, else None."""
        side = min(model_hw)
        if 4 * side >= self.median:
            return None
        return (
            f"hint: the model sees {model_hw[0]}x{model_hw[1]} px, under a quarter of the images' "
            f"median shorter side ({self.median:,} px): most of what they hold is resized away "
            "(model.image_size sets the resolution; the paper fine-tunes at 384)"
        )


def shorter_sides(images: DecodedImages, *, seed: int, sample: int = SAMPLE) -> Sides | None:
    """The median shorter side of ``sample`` images of ``images`` chosen from ``seed`` (all of
    them when fewer), read from their headers and cached; None when no header can be read."""
    chosen = images.rows[np.sort(_choose(len(images), sample, seed))]  # records, in order
    key = {
        "format": _FORMAT,
        "records": hashlib.sha256(chosen.astype("<i8").tobytes()).hexdigest(),
    }
    state = images.state
    entry = None if state is None else cache_path(state, "sides")
    if entry is not None and state is not None:
        key |= {"source": state.identity, "digest": state.digest}
        found = _read(entry, key)
        if found is not None:
            return found
    sides = []
    for data in images.source.read_all(chosen.tolist()):
        try:
            if isinstance(data, OSError):
                raise data
            sides.append(min(upright_size(data)))
        except DECODE_ERRORS:
            continue  # verification names unreadable images; here they are not counted
    if not sides:
        return None
    found = Sides(int(np.median(sides)), len(sides), len(chosen))
    if entry is not None:
        text = json.dumps({**key, **dataclasses.asdict(found)})
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(entry, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        except OSError as e:
            log.warning("cannot cache the image sizes in %s (%s)", entry, e)
    return found


def _choose(n: int, sample: int, seed: int) -> np.ndarray:
    """``min(n, sample)`` distinct indices below ``n``, drawn from ``seed``."""
    if n <= sample:
        return np.arange(n)
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=g)[:sample].numpy()


def _read(entry: Path, key: dict[str, object]) -> Sides | None:
    """What ``entry`` holds for ``key``; None when it is absent, of another key or malformed."""
    try:
        with open(entry, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or any(found.get(k) != v for k, v in key.items()):
        return None
    values = [found.get(k) for k in ("median", "images", "sampled")]
    if not all(type(v) is int and v > 0 for v in values):
        return None
    return Sides(*values)  # type: ignore[arg-type]
