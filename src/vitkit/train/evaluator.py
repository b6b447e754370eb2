"""The run's evaluations: the validation split on the eval cadence, keeping the best weights in
``best/``, and the test split apart from it once at the end with those weights (train/loop.py).

An evaluation is the accuracy (top-1, top-5, with ``data.test_flip`` its mirror images too) of a
classifier, or for masked patch prediction the colour accuracy of the same chosen patches every
time; with ``train.fewshot`` the few-shot accuracy of the run's own data [P §4.1], and of each of
``train.fewshot_data``. Under torchrun each process evaluates its part of every batch and the
sums are added up, so every process holds the same result (and the same ``best``); few-shot runs
whole in every process. Rank 0 alone writes ``best/``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config import RunConfig
from ..data import Batches
from ..data.run_data import Images
from ..eval.metrics import Evaluation
from ..io.metadata import WeightsMeta
from ..model import ResNetClassifier, VisionTransformer, build_model
from . import distributed
from .inputs import Inputs
from .objectives import evaluate_mpp
from .parts import Parts
from .precision import autocast_dtype
from .state import save_best

log = logging.getLogger(__name__)

Classifier = VisionTransformer | ResNetClassifier


class Evaluator:
    """Evaluates a model of the run on a split's batches, and keeps the best weights.

    From the run's ``parts``: the training step's module (an FSDP-sharded model is gathered
    while it is called outside it) and masked patch prediction's objective; from its
    ``inputs``: the classes, the images few-shot evaluation draws its shots from, and
    ``train.fewshot_data``'s. ``meta``: what ``best/`` is written with; ``best``: the best
    accuracy so far (a resumed run's, else -1)."""

    def __init__(
        self,
        run: RunConfig,
        run_dir: Path,
        parts: Parts,
        inputs: Inputs,
        meta: WeightsMeta,
        *,
        best: float = -1.0,
    ) -> None:
        self.run, self.run_dir, self.objective, self.mpp = run, run_dir, parts.objective, parts.mpp
        self.num_classes = len(inputs.data.classes)
        self.autocast = autocast_dtype(run.train.precision)
        self.train_set, self.fewshot_data = inputs.data.train, inputs.fewshot_data
        self.cfg, self.meta, self.best = parts.model.cfg, meta, best

    def __call__(
        self,
        model: Classifier,
        batches: Batches,
        images: Images,
        *,
        between: Callable[[], None] | None = None,
    ) -> Evaluation:
        """``model`` on ``batches`` (of ``images``, which few-shot classifies too); ``between``:
        called between two batches of each pass, where it may raise to drop the evaluation (the
        loop's check for a stop request)."""
        from ..config.fewshot import SEEDS, SHOTS
        from ..eval.fewshot import fewshot_model
        from ..eval.metrics import between_batches, evaluate

        tc = self.run.train
        ordered = between_batches(batches.epoch(0), between)
        with distributed.unsharded(self.objective):  # the model is called outside the objective
            if self.mpp is None:
                result = evaluate(
                    model,
                    ordered,
                    self.num_classes,
                    autocast=self.autocast,
                    flip=self.run.data.test_flip,
                    reduce=distributed.all_sum,
                    gather=distributed.all_concat,
                )
            else:  # the colour accuracy of the chosen patches, the same patches every time
                result = evaluate_mpp(
                    model, self.mpp, ordered, seed=tc.seed, reduce=distributed.all_sum
                )
            fewshot: dict[int, dict[str, Any]] = {}
            if tc.fewshot:  # whole in every process: small, and the same forward passes in all
                fewshot = fewshot_model(
                    model,
                    self.train_set,
                    images,  # the images evaluated: few-shot classifies them too
                    shots=tc.fewshot,
                    seeds=SEEDS,
                    image_size=self.run.model.image_size,
                    autocast=self.autocast,
                    between=between,
                )
            named = {  # as above
                name: fewshot_model(
                    model,
                    shots_from,
                    classified,
                    shots=tc.fewshot or SHOTS,
                    seeds=SEEDS,
                    image_size=self.run.model.image_size,
                    autocast=self.autocast,
                    between=between,
                )
                for name, (shots_from, classified) in self.fewshot_data.items()
            }
        return dataclasses.replace(result, fewshot=fewshot, fewshot_data=named)

    def keep_if_best(self, result: Evaluation, model: nn.Module) -> bool:
        """Save ``model`` to ``best/`` when ``result`` is the best accuracy yet (the same result
        in every process: all of them gather, under FSDP); whether it was."""
        if result.accuracy <= self.best:
            return False
        self.best = result.accuracy
        self.save_best(model)
        return True

    def save_best(self, model: nn.Module) -> None:
        """``model``'s weights to ``best/`` (every process gathers, rank 0 writes)."""
        weights = distributed.model_state(model)
        if distributed.is_main():
            save_best(self.run_dir, self.cfg, weights, self.meta)

    def best_model(self, device: torch.device) -> Classifier:
        """The weights in ``best/`` (every process reads them once rank 0 has written them)."""
        from ..io.checkpoint import load_state_dict_strict, read_ours

        distributed.barrier()
        _, weights, _ = read_ours(self.run_dir / "best", own_run=True)
        model = build_model(self.run.model)
        load_state_dict_strict(model, weights, source=str(self.run_dir / "best"))
        return model.to(device).eval()
