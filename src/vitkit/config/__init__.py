"""Typed configuration: the model's vocabulary is the paper's and the official code's.

Configs are frozen, keyword-only dataclasses whose fields are declared once, with their type,
bounds, default and one line of documentation (``keys.key``); validation, the reading of
``--set key=value`` text and ``vitkit config``'s listing are derived from those declarations
(``keys.py``). Errors are ``ConfigError`` (vitkit's user error, ``errors.py``) naming the key, the
value and what is allowed; an unknown key is an error with the closest valid name. This package
never imports torch, so the command line checks a setting before paying for that import.
"""

from __future__ import annotations

from ..errors import ConfigError
from .data import (
    DATA_SPECS,
    DataConfig,
    DataSource,
    Validation,
    data_name,
    data_names,
    data_source,
    hf_is_local,
    normalise_data,
)
from .dicts import from_dict
from .keys import to_dict
from .model import (
    FINETUNE_KEYS,
    REGULARISATION,
    Activation,
    Architecture,
    Classifier,
    ImageSize,
    ModelConfig,
    Posemb,
    ResNetConfig,
    image_size_of,
    size_hw,
)
from .overrides import parse_set, replace
from .run import RunConfig
from .train import (
    Device,
    Objective,
    OptimConfig,
    Optimizer,
    Parallel,
    Precision,
    Schedule,
    TrainConfig,
    parse_duration,
)

__all__ = [
    "DATA_SPECS",
    "FINETUNE_KEYS",
    "REGULARISATION",
    "Activation",
    "Architecture",
    "Classifier",
    "ConfigError",
    "DataConfig",
    "DataSource",
    "Device",
    "ImageSize",
    "ModelConfig",
    "Objective",
    "OptimConfig",
    "Optimizer",
    "Parallel",
    "Posemb",
    "Precision",
    "ResNetConfig",
    "RunConfig",
    "Schedule",
    "TrainConfig",
    "Validation",
    "data_name",
    "data_names",
    "data_source",
    "from_dict",
    "hf_is_local",
    "image_size_of",
    "normalise_data",
    "parse_duration",
    "parse_set",
    "replace",
    "size_hw",
    "to_dict",
]
