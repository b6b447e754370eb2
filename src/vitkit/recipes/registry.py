"""The registry of recipes: a recipe is a function returning its ``RunConfig``, registered under its
name by ``@recipe``, with the schedule it may size from the data (``sized``) and its
time-to-accuracy targets (``targets``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import (
    ConfigError,
    RunConfig,
)
from ..config.keys import closest


@dataclass(frozen=True)
class Targets:
    """Time-to-accuracy targets: the first time each accuracy is reached, and the accuracy at
    ``at_minutes``, from the process's start (metrics.jsonl's ``time_s``)."""

    accuracies: tuple[float, ...]
    at_minutes: float


# A schedule sized by the data: (training images, train.duration if the user set it, whether the
# run starts from pretrained weights) -> the settings it derives ({dotted key: value}), applied
# where the user set none of them, and why beyond the number of images (None: that alone).
Sized = Callable[[int, "str | None", bool], tuple[dict[str, Any], "str | None"]]


@dataclass(frozen=True)
class Recipe:
    """A registered recipe: ``build()`` gives its ``RunConfig``; ``sized`` (optional) the
    schedule it derives from the number of training images; ``targets`` its time-to-accuracy
    targets, if it has any."""

    name: str
    about: str  # one line, for `vitkit train --help`
    build: Callable[[], RunConfig]
    sized: Sized | None = None
    targets: Targets | None = None


RECIPES: dict[str, Recipe] = {}


def recipe(
    about: str,
    *,
    sized: Sized | None = None,
    targets: Targets | None = None,
) -> Callable[[Callable[[], RunConfig]], Callable[[], RunConfig]]:
    """Register the decorated function as a recipe named after it (``_`` written ``-``)."""

    def register(fn: Callable[[], RunConfig]) -> Callable[[], RunConfig]:
        name = fn.__name__.replace("_", "-")
        RECIPES[name] = Recipe(name, about, fn, sized, targets)
        return fn

    return register


def find_recipe(name: str) -> Recipe:
    """The registered recipe ``name``; a ``ConfigError`` with the closest name otherwise."""
    if name not in RECIPES:
        hint = closest(name, list(RECIPES))
        raise ConfigError(f"unknown recipe {name!r}{hint}; recipes: {', '.join(RECIPES)}")
    return RECIPES[name]


def get_recipe(name: str) -> RunConfig:
    """The ``RunConfig`` of recipe ``name``."""
    return find_recipe(name).build()
