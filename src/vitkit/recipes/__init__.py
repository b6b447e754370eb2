"""Run recipes: the paper's training setups, ours for training on your own data, and the
Fashion-MNIST ones of the main job, each a function whose docstring gives its command and its
measured result here (or the paper's number it targets).

A recipe supplies hyperparameters; ``--data`` and ``--model`` say what to train on and what to
train (compose.py). A recipe may size its schedule from the number of training images
(``sized``) and declare time-to-accuracy targets (``targets``), which the end of a run reports.
Override any field with ``--set section.key=value`` (sections: model, data, optim, train).
The registry is registry.py; each family of recipes has its file, imported here to register it
(in the order ``vitkit train --help`` lists them). No torch import here.
"""

from . import finetune as _finetune  # noqa: F401  # registers finetune, finetune-paper, ...
from . import fmnist as _fmnist  # noqa: F401  # registers the Fashion-MNIST recipes
from . import imagenet as _imagenet  # noqa: F401  # registers the pre-training recipes
from . import scratch as _scratch  # noqa: F401  # registers scratch, smoke
from .fmnist import fmnist_vit
from .imagenet import AUGREG_LEVELS
from .registry import RECIPES, Recipe, Targets, find_recipe, get_recipe, recipe
from .scratch import smoke_mode

__all__ = [
    "AUGREG_LEVELS",
    "RECIPES",
    "Recipe",
    "Targets",
    "find_recipe",
    "fmnist_vit",
    "get_recipe",
    "recipe",
    "smoke_mode",
]
