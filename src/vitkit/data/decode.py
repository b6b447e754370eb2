"""Image files to uint8 tensors, fast: JPEGs decoded by simplejpeg straight into the array a
tensor views, and an inception crop decoded at a reduced size when the crop allows it.

``read_image(path, mode)`` gives PIL's pixels (``transforms.pil_to_tensor``) for every file,
faster for JPEGs. A baseline or progressive JPEG in YCbCr or greyscale (nearly all of them) is
decoded by simplejpeg: libjpeg-turbo, the library PIL calls, with the same settings (accurate
integer IDCT, fancy upsampling), but straight into a numpy array, without PIL's 4-byte-per-pixel
buffer and the copy out of it. Measured on the 3,000 photographs of
``benchmarks/make_jpeg_folder.py`` (300-500 px): every pixel equal to PIL's, 0.59 ms a file
against PIL's 0.95 (benchmarks/RESULTS.md). Anything else (PNG, CMYK JPEG, ...), or every file
when simplejpeg is not installed, goes through PIL. The tensor is a (C, H, W) view of
channels-last memory, the layout the crop and the resize read fastest.

``read_crop(path, mode, size, ...)`` is ``transforms.inception_crop`` of ``read_image``'s result,
with the crop box drawn before decoding, from the size in the header and the same generator
(the same draws, so the augmentation that follows draws what it would have). When the box is at
least 2, 4 or 8 times the output size on both sides, the JPEG is decoded at 1/2, 1/4 or 1/8 of
its size in the DCT domain (libjpeg-turbo's scaling: the inverse DCT of each 8x8 block's
low-frequency coefficients, a low-pass filter and decimation in one step, cheaper than a full
decode), and the box, in reduced pixels, is resized from there (by PIL, which takes a fractional
box); otherwise the result is exactly ``inception_crop(read_image(...))``'s. Both paths low-pass
the crop below the output's Nyquist frequency before sampling it, with different filters (the
DCT's, then the bilinear antialiasing kernel, against the bilinear kernel alone), so they agree
on the picture and differ at its finest detail: on photographs (benchmarks/RESULTS.md) by 0.5-1
level on average, up to 30-50 at an isolated bright point (a star, a specular highlight), where a
1-pixel shift of the same crop moves them by 3 and 100 (``tests/test_decode.py`` bounds it). Only the power-of-two
scales are used: libjpeg-turbo's others (3/8, 5/8, 3/4, 7/8) have no SIMD path and decode slower
than a full decode (measured: 0.66-0.90 ms against 0.59 for the full size, 0.48 at 1/2).
"""

from __future__ import annotations

import functools
import io
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from ..config import size_hw
from .transforms import crop_box, pil_to_tensor, resized_crop, to_channels

REDUCTIONS = (8, 4, 2)  # libjpeg-turbo's power-of-two DCT scales, 1/8, 1/4 and 1/2
_FAST_COLOURSPACES = ("YCbCr", "Gray")  # whose decoding by simplejpeg is PIL's, to the bit


@functools.cache
def _simplejpeg() -> ModuleType | None:
    """simplejpeg, when installed (a runtime dependency; without it every file goes through PIL)."""
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def _jpeg_header(data: np.ndarray) -> tuple[int, int, str] | None:
    """(height, width, colour space) of a JPEG that simplejpeg decodes as PIL does; None for any
    other file (then PIL reads it)."""
    codec = _simplejpeg()
    if codec is None or data[:2].tobytes() != b"\xff\xd8":  # a JPEG's start-of-image marker
        return None
    try:
        height, width, colourspace, _ = codec.decode_jpeg_header(data)
    except ValueError:
        return None  # PIL gives the error a bad file deserves
    if colourspace not in _FAST_COLOURSPACES:
        return None
    limit = Image.MAX_IMAGE_PIXELS
    if limit and height * width > 2 * limit:  # what PIL's open refuses
        raise Image.DecompressionBombError(
            f"Image size ({height * width} pixels) exceeds limit of {2 * limit} pixels, could be "
            "decompression bomb DOS attack."
        )
    return height, width, colourspace


def _decode_jpeg(data: np.ndarray, colourspace: str, mode: str, *, scale: int = 1) -> Tensor:
    """A JPEG (its header's ``colourspace``) as uint8 (C, H, W) in ``mode``, decoded at 1/``scale``
    of its size; a view of channels-last memory. Raises ``ValueError`` for a corrupt or truncated
    file (PIL raises ``OSError``; both are ``DECODE_ERRORS``)."""
    codec = _simplejpeg()
    assert codec is not None
    grey = colourspace == "Gray" and mode == "L"
    kwargs = {}
    if scale > 1:
        height, width, _, _ = codec.decode_jpeg_header(data)
        kwargs = {"min_height": math.ceil(height / scale), "min_width": math.ceil(width / scale)}
    pixels = codec.decode_jpeg(data, colorspace="GRAY" if grey else "RGB", **kwargs)  # (H, W, C)
    image = torch.from_numpy(pixels).permute(2, 0, 1)  # (C, H, W), a view
    if mode == "L" and not grey:  # colour to grey as PIL's convert('L') does, to the bit
        return to_channels(image, 1)  # (1, H, W)
    return image


def read_image(path: str | Path, mode: str = "RGB") -> Tensor:
    """The image file at ``path`` as uint8 (C, H, W) in ``mode`` ('RGB' or 'L'), a view of
    channels-last memory: the pixels of ``pil_to_tensor(Image.open(path), mode)``, faster for
    JPEGs (module docstring). Raises what PIL raises (``DECODE_ERRORS``) for a bad file."""
    data = np.fromfile(path, dtype=np.uint8)
    header = _jpeg_header(data)
    if header is not None:
        return _decode_jpeg(data, header[2], mode)
    with Image.open(io.BytesIO(data.tobytes())) as image:
        return pil_to_tensor(image, mode)


def reduction(box_hw: tuple[int, int], size: tuple[int, int]) -> int:
    """The largest of 8, 4, 2 by which a box of ``box_hw`` can shrink and stay at least ``size``
    (height, width) on both sides; 1 when none can."""
    (h, w), (out_h, out_w) = box_hw, size
    return next((s for s in REDUCTIONS if h // s >= out_h and w // s >= out_w), 1)


def read_crop(
    path: str | Path,
    mode: str,
    size: int | tuple[int, int],
    *,
    area: tuple[float, float] = (0.05, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    generator: torch.Generator,
) -> Tensor:
    """``inception_crop(read_image(path, mode), size, area=area, ratio=ratio,
    generator=generator)`` (antialiased), the box drawn before decoding so that a JPEG is
    decoded at 1/2, 1/4 or 1/8 of its size when the box allows it (module docstring); uint8
    (C, S_h, S_w), contiguous. Draws from ``generator`` exactly what ``inception_crop`` draws."""
    out_hw = size_hw(size)
    data = np.fromfile(path, dtype=np.uint8)
    header = _jpeg_header(data)
    if header is None:
        with Image.open(io.BytesIO(data.tobytes())) as image:
            pixels = pil_to_tensor(image, mode)  # (C, H, W)
        box = crop_box(*pixels.shape[-2:], area=area, ratio=ratio, generator=generator)
        return resized_crop(pixels, box, out_hw)
    height, width, colourspace = header
    top, left, h, w = crop_box(height, width, area=area, ratio=ratio, generator=generator)
    s = reduction((h, w), out_hw)
    pixels = _decode_jpeg(data, colourspace, mode, scale=s)  # (C, ceil(H / s), ceil(W / s))
    assert pixels.shape[-2:] == (math.ceil(height / s), math.ceil(width / s)), (pixels.shape, s)
    if s == 1:
        return resized_crop(pixels, (top, left, h, w), out_hw)
    # The box in reduced pixels is fractional: PIL resamples exactly that region (antialiased
    # bilinear, the filter torch's uint8 resize reproduces). Rounding it to whole pixels instead
    # moves its edges by up to s / 2 original pixels, which measured as 2-3x the difference to
    # the full path (tests/test_decode.py).
    small = Image.fromarray(pixels.permute(1, 2, 0).squeeze(-1).numpy())  # (H', W'[, C])
    region = (left / s, top / s, (left + w) / s, (top + h) / s)
    out = small.resize((out_hw[1], out_hw[0]), Image.Resampling.BILINEAR, box=region)
    return pil_to_tensor(out, mode).contiguous()
