"""Weights in and out: our format, and the formats people already have (io/formats).

``load`` and ``save`` are imported when first asked for: what only lists or downloads weights
(``vitkit pretrained``, ``io.download``) starts without importing torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import CheckpointError

if TYPE_CHECKING:
    from .api import load, save

__all__ = ["CheckpointError", "load", "save"]


def __getattr__(name: str) -> Any:
    if name in ("load", "save"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
