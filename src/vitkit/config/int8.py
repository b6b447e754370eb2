"""int8 inference's settings and defaults, declared here, without torch, for ``eval.int8`` and
the ``--int8-*`` arguments of ``vitkit predict`` and ``vitkit eval``."""

from __future__ import annotations

CALIBRATION = 300  # training images observed to set the activations' int8 ranges
HELD_OUT = 1000  # held-out images int8 is checked on against fp32
MAX_TOP1_CHANGE = 0.5  # points of top-1 accuracy int8 may move on them before it is refused
