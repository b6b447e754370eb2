"""An image file as a model takes it at inference: read under the byte bound, decoded upright
(EXIF), preprocessed as the checkpoint records (``vitkit predict``, ``inspect --images``)."""

from __future__ import annotations

import os

import torch

from ..errors import VitkitError
from .bounds import MAX_IMAGE_BYTES, read_image_file
from .codec import DECODE_ERRORS, decode
from .transforms import Preprocess, mode_of, preprocess_for_inference


def read_image(path: str | os.PathLike, preprocess: Preprocess) -> torch.Tensor:
    """An image file -> the float tensor (1, C, H, W) the model takes, upright (EXIF); a file
    that is not a readable image, holds more than ``data.max_image_bytes`` or has more than
    ``data.max_image_pixels`` pixels (their defaults) is a ``VitkitError`` naming it."""
    try:
        # decoded now: a corrupt file is a user's error here, not a bug later
        data = read_image_file(path, MAX_IMAGE_BYTES)
        pixels = decode(data, mode_of(preprocess.in_chans))
    except DECODE_ERRORS as e:
        raise VitkitError(f"cannot read image {path}: {e}") from None
    return preprocess_for_inference(pixels, preprocess)[None]
