"""The few-shot linear protocol's settings and defaults [P §4.1], big_vision's: the shots per
class, the random subsets averaged per shot count, the ridge strength, and the two ways of drawing
a subset and of preprocessing. Declared here, without torch, for ``eval.fewshot``, the training
loop's evaluator and ``vitkit fewshot``'s arguments."""

from __future__ import annotations

from typing import Literal, get_args

SHOTS = (1, 5, 10, 25)
SEEDS = 3
# Fixed, as big_vision fixes it (the paper does not say how λ is chosen); big_vision's
# eigendecomposition exists to sweep λ, which it does not use, so one Cholesky solve does here.
L2 = 2.0**10

Sampling = Literal["vitkit", "big_vision"]
Preprocessing = Literal["resize", "big_vision"]
SAMPLINGS: tuple[str, ...] = get_args(Sampling)
PREPROCESSINGS: tuple[str, ...] = get_args(Preprocessing)
