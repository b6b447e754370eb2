"""A Hugging Face image processor's ``preprocessor_config.json`` for vitkit's ``Preprocess``, both
ways: ``ViTImageProcessor``'s whole image resized (antialiased), one mean and std; reading maps it
back, or warns and drops one a ``Preprocess`` cannot express.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...config import ConfigError, ModelConfig, size_hw
from ...data.transforms import NORMALIZATIONS, Preprocess
from ..metadata import IMAGE_ORIENTATION

PROCESSOR_FILE = "preprocessor_config.json"  # the name save_pretrained gives an image processor's


# vitkit's resize -> PIL's resampling code, which HF's image processors take as ``resample``.
_RESAMPLE = {"bilinear": 2, "bicubic": 3}


# ViTImageProcessor's defaults, used where a preprocessor_config.json leaves a field out.
_PROCESSOR_DEFAULTS: dict[str, Any] = {
    "do_resize": True,
    "size": {"height": 224, "width": 224},
    "resample": 2,
    "do_center_crop": False,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}


def _close(value: Any, target: float) -> bool:
    """A number, or a non-empty list of numbers, all ``target`` up to float rounding."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    return bool(items) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isclose(v, target)
        for v in items
    )


def read_preprocess(
    processor: Mapping[str, Any], cfg: ModelConfig, source: Path
) -> dict[str, Any] | None:
    """The ``Preprocess`` (as a dict, as our format stores it) that a ViT image processor's config
    describes, with the model's channels; None, with a warning saying why, when it describes
    something a ``Preprocess`` cannot."""

    def get(key: str) -> Any:
        value = processor.get(key)
        return _PROCESSOR_DEFAULTS[key] if value is None else value

    problems = []
    kind = processor.get("image_processor_type") or processor.get("feature_extractor_type")
    if kind is not None and not str(kind).startswith("ViT"):
        problems.append(f"image_processor_type={kind!r} (not ViT's)")
    size = get("size")
    sides = {k: v for k, v in size.items() if v is not None} if isinstance(size, Mapping) else {}
    image_size: Any = size
    if set(sides) == {"height", "width"}:
        image_size = (sides["height"], sides["width"])
    elif not isinstance(size, int):
        problems.append(f"size={size!r} (not a (height, width) the whole image is resized to)")
    if not get("do_resize"):
        problems.append("do_resize=false")
    resize = {code: name for name, code in _RESAMPLE.items()}.get(get("resample"))
    if resize is None:
        problems.append(f"resample={get('resample')!r} (neither bilinear, 2, nor bicubic, 3)")
    if get("do_center_crop"):
        problems.append("do_center_crop=true")
    if not (get("do_rescale") and _close(get("rescale_factor"), 1 / 255)):
        problems.append(f"do_rescale={get('do_rescale')}, rescale_factor={get('rescale_factor')}")
    mean, std = get("image_mean"), get("image_std")
    normalization = next(
        (
            name
            for name, (m, s) in NORMALIZATIONS.items()
            if get("do_normalize") and _close(mean, m) and _close(std, s)
        ),
        None,
    )
    if normalization is None:
        problems.append(
            f"do_normalize={get('do_normalize')}, image_mean={mean}, image_std={std} (vitkit's "
            f"normalizations: {dict(NORMALIZATIONS)} as (mean, std) on every channel)"
        )
    if not problems:
        try:
            return Preprocess(
                image_size=image_size,
                in_chans=cfg.in_chans,
                normalization=str(normalization),
                resize=str(resize),
            ).to_dict()
        except ConfigError as e:
            problems.append(str(e))
    warnings.warn(  # the command line shows it as one line
        f"{source}: preprocessing not carried over, as vitkit's Preprocess cannot express "
        f"{'; '.join(problems)}",
        stacklevel=3,
    )
    return None


def processor_config(preprocess: Preprocess) -> dict[str, Any]:
    """``ViTImageProcessor``'s arguments for ``preprocess``, on RGB images (a 1-channel model is
    exported with 3 channels: ``hf._rgb_from_luma``); a ``ConfigError`` for what they cannot express."""
    if not preprocess.antialias:
        raise ConfigError(
            "preprocess antialias=False cannot be written as a Hugging Face image processor: its "
            "resize always antialiases when it shrinks an image (PIL, or torchvision with "
            "antialias=True); expected antialias=True"
        )
    resample = _RESAMPLE.get(preprocess.resize)
    if resample is None:
        raise ConfigError(
            f"preprocess resize={preprocess.resize!r} has no PIL resampling code for a Hugging "
            f"Face image processor: expected one of {sorted(_RESAMPLE)}"
        )
    rgb = dataclasses.replace(preprocess, in_chans=3)
    mean, std = rgb.mean_std  # the same on every channel, which makes the luma spread exact
    height, width = size_hw(rgb.image_size)
    return {
        "do_resize": True,
        "size": {"height": height, "width": width},
        "resample": resample,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": mean,
        "image_std": std,
        "do_convert_rgb": True,  # a grayscale image handed to the processor becomes R = G = B
        # kept by save_pretrained as any key, for a reader that decodes image files itself (the
        # pipeline's load_image turns them upright already)
        **IMAGE_ORIENTATION,
    }
