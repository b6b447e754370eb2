"""torchao's import, by the ``int8`` extra's parts and by transformers (which imports torchao when
it is installed: ``vitkit convert --format hf``), without the deprecation torch logs about it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

# What torch's pytree logs for each Enum subclass registered as a constant, deprecated since
# Enums are opaque values to torch.compile; torchao's ``register_as_pytree_constant`` registers
# its own (KernelPreference, ScaleCalculationMode, ...) as it is imported.
_PYTREE_LOGGER = "torch.utils._pytree"
_ENUM_DEPRECATED = "%s is an Enum subclass and is now natively supported"


def _not_torchaos_enum(record: logging.LogRecord) -> bool:
    """False for that record when the Enum is torchao's; True for any other."""
    cls = record.args[0] if isinstance(record.args, tuple) and record.args else None
    torchaos = getattr(cls, "__module__", "").startswith("torchao.")
    return not (torchaos and str(record.msg).startswith(_ENUM_DEPRECATED))


@contextmanager
def torchao_import() -> Iterator[None]:
    """A block that may import torchao, without torch's deprecation of torchao's Enum subclasses
    as pytree constants: a line on stderr for each, on every int8 command and every ``convert
    --format hf``, about torchao's code, which a vitkit user can do nothing about. Any other
    record of that logger (an Enum of another package's included) is logged as before."""
    logger = logging.getLogger(_PYTREE_LOGGER)
    logger.addFilter(_not_torchaos_enum)
    try:
        yield
    finally:
        logger.removeFilter(_not_torchaos_enum)
