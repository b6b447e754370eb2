"""The ``openvino`` extra, looked up and imported for the parts that use it (the inference engine,
``vitkit export --openvino``), set up to run under the ``vitkit`` command's preloaded jemalloc."""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

from ..errors import MissingExtraError


def openvino_version() -> str | None:
    """The installed openvino's version, or None where it is not installed (nothing imported)."""
    try:
        return importlib.metadata.version("openvino")
    except importlib.metadata.PackageNotFoundError:
        return None


def require_openvino() -> Any:
    """The ``openvino`` module, imported so that it runs under the ``vitkit`` command's jemalloc;
    a ``MissingExtraError`` naming the extra when it is not installed."""
    # oneTBB, OpenVINO's threading, dlopens its hwloc binding with RTLD_DEEPBIND, which binds
    # hwloc to glibc's free() while glibc hands it jemalloc's memory: "munmap_chunk(): invalid
    # pointer" under a preloaded allocator (oneTBB issue 1636). This variable drops DEEPBIND.
    os.environ.setdefault("TBB_ENABLE_SANITIZERS", "1")
    try:
        import openvino
    except ImportError:
        raise MissingExtraError("the openvino engine", "openvino", "openvino") from None
    return openvino
