"""``data.auto_augment``: timm's augmentation strings, parsed and checked without torch.

timm's syntax (timm/data/auto_augment.py), the subset vitkit implements (data/autoaugment.py):
``rand[-mM][-nN][-mstdS][-mmaxX][-incI][-pP]`` is RandAugment (Cubuk et al. 2020) with timm's
magnitude noise (``mstd``: each applied op's magnitude drawn from N(M, S) and clipped to
[0, mmax]; S > 100 draws it uniformly from [0, M]) and its ``inc`` ops (severity increasing with
the magnitude); ``original[-mstdS]`` is AutoAugment's ImageNet policy (Cubuk et al. 2019, as
timm's ``original``); ``trivial`` (or ``ta_wide``, torchvision's reference scripts' name) is
TrivialAugment's wide space (Müller & Hutter 2021, as torchvision's TrivialAugmentWide).

A new run keeps n <= ``MAX_OPS`` and mmax <= ``MAX_MAGNITUDE`` (``why_not_new``); a run recorded
before these bounds keeps what it holds (config/keys.py ``check_new``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigError
from .keys import shown

# A new run's bounds: timm's RandAugment applies n of 2-4 ops, on magnitudes of 0-10 (its
# _LEVEL_DENOM; mmax raises the clip), and every op costs its time on every image.
MAX_OPS, MAX_MAGNITUDE = 16, 100
AUTO_AUGMENTS = (
    "rand[-mM][-nN][-mstdS][-mmaxX][-incI][-pP] (RandAugment, e.g. rand-m9-mstd0.5-inc1; n in "
    f"[1, {MAX_OPS}], m <= mmax <= {MAX_MAGNITUDE}), original[-mstdS] (AutoAugment's ImageNet "
    "policy) or trivial (TrivialAugment wide)"
)
# RandAugment's sections: each name and its value's syntax.
_INT, _FLOAT = r"\d+", r"\d+(?:\.\d*)?|\.\d+"
_SYNTAX = {_INT: "int", "[01]": "0|1"}
_RAND_SECTIONS = {"m": _INT, "n": _INT, "mstd": _FLOAT, "mmax": _INT, "inc": "[01]", "p": _FLOAT}


@dataclass(frozen=True, kw_only=True)
class AutoAugment:
    """A parsed ``data.auto_augment``: the policy and timm's knobs (defaults are timm's)."""

    policy: Literal["rand", "original", "trivial"]
    num_ops: int = 2  # n: RandAugment's ops per image
    magnitude: float = 10.0  # m, on timm's 0..10 scale
    magnitude_std: float = 0.0  # mstd: the std of the magnitude's noise; inf: uniform [0, m]
    magnitude_max: float = 10.0  # mmax: magnitudes are clipped to [0, mmax]
    increasing: bool = False  # inc: ops whose severity increases with the magnitude
    prob: float = 0.5  # p: each chosen RandAugment op is applied with this probability


def _sections(text: str, head: str, allowed: dict[str, str]) -> dict[str, str]:
    """``head-k1v1-k2v2`` -> {k1: v1, k2: v2}; a ConfigError naming the first bad section."""
    found: dict[str, str] = {}
    for section in text.split("-")[1:]:
        match = re.fullmatch(r"([a-z]+)(.*)", section)
        name, value = match.groups() if match else ("", section)
        if name not in allowed or not re.fullmatch(allowed[name], value):
            kinds = (f"{k}<{_SYNTAX.get(v, 'number')}>" for k, v in allowed.items())
            expected = ", ".join(kinds) if allowed else f"{head!r} alone"
            raise ConfigError(
                f"{shown(repr(section))} in {shown(repr(text))} is not a section: expected "
                f"{expected}"
            )
        if name in found:
            raise ConfigError(f"{shown(repr(text))} sets {name} twice: expected each section once")
        found[name] = value
    return found


def parse_auto_augment(text: str) -> AutoAugment:
    """``data.auto_augment``'s string as an ``AutoAugment``; a one-line ``ConfigError`` saying
    what was expected and what was found otherwise."""
    head = text.split("-")[0]
    if head in ("trivial", "ta_wide"):
        _sections(text, head, {})
        return AutoAugment(policy="trivial")
    if head == "original":
        found = _sections(text, head, {"mstd": _FLOAT})
        return AutoAugment(policy="original", magnitude_std=_noise(found.get("mstd", "0")))
    quoted = shown(repr(text))
    if head != "rand":
        raise ConfigError(f"{quoted} is not an augmentation vitkit has: expected {AUTO_AUGMENTS}")
    found = _sections(text, head, _RAND_SECTIONS)
    n = found.get("n", "2")
    try:
        num_ops = int(n)
    except ValueError:  # digits beyond what int() reads (sys.get_int_max_str_digits)
        raise ConfigError(
            f"{quoted} has n of {len(n):,} digits: expected n in [1, {MAX_OPS}]"
        ) from None
    policy = AutoAugment(
        policy="rand",
        num_ops=num_ops,
        magnitude=float(found.get("m", 10)),
        magnitude_std=_noise(found.get("mstd", "0")),
        magnitude_max=float(found.get("mmax", 10)),
        increasing=found.get("inc", "0") == "1",
        prob=float(found.get("p", 0.5)),
    )
    if policy.num_ops < 1:
        raise ConfigError(f"{quoted} applies n=0 ops: expected n >= 1")
    if policy.magnitude > policy.magnitude_max:
        raise ConfigError(
            f"{quoted} has m={policy.magnitude:g} > mmax={policy.magnitude_max:g}: expected m <= "
            "mmax (magnitudes are clipped to [0, mmax]; mmax is 10 unless set)"
        )
    if policy.prob > 1:
        raise ConfigError(f"{quoted} has p={policy.prob:g}: expected a probability in [0, 1]")
    return policy


def _noise(value: str) -> float:
    """timm's ``mstd``: above 100 it means uniform sampling (an infinite std)."""
    std = float(value)
    return math.inf if std > 100 else std


def why_not_new(text: str) -> str | None:
    """What a new run may not hold of a valid ``data.auto_augment`` string (None: nothing): n
    above ``MAX_OPS``, mmax above ``MAX_MAGNITUDE``."""
    policy, quoted = parse_auto_augment(text), shown(repr(text))
    if policy.num_ops > MAX_OPS:
        return f"{quoted} applies n={policy.num_ops:,} ops: expected n in [1, {MAX_OPS}]"
    if policy.magnitude_max > MAX_MAGNITUDE:
        return (
            f"{quoted} has mmax={policy.magnitude_max:g}: expected mmax <= {MAX_MAGNITUDE} "
            "(magnitudes on timm's 0..10 scale)"
        )
    return None
