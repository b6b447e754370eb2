"""The one image decoder: encoded bytes (a file's, a tar member's, a table cell's) to uint8
pixels, upright, fast.

``FORMATS`` is what PIL may open, whatever a file is named or sniffed as: JPEG (an MPO's first
picture), PNG, WebP, BMP, GIF (its first frame) and TIFF; anything else is unreadable, in decoding
and verification alike (``open_image``). So is an image of more than ``max_pixels`` pixels
(``data.max_image_pixels``), refused from its header's size before anything is decoded, in every
decoding and in verification (``check_pixels``). Every image is turned upright by its EXIF orientation
as ``PIL.ImageOps.exif_transpose`` turns it (as pipelines and browsers show it), so a model sees
one picture in training, evaluation, prediction and an exported pipeline.

``decode(data, mode)``: PIL's pixels of the upright image, a (C, H, W) view of channels-last
memory (what the crop and the resize read fastest). A YCbCr or greyscale JPEG is decoded by
simplejpeg (libjpeg-turbo with PIL's settings, straight into numpy: every pixel equal to PIL's);
anything else, or everything without simplejpeg, by PIL. ``decode_crop`` is
``transforms.inception_crop`` of ``decode``'s result with the box drawn first (from the header's
size, by the same generator); a JPEG whose box is 2, 4 or 8 times the output on both sides is
decoded at that fraction in the DCT domain: close to the full path's pixels, not equal.
"""

from __future__ import annotations

import functools
import io
import math
import os
import struct
import warnings
import zlib
from types import ModuleType
from typing import Literal

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from ..config import DataConfig, size_hw
from ..config.keys import default_of
from .transforms import (
    INCEPTION_AREA,
    INCEPTION_RATIO,
    crop_box,
    pil_to_array,
    pil_to_tensor,
    resize,
    resized_crop,
    to_channels,
)

# What PIL may open (its format names): a list, as PIL would otherwise open whatever it can (EPS
# through Ghostscript where it is installed, ICO, PSD, ...).
FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF")  # JPEG opens MPO files too

# What decoding raises for bytes that are not a readable image: PIL's errors, simplejpeg's
# ValueError, and PIL's refusal of an image too large to be honest.
DECODE_ERRORS = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    struct.error,
    zlib.error,
    Image.DecompressionBombError,
)

# data.max_image_pixels's default: the bound of a caller without a run's config (predict, inspect)
MAX_IMAGE_PIXELS: int = default_of(DataConfig, "max_image_pixels")

# libjpeg-turbo's power-of-two DCT scales, 1/8, 1/4 and 1/2; its others (3/8 to 7/8) have no SIMD
# path and decode slower than a full decode (benchmarks/RESULTS.md)
REDUCTIONS = (8, 4, 2)
_FAST_COLOURSPACES = ("YCbCr", "Gray")  # whose decoding by simplejpeg is PIL's, to the bit
_ORIENTATION = 0x0112  # the EXIF tag


@functools.cache
def _simplejpeg() -> ModuleType | None:
    """simplejpeg, when installed (a runtime dependency; without it every file goes through PIL)."""
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def check_pixels(width: int, height: int, max_pixels: int) -> None:
    """Refuse an image of ``width`` x ``height`` (its header's) of more than ``max_pixels``
    pixels, before anything is decoded: PIL's ``DecompressionBombError``, one of
    ``DECODE_ERRORS``, so the image is unreadable wherever it is read."""
    if width * height > max_pixels:
        raise Image.DecompressionBombError(
            f"{width:,} x {height:,} pixels, more than data.max_image_pixels={max_pixels:,} allows"
        )


def open_image(source: bytes | str | os.PathLike, max_pixels: int | None = None) -> Image.Image:
    """PIL's lazy image of encoded ``source`` (bytes, or a file's path), opened only as one of
    ``FORMATS`` (PIL's ``UnidentifiedImageError``, an ``OSError``, for anything else) and, with
    ``max_pixels``, of at most that many pixels (``check_pixels``). Opening reads the header
    alone."""
    if isinstance(source, bytes | bytearray | memoryview):
        fp: io.BytesIO | str | os.PathLike = io.BytesIO(source)
        what = "image (an empty file)" if len(source) == 0 else "image"
    else:
        fp, what = source, f"image file {os.fsdecode(source)}"
    try:
        with warnings.catch_warnings():
            if max_pixels is not None:  # the bound decides, not PIL's warning below its refusal
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(fp, formats=FORMATS)
    except UnidentifiedImageError:  # PIL names a BytesIO object: say what was expected instead
        raise UnidentifiedImageError(
            f"cannot identify {what} as one of {', '.join(FORMATS)}"
        ) from None
    if max_pixels is not None:
        try:
            check_pixels(*image.size, max_pixels)
        except Image.DecompressionBombError:
            image.close()
            raise
    return image


# ------------------------------------------------------------------------------ orientation


def _tiff_orientation(tiff: bytes) -> int | None:
    """The orientation in the first directory of a TIFF structure (an EXIF segment's body): 1
    when the tag is absent; None when the structure is anything but plain (PIL reads it then)."""
    orders: dict[bytes, Literal["little", "big"]] = {b"II": "little", b"MM": "big"}
    order = orders.get(tiff[:2])
    if order is None or len(tiff) < 8 or int.from_bytes(tiff[2:4], order) != 42:
        return None
    first = int.from_bytes(tiff[4:8], order)
    if first < 8 or first + 2 > len(tiff):
        return None
    for k in range(int.from_bytes(tiff[first : first + 2], order)):
        entry = first + 2 + 12 * k  # tag (2), type (2), count (4), value (4)
        if entry + 12 > len(tiff):
            return None
        if int.from_bytes(tiff[entry : entry + 2], order) == _ORIENTATION:
            kind = int.from_bytes(tiff[entry + 2 : entry + 4], order)
            count = int.from_bytes(tiff[entry + 4 : entry + 8], order)
            # a SHORT, once: anything else is PIL's to read
            return (
                int.from_bytes(tiff[entry + 8 : entry + 10], order)
                if (kind, count) == (3, 1)
                else None
            )
    return 1


def jpeg_orientation(data: bytes) -> int | None:
    """The EXIF orientation of a JPEG from its first ``Exif`` APP1 segment, as PIL reads it: 1
    when there is none before the image data; None where the markers or the segment are anything
    but plain (PIL reads the file then)."""
    # Our own parser: PIL's getexif costs far more, a few percent of a decode
    # (benchmarks/RESULTS.md); anything unusual goes to PIL, so the two always agree (tested).
    at = 2  # after the start-of-image marker
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xDA, 0xD9):  # start of scan, end of image: no EXIF segment came before
            return 1
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if length < 2:
            return None
        if marker == 0xE1 and data[at + 4 : at + 10] == b"Exif\0\0":
            return _tiff_orientation(data[at + 10 : at + 2 + length])
        at += 2 + length
    return None


def _pil_orientation(image: Image.Image) -> int:
    """The orientation tag of an opened image, as ``ImageOps.exif_transpose`` reads it; 1 when
    it is absent or its EXIF cannot be read (a broken tag does not make the picture unreadable)."""
    try:
        with warnings.catch_warnings():  # "Corrupt EXIF data": said once per image per epoch
            warnings.simplefilter("ignore")
            value = image.getexif().get(_ORIENTATION, 1)
    except DECODE_ERRORS:
        return 1
    return value if isinstance(value, int) else 1


def upright(image: Tensor, orientation: int) -> Tensor:
    """(..., H, W) pixels stored with EXIF ``orientation`` turned upright, as
    ``ImageOps.exif_transpose`` turns them (2: mirrored; 3: upside down; 4: flipped; 5-8: the
    same with rows and columns swapped); any other value leaves them as they are. Flips copy;
    transposes are views."""
    h, w = image.ndim - 2, image.ndim - 1
    if orientation == 2:
        return image.flip(w)
    if orientation == 3:
        return image.flip(h, w)
    if orientation == 4:
        return image.flip(h)
    if orientation == 5:
        return image.transpose(h, w)
    if orientation == 6:  # a quarter turn clockwise
        return image.transpose(h, w).flip(w)
    if orientation == 7:
        return image.transpose(h, w).flip(h, w)
    if orientation == 8:  # a quarter turn anticlockwise
        return image.transpose(h, w).flip(h)
    return image


def _turned(orientation: int) -> bool:
    """Whether ``orientation`` swaps rows and columns."""
    return orientation in (5, 6, 7, 8)


def _reversed_axes(orientation: int) -> tuple[bool, bool]:
    """Whether the upright image's rows (top to bottom) and columns (left to right) run against
    the stored image's (``upright``'s flips)."""
    return {
        2: (False, True),
        3: (True, True),
        4: (True, False),
        6: (False, True),
        7: (True, True),
        8: (True, False),
    }.get(orientation, (False, False))


# ------------------------------------------------------------------------------ decoding


def _jpeg_header(data: bytes, max_pixels: int) -> tuple[int, int, str] | None:
    """(height, width, colour space) as stored, of a JPEG that simplejpeg decodes as PIL does and
    of at most ``max_pixels`` pixels (``check_pixels``); None for any other file (then PIL reads
    it)."""
    codec = _simplejpeg()
    if codec is None or data[:2] != b"\xff\xd8":  # a JPEG's start-of-image marker
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
    check_pixels(width, height, max_pixels)
    return height, width, colourspace


def _orientation_of_jpeg(data: bytes) -> int:
    found = jpeg_orientation(data)
    if found is None:
        with warnings.catch_warnings():  # PIL's "Corrupt EXIF data", on opening
            warnings.simplefilter("ignore")
            image = open_image(data)
        with image:
            found = _pil_orientation(image)
    return found


def _decode_jpeg(data: bytes, colourspace: str, mode: str, *, scale: int = 1) -> Tensor:
    """A JPEG (its header's ``colourspace``) as stored, uint8 (C, H, W) in ``mode``, decoded at
    1/``scale`` of its size; a view of channels-last memory. Raises ``ValueError`` for a corrupt
    or truncated file (PIL raises ``OSError``; both are ``DECODE_ERRORS``)."""
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


def rgb_array(data: bytes, *, max_pixels: int = MAX_IMAGE_PIXELS) -> np.ndarray:
    """Encoded image ``data`` as uint8 (H, W, 3), as stored (not turned upright: for what a turn
    does not change, such as whether an image is grey): the pixels ``decode`` turns, from the
    same decoder, so a file one refuses the other refuses too (a truncated JPEG whose header
    claims 12000 x 12000: simplejpeg refuses it, PIL decodes 432 MB with a warning). numpy and
    PIL only, no torch: verification's forked workers call it."""
    header = _jpeg_header(data, max_pixels)
    codec = _simplejpeg()
    if header is not None and codec is not None:
        return codec.decode_jpeg(data, colorspace="RGB")  # (H, W, 3)
    with open_image(data, max_pixels) as image:
        return pil_to_array(image, "RGB")


def _decode_pil(data: bytes, mode: str, max_pixels: int) -> Tensor:
    """Any image of ``FORMATS`` through PIL, upright, uint8 (C, H, W) in ``mode``."""
    with open_image(data, max_pixels) as image:
        return upright(pil_to_tensor(image, mode), _pil_orientation(image))


def decode(data: bytes, mode: str = "RGB", *, max_pixels: int = MAX_IMAGE_PIXELS) -> Tensor:
    """Encoded image ``data`` as uint8 (C, H, W) in ``mode`` ('RGB' or 'L'), upright: the pixels
    of ``pil_to_tensor(ImageOps.exif_transpose(Image.open(...)), mode)``, faster for JPEGs
    (module docstring); a view of channels-last memory where no turn swapped its axes. Raises
    ``DECODE_ERRORS`` for bytes that are not a readable image of ``FORMATS`` of at most
    ``max_pixels`` pixels."""
    header = _jpeg_header(data, max_pixels)
    if header is None:
        return _decode_pil(data, mode, max_pixels)
    return upright(_decode_jpeg(data, header[2], mode), _orientation_of_jpeg(data))


def upright_size(data: bytes, *, max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[int, int]:
    """(height, width) of encoded image ``data`` once turned upright, from its header alone
    (nothing decoded); raises ``DECODE_ERRORS`` for bytes that are not an image of ``FORMATS`` of
    at most ``max_pixels`` pixels."""
    header = _jpeg_header(data, max_pixels)
    if header is not None:
        height, width, orientation = header[0], header[1], _orientation_of_jpeg(data)
    else:
        with open_image(data, max_pixels) as image:
            (width, height), orientation = image.size, _pil_orientation(image)
    return (width, height) if _turned(orientation) else (height, width)


def reduction(box_hw: tuple[int, int], size: tuple[int, int]) -> int:
    """The largest of 8, 4, 2 by which a box of ``box_hw`` can shrink and stay at least ``size``
    (height, width) on both sides; 1 when none can."""
    (h, w), (out_h, out_w) = box_hw, size
    return next((s for s in REDUCTIONS if h // s >= out_h and w // s >= out_w), 1)


def decode_resized(
    data: bytes, mode: str, size: tuple[int, int], *, max_pixels: int = MAX_IMAGE_PIXELS
) -> Tensor:
    """``resize(decode(data, mode), size)`` (antialiased, the aspect ratio not kept), a JPEG
    decoded at 1/2, 1/4 or 1/8 of its size when the whole image stays at least ``size`` (H, W)
    that way (``reduction``); uint8 (C, S_h, S_w), contiguous. The two paths differ as
    ``decode_crop``'s do, at the finest detail. Refuses an image of more than ``max_pixels``
    pixels as ``decode`` does."""
    header = _jpeg_header(data, max_pixels)
    if header is None:
        return resize(_decode_pil(data, mode, max_pixels), size)
    height, width, colourspace = header
    orientation = _orientation_of_jpeg(data)
    upright_hw = (width, height) if _turned(orientation) else (height, width)
    s = reduction(upright_hw, size)
    # (C, ceil(H / s), ceil(W / s)): the last row and column of blocks may be partial, under a
    # reduced pixel of the whole image's extent, which the resize spreads over its output
    pixels = upright(_decode_jpeg(data, colourspace, mode, scale=s), orientation)
    return resize(pixels, size)


def decode_crop(
    data: bytes,
    mode: str,
    size: int | tuple[int, int],
    *,
    area: tuple[float, float] = INCEPTION_AREA,
    ratio: tuple[float, float] = INCEPTION_RATIO,
    generator: torch.Generator,
    max_pixels: int = MAX_IMAGE_PIXELS,
) -> Tensor:
    """``inception_crop(decode(data, mode), size, area=area, ratio=ratio, generator=generator)``
    (antialiased), the box drawn on the upright image before decoding so that a JPEG is decoded
    at 1/2, 1/4 or 1/8 of its size when the box allows it (module docstring); uint8
    (C, S_h, S_w), contiguous. Draws from ``generator`` exactly what ``inception_crop`` draws.
    Refuses an image of more than ``max_pixels`` pixels as ``decode`` does."""
    out_hw = size_hw(size)
    header = _jpeg_header(data, max_pixels)
    if header is None:
        pixels = _decode_pil(data, mode, max_pixels)  # (C, H, W), upright
        box = crop_box(*pixels.shape[-2:], area=area, ratio=ratio, generator=generator)
        return resized_crop(pixels, box, out_hw)
    height, width, colourspace = header
    orientation = _orientation_of_jpeg(data)
    if _turned(orientation):
        height, width = width, height  # the upright image's
    top, left, h, w = crop_box(height, width, area=area, ratio=ratio, generator=generator)
    s = reduction((h, w), out_hw)
    stored = _decode_jpeg(data, colourspace, mode, scale=s)  # (C, ceil(H_s / s), ceil(W_s / s))
    pixels = upright(stored, orientation)  # (C, ceil(H / s), ceil(W / s))
    assert pixels.shape[-2:] == (math.ceil(height / s), math.ceil(width / s)), (pixels.shape, s)
    if s == 1:
        return resized_crop(pixels, (top, left, h, w), out_hw)
    # Both paths low-pass the crop below the output's Nyquist frequency, with different filters
    # (the DCT's, then the bilinear antialiasing kernel, against the bilinear kernel alone): they
    # agree on the picture and differ at its finest detail (tests/test_codec.py bounds it).
    # The box in reduced pixels is fractional: PIL resamples exactly that region (antialiased
    # bilinear, the filter torch's uint8 resize reproduces). Rounding it to whole pixels instead
    # moves its edges by up to s / 2 original pixels, which measured as 2-3x the difference to
    # the full path (tests/test_codec.py). A reversed axis of ceil(L / s) reduced pixels starts
    # ceil(L / s) - L / s of a pixel earlier than the stored axis it mirrors.
    rows_reversed, columns_reversed = _reversed_axes(orientation)
    dy = math.ceil(height / s) - height / s if rows_reversed else 0.0
    dx = math.ceil(width / s) - width / s if columns_reversed else 0.0
    small = Image.fromarray(pixels.permute(1, 2, 0).squeeze(-1).contiguous().numpy())
    region = (left / s + dx, top / s + dy, (left + w) / s + dx, (top + h) / s + dy)
    out = small.resize((out_hw[1], out_hw[0]), Image.Resampling.BILINEAR, box=region)
    return pil_to_tensor(out, mode).contiguous()
