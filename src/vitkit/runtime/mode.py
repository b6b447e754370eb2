"""A module's train/eval mode for the length of a block."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` in eval mode (no dropout, no drop-path) inside the block, and back in the mode
    it was in afterwards, also when the block raises."""
    training = module.training
    try:
        yield module.eval()
    finally:
        module.train(training)
