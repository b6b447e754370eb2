"""The paper's transfer settings and results, as data [P Table 4, App. B.1.1; PAPER.md A4, A11].

``DATASETS``: per dataset of Table 2, the fine-tuning steps, the learning rates swept and the
fraction of train held out to choose among them (10% Pets and Flowers, 2% CIFAR, 1% ImageNet).
A dataset the paper does not fine-tune on takes ``DEFAULT`` (CIFAR's: 10,000 steps, 2%, the
{0.001, 0.003, 0.01, 0.03} sweep), each of which a flag of ``vitkit transfer`` overrides.
``PAPER_RESULTS``: the test top-1 the paper (or the official repository, marked) reports for a
model and its pre-training data, only where ``../shared/PAPER.md`` gives it; nothing recalled.
``MAX_STEPS`` and ``MAX_RESOLUTION`` bound the flags of both protocols. No torch import here.
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class DatasetSettings:
    """How the paper fine-tunes on one dataset."""

    name: str  # the paper's name for it, as the table prints it
    steps: int  # Table 4
    lrs: tuple[float, ...]  # the sweep, Table 4
    holdout: float  # the fraction of train held out to choose the learning rate, B.1.1
    real: bool = False  # also reported on ImageNet ReaL (Table 2)


_SMALL_LRS = (0.001, 0.003, 0.01, 0.03)
CIFAR = DatasetSettings("CIFAR", 10_000, _SMALL_LRS, 0.02)

# The datasets of Table 2, by every name they go by (lower case, letters and digits only):
# a folder, shard folder or Hub dataset of one of these names takes its settings.
DATASETS: dict[str, DatasetSettings] = {
    **dict.fromkeys(
        ("imagenet", "imagenet2012", "ilsvrc2012", "imagenet1k", "in1k"),
        DatasetSettings("ImageNet", 20_000, (0.003, 0.01, 0.03, 0.06), 0.01, real=True),
    ),
    "cifar10": DatasetSettings("CIFAR-10", 10_000, _SMALL_LRS, 0.02),
    "cifar100": DatasetSettings("CIFAR-100", 10_000, _SMALL_LRS, 0.02),
    **dict.fromkeys(
        ("pets", "pet", "oxfordiiitpet", "oxfordpets", "oxfordiiitpets"),
        DatasetSettings("Oxford-IIIT Pets", 500, _SMALL_LRS, 0.10),
    ),
    **dict.fromkeys(
        ("flowers", "flowers102", "oxfordflowers102", "oxfordflowers", "102flowers"),
        DatasetSettings("Oxford Flowers-102", 500, _SMALL_LRS, 0.10),
    ),
}
DEFAULT = CIFAR  # a dataset the paper does not fine-tune on: CIFAR's settings, stated
# --no-sweep: vitkit's finetune recipe's rate, the middle of both of the paper's sweeps (and the
# rate the paper chose for every VTAB task)
DEFAULT_LR = 0.01
# Warmup: 5% of the steps (vit_jax: 500 of CIFAR's 10,000).
WARMUP = 0.05
# Bounds of both protocols' flags (``vitkit vtab``'s too), generous, so that a slip is one line
# rather than a run of years or a resize of terabytes: a run's steps, 500 times the paper's
# longest fine-tuning (ImageNet's 20,000); the resolution, 4 times its largest (518, ViT-H/14).
MAX_STEPS = 10_000_000
MAX_RESOLUTION = 2048


def settings_for(name: str) -> DatasetSettings | None:
    """The paper's settings for the dataset ``name`` (any spelling in ``DATASETS``: case and
    characters other than letters and digits aside), or None when the paper has none."""
    return DATASETS.get(re.sub(r"[^a-z0-9]", "", name.lower()))


def parse_steps(text: str) -> int | float:
    """``--steps``: a whole number is that many steps for every dataset (``--steps 200``); a
    number with a decimal point scales each dataset's Table 4 count (``--steps 0.01``: 100 of
    CIFAR's 10,000, 5 of Pets' 500; ``--steps 1.0`` the paper's)."""
    try:
        value: int | float = int(text) if text.strip().isdigit() else float(text)
    except ValueError:
        value = 0
    # a scale's bound: no dataset's runs above MAX_STEPS
    scale = MAX_STEPS / max(s.steps for s in DATASETS.values())
    if not 0 < value <= (MAX_STEPS if isinstance(value, int) else scale):
        raise ConfigError(
            f"--steps {reprlib.repr(text)}: expected a number of steps up to {MAX_STEPS:,} (e.g. "
            f"200) or a scale of the paper's up to {scale:g} (e.g. 0.01)"
        )
    return value


def check_resolution(px: int | None) -> None:
    """``--resolution``: None (the protocol's default) or up to ``MAX_RESOLUTION`` pixels."""
    if px is not None and not 0 < px <= MAX_RESOLUTION:
        raise ConfigError(
            f"--resolution {px}: expected 1 to {MAX_RESOLUTION} pixels a side (the paper "
            "fine-tunes at 384 to 518)"
        )


def scaled_steps(paper_steps: int, steps: int | float | None) -> int:
    """The steps of a run: the paper's, ``steps`` itself (a whole number), or the paper's scaled
    by ``steps`` (rounded, at least 1)."""
    if steps is None:
        return paper_steps
    if isinstance(steps, int):
        return steps
    return max(1, round(paper_steps * steps))


# The test top-1 (%) reported for a model (``PRESET@PRE-TRAINING``: in1k, in21k or jft), per
# dataset of DATASETS (by its first name), with where it is written.
PAPER_RESULTS: dict[str, dict[str, tuple[float, str]]] = {
    "ViT-B/16@in1k": {
        "imagenet": (77.91, "P Table 5, 384 px"),
        "cifar10": (98.13, "P Table 5 (A11)"),
    },
    "ViT-B/32@in1k": {
        "imagenet": (73.38, "P Table 5, 384 px"),
        "cifar10": (97.77, "P Table 5 (A11)"),
    },
    "ViT-L/16@in1k": {"imagenet": (76.53, "P Table 5, 384 px")},
    "ViT-L/32@in1k": {"imagenet": (71.16, "P Table 5, 384 px")},
    "ViT-B/16@in21k": {
        "imagenet": (83.97, "P §4.6 (A6)"),
        "cifar10": (99.02, "vit_jax README, 384 px"),
    },
    "ViT-B/32@in21k": {"cifar10": (98.88, "vit_jax README, 384 px")},
    "ViT-L/16@in21k": {"cifar10": (99.13, "vit_jax README, 384 px")},
    "ViT-H/14@jft": {
        "imagenet": (88.55, "P Table 2"),
        "cifar10": (99.50, "P Table 2"),
        "cifar100": (94.55, "P Table 2"),
    },
}


def paper_result(model: str | None, settings: DatasetSettings) -> tuple[float, str] | None:
    """The top-1 (%) and its source that ``PAPER_RESULTS`` gives for ``model`` on the dataset
    of ``settings``, or None."""
    if model is None:
        return None
    results = PAPER_RESULTS.get(model, {})
    return next((results[k] for k, s in DATASETS.items() if s == settings and k in results), None)


def check_paper_model(model: str) -> str:
    """``--paper``: one of ``PAPER_RESULTS``'s models."""
    if model not in PAPER_RESULTS:
        raise ConfigError(
            f"--paper {model}: the paper's numbers are known for {', '.join(PAPER_RESULTS)}"
        )
    return model
