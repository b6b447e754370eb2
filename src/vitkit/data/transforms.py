"""Image transforms, reproducible: every random choice comes from an explicit ``torch.Generator``.

Nothing here touches the global RNG (``rand_augment`` forks it), so the loader can seed each batch
or sample from (seed, epoch, position) and a resumed run repeats exactly.

The official pipeline [VJ input_pipeline.py; PAPER.md A4]: training takes an inception crop (area
(0.05, 1), aspect ratio (3/4, 4/3)) resized to the training resolution; evaluation resizes the
whole image (no centre crop); both scale pixels to [-1, 1]. Flipping is a separate switch (the
official code flips in some versions only). ``tf.image.resize`` does not antialias; we do by
default (it matters only when shrinking), and ``Preprocess`` records the choice so that inference
matches training. Two paths: in-memory uint8 batches (B, C, H, W) of one size, vectorised
(``random_crop_flip``, ``resize``, ``to_float``); single images (C, H, W) of any size
(``inception_crop``, ``center_resize``, ``rand_augment``).
"""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps
from torch import Tensor

from ..config import from_dict, image_size_of, to_dict
from ..errors import ConfigError, DataError

# torchvision is imported only by ``rand_augment`` (and autoaugment's Equalize and AutoContrast):
# importing it imports torch._dynamo (through torchvision.ops), seconds of every command's start
# (benchmarks/RESULTS.md).
_INTERPOLATION = ("bilinear", "bicubic")
# Each normalisation as (mean, std) on pixels scaled to [0, 1], the same on every channel:
# (x / 255 - 0.5) / 0.5 is (x - 127.5) / 127.5. Other tools (HF, ONNX consumers) read it this way.
NORMALIZATIONS: dict[str, tuple[float, float]] = {"minus_one_to_one": (0.5, 0.5)}
_SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I")
# The channel modes images are read in, as PIL names them: 'RGB' (3 channels) and 'L' (1).
MODES = ("RGB", "L")
# The inception crop's box [VJ input_pipeline.py]: a share of the image's area and an aspect ratio
# (w/h). The official area range starts at 0.05, where torchvision's and DeiT's start at 0.08.
INCEPTION_AREA = (0.05, 1.0)
INCEPTION_RATIO = (3 / 4, 4 / 3)


def check_mode(mode: str | None, *, undecided: bool = False) -> None:
    """Refuse a channel mode other than those of ``MODES``, or None where ``undecided`` allows
    it (the channels decided from the images)."""
    allowed: tuple[str | None, ...] = (*MODES, None) if undecided else MODES
    if mode not in allowed:
        *first, last = map(repr, allowed)
        raise ConfigError(f"mode={mode!r} is not valid: expected {', '.join(first)} or {last}")


def mode_of(in_chans: int) -> str:
    """The channel mode images are read in for a model of ``in_chans`` channels."""
    return "L" if in_chans == 1 else "RGB"


def channels_of(mode: str) -> int:
    """The channels of an image read in channel ``mode``: 1 for 'L', 3 for 'RGB'."""
    return 1 if mode == "L" else 3


def _pair(size: int | tuple[int, int]) -> list[int]:
    h, w = (size, size) if isinstance(size, int) else size
    if h < 1 or w < 1:
        raise ConfigError(f"size={size!r} is not valid: expected positive integer(s)")
    return [int(h), int(w)]


def refuse_float_pixels(mode: str) -> None:
    """A ``ValueError`` (an image that does not decode) for PIL's mode F, 32-bit float pixels
    (a TIFF of a microscope's or a satellite's): their range is the data's own, [0, 1] or any
    other, and PIL's conversion clips them to 0..255, which made a [0, 1] image black."""
    if mode == "F":
        raise ValueError(
            "32-bit float pixels (PIL mode F): expected 8- or 16-bit images; convert them, "
            "choosing their range"
        )


def pil_to_array(image: Image.Image, mode: str = "RGB") -> np.ndarray:
    """A PIL image as a uint8 array (H, W) for ``mode='L'`` or (H, W, 3) for ``'RGB'``.

    Grayscale, palette, RGBA and CMYK are all converted with PIL's ``convert``; alpha is dropped,
    as the official TF decoder does. 16-bit images are scaled to 8 bits (PIL's own conversion would
    clip every value above 255 to white). Needs numpy and PIL only (no torch), so a verification
    worker can call it.
    """
    check_mode(mode)
    refuse_float_pixels(image.mode)
    if image.mode in _SIXTEEN_BIT_MODES:
        wide = np.asarray(image, dtype=np.int64)  # (H, W), 0..65535
        if wide.size and (wide.min() < 0 or wide.max() > 65535):  # mode I holds 32 bits
            raise ValueError(
                f"32-bit integer pixels from {wide.min()} to {wide.max()} (PIL mode I): expected "
                "8- or 16-bit images; convert them, choosing their range"
            )  # clipped, 93% of a 0..10^6 image was white
        image = Image.fromarray((wide // 257).astype(np.uint8))
    elif image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")  # PIL warns when a palette with transparency goes to RGB
    if image.mode != mode:
        image = image.convert(mode)
    return np.array(image, dtype=np.uint8)  # (H, W) or (H, W, C)


def pil_to_tensor(image: Image.Image, mode: str = "RGB") -> Tensor:
    """A PIL image as uint8 (C, H, W), converted to ``mode`` ('RGB': C=3, 'L': C=1) as
    ``pil_to_array`` converts it.

    The tensor is a view of the pixels in PIL's own order, channels last (strides (1, W*C, C)):
    the crop and the antialiased resize read that layout fastest (torch's uint8 resize kernel
    works channels-last and would convert a (C, H, W)-contiguous image first), and it saves the
    copy a transpose would cost. ``.contiguous()`` gives (C, H, W) memory where that matters.
    """
    pixels = torch.from_numpy(pil_to_array(image, mode))  # (H, W) or (H, W, C)
    return pixels.unsqueeze(0) if pixels.ndim == 2 else pixels.permute(2, 0, 1)


def to_channels(images: Tensor, channels: int) -> Tensor:
    """uint8 images (..., C, H, W) with ``channels`` channels: grey repeated into R, G and B, or
    RGB to grey by PIL's 'L' conversion, to the bit (ITU-R 601-2 luma in PIL's 16-bit integer
    arithmetic: L = (19595 R + 38470 G + 7471 B + 2^15) >> 16)."""
    have = images.shape[-3]
    if have == channels:
        return images
    if (have, channels) == (1, 3):
        return images.expand(*images.shape[:-3], 3, *images.shape[-2:])  # (..., 3, H, W)
    if (have, channels) == (3, 1):
        r, g, b = images.int().unbind(-3)  # (..., H, W) each
        grey = (19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16
        return grey.to(torch.uint8).unsqueeze(-3)  # (..., 1, H, W)
    raise DataError(
        f"images have {have} channels: expected 1 (greyscale) or 3 (RGB) to make {channels}"
    )


def to_float(images: Tensor) -> Tensor:
    """uint8 images -> float32 in [-1, 1], as the official code: (x - 127.5) / 127.5."""
    return images.float().sub_(127.5).div_(127.5)


def random_crop_flip(
    images: Tensor, *, padding: int, flip: bool, generator: torch.Generator
) -> Tensor:
    """Pad each image with ``padding`` zeros, crop a random H x W window, flip it with p 0.5.

    ``images`` is (B, C, H, W) of any dtype; one gather over the batch, no loop over samples.
    The random draws (B crop rows, B crop columns, B flip coins) happen in that order whatever the
    options, so a batch's crops do not depend on ``flip``.
    """
    if images.ndim != 4:
        raise ConfigError(f"expected a batch (B, C, H, W), found shape {tuple(images.shape)}")
    if not isinstance(padding, int) or padding < 0:
        raise ConfigError(f"padding={padding!r} is not valid: expected an integer >= 0")
    B, C, H, W = images.shape
    top = torch.randint(0, 2 * padding + 1, (B,), generator=generator)  # (B,)
    left = torch.randint(0, 2 * padding + 1, (B,), generator=generator)  # (B,)
    flipped = torch.rand(B, generator=generator) < 0.5  # (B,)
    if padding == 0:  # the crop is the image: flip the chosen ones, no gather
        out = images.clone()
        # one flip per chosen image: 10x faster than a masked or torch.where flip of a batch of
        # one (the per-sample loader's), and as fast for small batches
        for i in flipped.nonzero().flatten().tolist() if flip else []:
            out[i] = images[i].flip(-1)
        return out
    Hp, Wp = H + 2 * padding, W + 2 * padding
    padded = F.pad(images, (padding, padding, padding, padding))  # (B, C, Hp, Wp)
    rows = top[:, None] + torch.arange(H)  # (B, H)
    cols = left[:, None] + torch.arange(W)  # (B, W)
    if flip:  # a flipped crop reads the same window's columns right to left
        cols = torch.where(flipped[:, None], cols.flip(1), cols)  # (B, W)
    index = (rows[:, :, None] * Wp + cols[:, None, :]).view(B, 1, H * W)  # (B, 1, H*W)
    out = padded.view(B, C, Hp * Wp).gather(2, index.expand(B, C, H * W))  # (B, C, H*W)
    return out.view(B, C, H, W)


def resize(
    images: Tensor,
    size: int | tuple[int, int],
    *,
    interpolation: str = "bilinear",
    antialias: bool = True,
) -> Tensor:
    """Resize (C, H, W) or (B, C, H, W) images to exactly ``size`` (aspect ratio not kept);
    the result is contiguous (C, H, W) memory whatever the input's layout."""
    if interpolation not in _INTERPOLATION:
        raise ConfigError(
            f"interpolation={interpolation!r} is not valid: expected one of {sorted(_INTERPOLATION)}"
        )
    hw = _pair(size)
    if list(images.shape[-2:]) != hw:
        images = _interpolate(images, hw, interpolation, antialias)
    return images.contiguous()  # a channels-last view (pil_to_tensor's) leaves as (C, H, W)


def _interpolate(images: Tensor, hw: list[int], mode: str, antialias: bool) -> Tensor:
    """torchvision's ``resize_image`` (0.29) for bilinear and bicubic, the same pixels (a test
    compares them): uint8 is resized natively where torch has the fast kernel (bicubic; bilinear
    on AVX2, AVX-512 or ARM CPUs), otherwise in float32 and rounded back."""
    shape, numel = images.shape, images.numel()
    C, H, W = shape[-3:]
    if numel == 0:
        return images.reshape(*shape[:-3], C, *hw)
    x = images.reshape(-1, C, H, W)  # (B, C, H, W)
    if (
        x.is_contiguous(memory_format=torch.channels_last)
        and x.shape[0] == 1
        and numel != x.stride(0)
    ):
        # one channels-last image: restride so interpolate allocates its output channels last
        # too (pytorch issue 68430), the memory torch's uint8 kernel is fast on
        x = x.as_strided((1, C, H, W), (numel, *x.stride()[1:]))
    native = x.dtype in (torch.float32, torch.float64) or (
        x.dtype == torch.uint8 and x.device.type == "cpu" and _native_uint8(mode)
    )
    out = F.interpolate(
        x if native else x.float(), size=hw, mode=mode, align_corners=False, antialias=antialias
    )
    if not native:
        if mode == "bicubic" and images.dtype == torch.uint8:
            out = out.clamp_(0, 255)
        if not images.dtype.is_floating_point:
            out = out.round_()
        out = out.to(images.dtype)
    return out.reshape(*shape[:-3], C, *hw)  # (..., C, S_h, S_w)


def _native_uint8(mode: str) -> bool:
    """Whether torch resizes uint8 directly on this CPU (torchvision's rule: its bilinear kernel
    is slower than float32's without AVX2)."""
    if mode == "bicubic":
        return True
    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") or platform.machine() in (
        "aarch64",
        "arm64",
    )


def center_resize(image: Tensor, size: int | tuple[int, int], *, antialias: bool = True) -> Tensor:
    """The official evaluation transform: the whole image resized to ``size`` (no centre crop)."""
    return resize(image, size, antialias=antialias)


def central_crop(images: Tensor, size: int | tuple[int, int]) -> Tensor:
    """The centre ``size`` window of images (..., H, W), a view: big_vision's ``central_crop``,
    which starts at ((H - S_h) // 2, (W - S_w) // 2)."""
    h, w = _pair(size)
    H, W = images.shape[-2:]
    if h > H or w > W:
        raise ConfigError(f"a central crop of {h}x{w} does not fit images of {H}x{W}")
    top, left = (H - h) // 2, (W - w) // 2
    return images[..., top : top + h, left : left + w]  # (..., S_h, S_w)


def crop_box(
    height: int,
    width: int,
    *,
    area: tuple[float, float],
    ratio: tuple[float, float],
    generator: torch.Generator,
    attempts: int = 10,
) -> tuple[int, int, int, int]:
    """A random (top, left, h, w) covering ``area`` of the image with aspect ratio w/h in ``ratio``.

    As torchvision's ``RandomResizedCrop`` (area uniform, ratio log-uniform, ``attempts`` tries); when
    every try falls outside the image, the whole image, as the official code
    (``use_image_if_no_bounding_boxes``) does.
    """
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(attempts):
        u = torch.rand(4, generator=generator).tolist()
        target = height * width * (area[0] + (area[1] - area[0]) * u[0])
        aspect = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[1])
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = min(int(u[2] * (height - h + 1)), height - h)
            left = min(int(u[3] * (width - w + 1)), width - w)
            return top, left, h, w
    return 0, 0, height, width


def inception_crop(
    image: Tensor,
    size: int | tuple[int, int],
    *,
    area: tuple[float, float] = INCEPTION_AREA,
    ratio: tuple[float, float] = INCEPTION_RATIO,
    generator: torch.Generator,
    antialias: bool = True,
) -> Tensor:
    """The official fine-tuning crop: a random box (``crop_box``) resized to ``size``; (C, H, W)."""
    if not 0.0 < area[0] <= area[1] <= 1.0:
        raise ConfigError(f"area={area!r} is not valid: expected 0 < min <= max <= 1")
    top, left, h, w = crop_box(
        image.shape[-2], image.shape[-1], area=area, ratio=ratio, generator=generator
    )
    return resized_crop(image, (top, left, h, w), size, antialias=antialias)


def resized_crop(
    image: Tensor,
    box: tuple[int, int, int, int],
    size: int | tuple[int, int],
    *,
    antialias: bool = True,
) -> Tensor:
    """The (top, left, h, w) ``box`` of a uint8 (C, H, W) image resized to ``size`` (bilinear);
    contiguous (C, S_h, S_w).

    A channels-last image (``pil_to_tensor``'s view) is cropped by copying the box's rows into
    channels-last memory, which torch's uint8 resize reads directly: the same pixels as
    torchvision's ``resized_crop`` (the same kernel), about 3x faster than on (C, H, W) memory.
    """
    top, left, h, w = box
    crop = image[..., top : top + h, left : left + w]  # (C, h, w), a view
    if image.ndim == 3 and image.stride(0) == 1:  # channels last: (1, W*C, C) strides
        crop = crop.permute(1, 2, 0).contiguous().permute(2, 0, 1)  # (C, h, w), channels last
    return resize(crop, size, antialias=antialias)


def rand_augment(
    image: Tensor, *, num_ops: int = 2, magnitude: int = 10, generator: torch.Generator
) -> Tensor:
    """torchvision's RandAugment on a uint8 image, its choices drawn from ``generator``.

    torchvision draws from the global RNG, so we fork it and seed the fork from ``generator``:
    the result depends only on ``generator``, and the caller's global RNG state is left untouched.
    """
    from torchvision.transforms import v2

    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return v2.RandAugment(num_ops=num_ops, magnitude=magnitude)(image)


@dataclass(frozen=True, kw_only=True)
class Preprocess:
    """What inference must do to an image so a model sees what it was trained on.

    Stored in checkpoints (``to_dict``/``from_dict``). ``normalization`` names the pixel scaling:
    ``'minus_one_to_one'`` is (x - 127.5) / 127.5, the official code's (and timm's 0.5/0.5).
    """

    image_size: int | tuple[int, int]  # (height, width) for non-square images, as the model's
    in_chans: int = 3
    normalization: str = "minus_one_to_one"
    resize: str = "bilinear"
    antialias: bool = True

    def __post_init__(self) -> None:  # frozen: the size is normalised once, here
        object.__setattr__(self, "image_size", image_size_of(self.image_size))
        if type(self.in_chans) is not int or self.in_chans not in (1, 3):
            raise ConfigError(f"in_chans={self.in_chans!r} is not valid: expected 1 or 3")
        if self.normalization not in NORMALIZATIONS:
            raise ConfigError(
                f"normalization={self.normalization!r} is not valid: expected one of "
                f"{sorted(NORMALIZATIONS)}"
            )
        if self.resize not in _INTERPOLATION:
            raise ConfigError(
                f"resize={self.resize!r} is not valid: expected one of {sorted(_INTERPOLATION)}"
            )
        if not isinstance(self.antialias, bool):
            raise ConfigError(f"antialias={self.antialias!r} is not valid: expected True or False")

    @property
    def mean_std(self) -> tuple[list[float], list[float]]:
        """The normalisation as per-channel (mean, std) on pixels scaled to [0, 1]:
        ``(x / 255 - mean) / std``, the convention of torchvision, timm and Hugging Face."""
        mean, std = NORMALIZATIONS[self.normalization]
        return [mean] * self.in_chans, [std] * self.in_chans

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preprocess:
        """Strict: unknown keys are errors (with the closest valid name)."""
        return from_dict(cls, data)


def preprocess_for_inference(image: Image.Image | Tensor, preprocess: Preprocess) -> Tensor:
    """A PIL image or uint8 tensor (C, H, W) -> the float (in_chans, S_h, S_w) a model takes,
    resized to ``preprocess.image_size`` (S_h, S_w). A PIL image is turned upright by its EXIF
    orientation first, as ``transformers``' pipelines turn it; a tensor is taken as it is."""
    if isinstance(image, Image.Image):
        image = ImageOps.exif_transpose(image)
        pixels = pil_to_tensor(image, mode_of(preprocess.in_chans))
    else:
        if image.dtype != torch.uint8 or image.ndim != 3 or image.shape[0] not in (1, 3):
            raise DataError(
                "expected a PIL image or a uint8 tensor (C, H, W) with C = 1 or 3, "
                f"found {image.dtype} of shape {tuple(image.shape)}"
            )
        pixels = to_channels(image, preprocess.in_chans)  # (C, H, W), PIL's "L" weights
    pixels = resize(
        pixels,
        preprocess.image_size,
        interpolation=preprocess.resize,
        antialias=preprocess.antialias,
    )  # (C, S_h, S_w)
    return to_float(pixels)
