"""Pretrained weights by name: the paper's checkpoints as the official repository publishes them.

Every entry is named ``PRESET@TAG`` (``ViT-B/16@in21k``, ``ViT-B/16@in21k-in1k-384``) and records
where its file is, what it is (preset, resolution, training data, classes), the top-1 and size its
source publishes, and the timm Hub repository holding the same tensors. Nothing is guessed: each
group's source is named beside it, read from google-research/vision_transformer at commit c6de1e5
(``vit_jax.ipynb``'s ``gsutil ls -lh`` listings, the README) and timm at commit aa4b5850.

Preprocessing is the official one (resize, pixels to [-1, 1]: ``Preprocess``'s default). A
head's classes follow from the data it was trained on last (``Pretrained.classes``): ImageNet-1k
heads predict torchvision's 1,000 class names (TFDS's sorted-synset order), ImageNet-21k heads
their 21,843 synsets' lemmas and wnids (``imagenet21k_classes``, shipped in ``io/classes/``).
Files are fetched through ``io/download/`` (a mirror: ``VITKIT_VIT_MODELS_URL``). No source
gives the files' hashes, so an entry's listed size bounds its file (``size_range``) and the first
download's sha256 pins it; with ``VITKIT_PRETRAINED_SOURCE=hub`` the Hub's LFS sha256 checks it.
No torch import here.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from torch import Tensor

    from ..config import ModelConfig
    from .metadata import WeightsMeta

VIT_MODELS = "https://storage.googleapis.com/vit_models"  # the official checkpoints' bucket
_LISTED_SIZE = re.compile(r"(\d+)(?:\.(\d+))? ([KMG]iB)")
_UNIT = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def listed_range(size: str) -> tuple[int, int] | None:
    """The bytes a listed size allows, inclusive: one unit of its last written digit either side
    ("393.69 MiB": 393.68 to 393.70 MiB; "1243 MiB": 1242 to 1244 MiB), which holds whether the
    listing rounded or truncated the figure. None for no listed size ("")."""
    if not size:
        return None
    match = _LISTED_SIZE.fullmatch(size)
    if match is None:
        raise ValueError(f"a listed size: expected e.g. '393.69 MiB', found {size!r}")
    decimals = match[2] or ""
    step = Fraction(1, 10 ** len(decimals))
    value = int(match[1] + decimals) * step  # exact: no float rounding at the bounds
    unit = _UNIT[match[3]]
    return math.floor((value - step) * unit), math.ceil((value + step) * unit)


@dataclass(frozen=True)
class Pretrained:
    """One checkpoint: ``PRESET@TAG`` and what its source says about it."""

    preset: str
    tag: str
    path: str  # below the vit_models base URL
    image_size: int
    pretrained_on: str
    fine_tuned_on: str | None
    num_classes: int
    size: str  # as the source lists it ("393.69 MiB"), "" where it lists none
    source: str  # where the entry's facts were read
    top1: float | None = None  # ImageNet top-1, where the source publishes it
    # The timm Hub repository of a timm configuration whose ``url`` is this file: the same tensors
    # in timm's layout. timm's ``orig_in21k`` weights (head dropped) and HF's ``google/vit-*``
    # (converted through timm's) are not the same file, so neither is listed.
    timm: str | None = None
    # The commit of ``timm`` to fetch (VITKIT_PRETRAINED_SOURCE=hub); None: its main branch. No
    # source here names one (timm's configurations name repositories, not commits).
    timm_revision: str | None = None

    def __post_init__(self) -> None:
        listed_range(self.size)  # a size the registry cannot read is a ValueError at import

    @property
    def name(self) -> str:
        return f"{self.preset}@{self.tag}"

    @property
    def size_range(self) -> tuple[int, int] | None:
        """The bytes its file may be, from its listed size (``listed_range``); None if unlisted."""
        return listed_range(self.size)

    @property
    def url(self) -> str:
        """The file's URL under ``$VITKIT_VIT_MODELS_URL`` (default: Google's bucket)."""
        return _source().file_url(self.path)

    @property
    def classes(self) -> str:
        """The classes its head predicts: those of the data it was trained on last (``I1K`` or
        ``I21K``)."""
        return self.fine_tuned_on or self.pretrained_on


NOTEBOOK = "vit_jax.ipynb (gsutil ls -lh)"
README_AUGREG = "README.md, table of recommended AugReg checkpoints"
I21K, I1K = "ImageNet-21k", "ImageNet-1k"


def _original(preset: str, file: str, size: str) -> list[Pretrained]:
    """An ImageNet-21k checkpoint of ``imagenet21k/`` (21,843 classes)."""
    return [
        Pretrained(preset, "in21k", f"imagenet21k/{file}", 224, I21K, None, 21843, size, NOTEBOOK)
    ]


def _fine_tuned(preset: str, file: str, size: str, res: int, top1: float | None) -> Pretrained:
    """An ImageNet-1k fine-tune of ``imagenet21k+imagenet2012/``."""
    source = NOTEBOOK + ("; top-1: README changelog 2020-10-29" if top1 else "")
    return Pretrained(
        preset, f"in21k-in1k-{res}", f"imagenet21k+imagenet2012/{file}", res, I21K, I1K, 1000, size,
        source, top1,
    )  # fmt: skip


def _augreg(
    preset: str,
    stem: str,
    upstream: str,
    size: str,
    top1: float,
    timm: tuple[str | None, str | None],
) -> list[Pretrained]:
    """A recommended AugReg checkpoint and its ImageNet-1k fine-tune at 384 px."""
    return [
        Pretrained(
            preset,
            "augreg-in21k",
            f"augreg/{stem}.npz",
            224,
            I21K,
            None,
            21843,
            size,
            README_AUGREG,
            None,
            timm[0],
        ),
        Pretrained(
            preset,
            "augreg-in21k-in1k-384",
            f"augreg/{stem}--{upstream}.npz",
            384,
            I21K,
            I1K,
            1000,
            "",
            README_AUGREG,
            top1,
            timm[1],
        ),
    ]


def _sam(preset: str, file: str, size: str, timm: str | None = None) -> Pretrained:
    return Pretrained(
        preset, "sam-in1k", f"sam/{file}", 224, I1K, None, 1000, size, NOTEBOOK, None, timm
    )


REGISTRY: dict[str, Pretrained] = {
    p.name: p
    for p in [
        # imagenet21k/ (vit_jax.ipynb's `gsutil ls -lh gs://vit_models/imagenet*`)
        *_original("ViT-B/16", "ViT-B_16.npz", "393.69 MiB"),
        *_original("ViT-B/32", "ViT-B_32.npz", "400.01 MiB"),
        *_original("ViT-B/8", "ViT-B_8.npz", "393.72 MiB"),
        *_original("ViT-L/16", "ViT-L_16.npz", "1.22 GiB"),
        *_original("ViT-L/32", "ViT-L_32.npz", "1.23 GiB"),
        *_original("ViT-H/14", "ViT-H_14.npz", "2.46 GiB"),
        *_original("R50+ViT-B/16", "R50+ViT-B_16.npz", "439.85 MiB"),
        *_original("R26+ViT-B/32", "R26+ViT-B_32.npz", "450.23 MiB"),
        *_original("R50+ViT-L/32", "R50+ViT-L_32.npz", "1.31 GiB"),
        # imagenet21k+imagenet2012/ (the same listing): 384 px unless -224, and the top-1 of the
        # two -224 files, from the README's changelog (2020-10-29)
        _fine_tuned("ViT-B/16", "ViT-B_16.npz", "331.4 MiB", 384, None),
        _fine_tuned("ViT-B/16", "ViT-B_16-224.npz", "330.29 MiB", 224, 0.812),
        _fine_tuned("ViT-B/32", "ViT-B_32.npz", "336.89 MiB", 384, None),
        _fine_tuned("ViT-L/16", "ViT-L_16.npz", "1.14 GiB", 384, None),
        _fine_tuned("ViT-L/16", "ViT-L_16-224.npz", "1.13 GiB", 224, 0.827),
        _fine_tuned("ViT-L/32", "ViT-L_32.npz", "1.14 GiB", 384, None),
        _fine_tuned("R50+ViT-B/16", "R50+ViT-B_16.npz", "377.57 MiB", 384, None),
        # augreg/: the README's recommended run per model ("trained with AugReg that have the best
        # pre-training metrics"), upstream and its 384 px fine-tune, with the README's sizes and
        # top-1. The index.csv that ranks every run cannot be read here (no network); the README's
        # recommendation is that ranking's choice.
        *_augreg(
            "ViT-L/16",
            "L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0",
            "imagenet2012-steps_20k-lr_0.01-res_384",
            "1243 MiB",
            0.8559,
            (None, None),
        ),
        *_augreg(
            "ViT-B/16",
            "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
            "imagenet2012-steps_20k-lr_0.03-res_384",
            "391 MiB",
            0.8549,
            ("timm/vit_base_patch16_224.augreg_in21k", None),
        ),
        *_augreg(
            "ViT-S/16",
            "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
            "imagenet2012-steps_20k-lr_0.03-res_384",
            "115 MiB",
            0.8373,
            (
                "timm/vit_small_patch16_224.augreg_in21k",
                "timm/vit_small_patch16_384.augreg_in21k_ft_in1k",
            ),
        ),
        *_augreg(
            "R50+ViT-L/32",
            "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1",
            "imagenet2012-steps_20k-lr_0.01-res_384",
            "1337 MiB",
            0.8599,
            (None, None),
        ),
        *_augreg(
            "R26+ViT-S/32",
            "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0",
            "imagenet2012-steps_20k-lr_0.01-res_384",
            "170 MiB",
            0.8385,
            (None, None),
        ),
        *_augreg(
            "ViT-Ti/16",
            "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
            "imagenet2012-steps_20k-lr_0.03-res_384",
            "37 MiB",
            0.7822,
            (
                "timm/vit_tiny_patch16_224.augreg_in21k",
                "timm/vit_tiny_patch16_384.augreg_in21k_ft_in1k",
            ),
        ),
        *_augreg(
            "ViT-B/32",
            "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0",
            "imagenet2012-steps_20k-lr_0.01-res_384",
            "398 MiB",
            0.8359,
            (None, None),
        ),
        *_augreg(
            "ViT-S/32",
            "S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0",
            "imagenet2012-steps_20k-lr_0.01-res_384",
            "118 MiB",
            0.7958,
            (None, None),
        ),
        *_augreg(
            "R+ViT-Ti/16",
            "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
            "imagenet2012-steps_20k-lr_0.03-res_384",
            "40 MiB",
            0.7540,
            (
                "timm/vit_tiny_r_s16_p8_224.augreg_in21k",
                "timm/vit_tiny_r_s16_p8_384.augreg_in21k_ft_in1k",
            ),
        ),
        # sam/ (vit_jax.ipynb's listing; ImageNet-1k at 224 px, as timm's configurations of two
        # of them say). gsam/ is named by the README, but its ViT files are listed nowhere.
        _sam("ViT-B/16", "ViT-B_16.npz", "330.3 MiB", "timm/vit_base_patch16_224.sam_in1k"),
        _sam("ViT-B/32", "ViT-B_32.npz", "336.61 MiB", "timm/vit_base_patch32_224.sam_in1k"),
        _sam("ViT-L/16", "ViT-L_16.npz", "1.13 GiB"),
        _sam("ViT-L/32", "ViT-L_32.npz", "1.14 GiB"),
        _sam("ViT-S/16", "ViT-S_16.npz", "252.57 MiB"),
    ]
}

# ``pretrained=True``: the checkpoint a preset gets by default. The paper's ImageNet-21k
# pre-training, which fine-tuning starts from [P §4.1]; the AugReg one where the preset has no
# original (Ti, S).
DEFAULT_TAG = {"ViT-Ti/16": "augreg-in21k", "ViT-S/16": "augreg-in21k", "ViT-S/32": "augreg-in21k",
               "R+ViT-Ti/16": "augreg-in21k", "R26+ViT-S/32": "augreg-in21k"}  # fmt: skip


def is_pretrained_name(text: str) -> bool:
    """Whether ``text`` is written as a registry name (``PRESET@TAG``)."""
    return "@" in text and not os.path.exists(text)


def find(name: str) -> Pretrained:
    """The entry ``PRESET@TAG`` (a preset alias works: ``vit_b16@in21k``); a one-line
    ``ConfigError`` with the closest names otherwise."""
    from ..config.keys import closest
    from ..presets import resolve_name

    preset, _, tag = name.partition("@")
    try:
        canonical = f"{resolve_name(preset)}@{tag}"
    except ConfigError:
        canonical = name
    if canonical in REGISTRY:
        return REGISTRY[canonical]
    raise ConfigError(
        f"no pretrained weights named {name!r}{closest(canonical, list(REGISTRY))}; "
        "`vitkit pretrained` lists them"
    )


def for_preset(preset: str, tag: str | bool) -> Pretrained:
    """The entry of ``preset`` for ``pretrained=tag`` (``True``: the preset's default)."""
    from ..presets import resolve_name

    canonical = resolve_name(preset)
    if tag is True:
        tag = DEFAULT_TAG.get(canonical, "in21k")
    return find(f"{canonical}@{tag}")


def list_pretrained(pattern: str = "*") -> list[Pretrained]:
    """The entries whose name matches the glob ``pattern``, in registry order."""
    return [p for name, p in REGISTRY.items() if fnmatch.fnmatchcase(name, pattern)]


def _source() -> Any:
    """The official bucket as a download source: cached under ``$VITKIT_HOME/weights/vit_models``
    whichever base URL serves it (``VITKIT_VIT_MODELS_URL``: a mirror or proxy)."""
    from .download import Source

    return Source(name="vit_models", url=VIT_MODELS)


def weights_file(entry: Pretrained, *, progress: bool = True) -> Path:
    """The entry's file in the cache, downloaded if it is not there yet; checked against its
    listed size (``size_range``) and the sha256 recorded when it was first downloaded (and the
    publisher's md5 at download)."""
    return Path(_source().fetch(entry.path, size_range=entry.size_range, progress=progress))


def is_cached(entry: Pretrained) -> bool:
    """Whether the entry's file is in the cache (not checked: a listing should be quick)."""
    return Path(_source().cached_path(entry.path)).is_file()


def imagenet1k_classes() -> list[str]:
    """ImageNet-1k's 1,000 class names in label order, as torchvision ships them offline in its
    weights' metadata (the order of TFDS's ``imagenet2012``, whose labels the checkpoints
    predict: the synsets sorted)."""
    from torchvision.models import ViT_B_16_Weights

    return list(ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"])


IMAGENET21K_FILE = "imagenet21k.tsv.gz"  # in io/classes/: "wnid<TAB>lemma" lines (its README)


def imagenet21k_classes() -> tuple[list[str], list[str]]:
    """ImageNet-21k's 21,843 classes in the order of Google's checkpoints' heads: their names and
    their WordNet synset ids (wnids). A name is its synset's lemmas (``'organism, being'``); the
    525 lemmas that name several synsets (``'crane'``: a bird, a machine, ...) are followed by
    the wnid (``'crane (n02012849)'``), as class names must be distinct (``io/metadata.py``)."""
    import gzip
    from collections import Counter
    from importlib.resources import files

    packed = (files("vitkit.io") / "classes" / IMAGENET21K_FILE).read_bytes()
    rows = [line.split("\t") for line in gzip.decompress(packed).decode("utf-8").splitlines()]
    uses = Counter(lemma for _, lemma in rows)
    names = [lemma if uses[lemma] == 1 else f"{lemma} ({wnid})" for wnid, lemma in rows]
    return names, [wnid for wnid, _ in rows]


SOURCE_ENV = "VITKIT_PRETRAINED_SOURCE"  # 'official' (default) or 'hub': where files come from


def _from_hub(entry: Pretrained) -> tuple[ModelConfig, dict[str, Tensor]]:
    """The entry's weights from its timm Hub repository (``model.safetensors``, at its
    ``timm_revision`` if it names one), through huggingface_hub. They are the official file's
    tensors; timm computes the exact GELU with them, the official code the tanh one, which they
    were trained with, and which is kept."""
    import dataclasses

    from ..presets import get_config
    from .checkpoint import read_safetensors
    from .download import hub_file
    from .formats.timm import read_timm

    if entry.timm is None:
        raise ConfigError(
            f"{entry.name} has no Hub repository with its tensors ({SOURCE_ENV}=hub): unset "
            f"{SOURCE_ENV} to fetch the official file"
        )
    state = read_safetensors(
        hub_file(entry.timm, "model.safetensors", revision=entry.timm_revision)
    )
    cfg, state = read_timm(state, num_heads=get_config(entry.preset).num_heads)
    return dataclasses.replace(cfg, act="gelu_tanh"), state


def read_pretrained(name: str) -> tuple[ModelConfig, dict[str, Tensor], WeightsMeta]:
    """``io.api.read`` of a registry name: the config and weights of its official ``.npz`` (or,
    with ``VITKIT_PRETRAINED_SOURCE=hub``, of its timm Hub repository) and what travels with them
    (``class_names``, and ``wnids`` for ImageNet-21k; ``preprocess``; ``pretrained``, the name)."""
    from ..data.transforms import Preprocess
    from .formats.official import read_official_file
    from .metadata import WeightsMeta

    entry = find(name)
    source = os.environ.get(SOURCE_ENV, "official")
    if source not in ("official", "hub"):
        raise ConfigError(f"{SOURCE_ENV}={source!r}: expected 'official' or 'hub'")
    if source == "hub":
        cfg, state = _from_hub(entry)
    else:
        cfg, state = read_official_file(weights_file(entry))
    if cfg.num_classes != entry.num_classes:
        raise CheckpointError(
            f"{entry.name}: its file holds a head of {cfg.num_classes} classes, the registry "
            f"says {entry.num_classes} ({entry.classes})"
        )
    names, wnids = None, None
    if entry.classes == I1K:
        names = imagenet1k_classes()
    elif entry.classes == I21K:
        names, wnids = imagenet21k_classes()
    meta = WeightsMeta(
        class_names=None if names is None else tuple(names),
        wnids=None if wnids is None else tuple(wnids),
        pretrained=entry.name,
        preprocess=Preprocess(image_size=entry.image_size, in_chans=cfg.in_chans),
    )
    return cfg, state, meta
