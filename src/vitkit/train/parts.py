"""The parts of a run that train and are checkpointed: the model (fresh, or pre-trained weights
with a new head [P App. B.1.1]), masked patch prediction's head, the EMA of the weights, the
objective, its DDP or FSDP wrapper under torchrun, the optimizer and fp16's gradient scaler; and
which checkpoint a run resumes from, whose state they are loaded with.

The model is built on the CPU then moved, so its initial weights are the same on every device;
the optimizer is built after FSDP replaced the parameters. What is evaluated and kept as best is
the EMA when there is one, else the model.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ..config import FINETUNE_KEYS, RunConfig
from ..config.train import EmaWarmup
from ..model import ResNetClassifier, VisionTransformer, build_model
from . import distributed, precision
from .mixing import Mixing
from .objectives import MaskedPatchPrediction, Objective
from .optim import build_optimizer
from .state import LiveRun, RunRecord, TrainState, load_checkpoint, training_checkpoint

log = logging.getLogger(__name__)


@dataclass
class Parts:
    """A run's training objects (``build_parts``)."""

    model: VisionTransformer | ResNetClassifier
    mpp: MaskedPatchPrediction | None
    ema: VisionTransformer | ResNetClassifier | None
    objective: Objective
    step_fn: nn.Module  # what a training step calls: the objective, or its DDP/FSDP wrapper
    live: LiveRun  # the optimizer and scaler among what a checkpoint keeps
    average: Average | None  # updates ``ema`` after each step
    trained: list[nn.Parameter]  # what gradient clipping sees: the objective's parameters

    @property
    def averaged(self) -> VisionTransformer | ResNetClassifier:
        """What is evaluated and kept as best."""
        return self.ema if self.ema is not None else self.model

    def resume(self, checkpoint: Path) -> TrainState:
        """Load ``checkpoint``'s weights and state into the parts; its training state."""
        weights, state = load_checkpoint(checkpoint, self.model.cfg)
        distributed.load_model_state(self.model, weights)
        state.restore(self.live)
        return state


def build_parts(
    run: RunConfig, device: torch.device, *, autocast: torch.dtype | None, pretrained: bool
) -> Parts:
    """The parts of ``run`` (its precision resolved for ``device``) on ``device``;
    ``pretrained``: start from ``run.init_from`` (a run that resumes does not)."""
    tc = run.train
    # built on the CPU, then moved: the initial weights are the same on every device
    model = init_from_pretrained(run) if pretrained else build_model(run.model)
    model.to(device)
    mpp = MaskedPatchPrediction(run.model).to(device) if tc.objective == "mpp" else None
    ema = copy.deepcopy(model).eval() if tc.ema else None
    if tc.activation_checkpointing:
        assert isinstance(model, VisionTransformer)  # RunConfig: a ViT's option only
        distributed.checkpoint_blocks(model.blocks)
    if tc.compiled:
        # Dynamo keeps compiled graphs per function, not per model: the runs before this one in
        # the process (a sweep's, a notebook's) would count against its limit of 8 graphs for
        # the ViT's forward (each head size is one), after which the forward runs eagerly
        torch.compiler.reset()
    objective = Objective(
        model,
        mpp,
        label_smoothing=tc.label_smoothing,
        mixing=Mixing(tc.mixup, tc.cutmix, tc.mixup_switch_prob, tc.mixup_prob),
        # dynamic off: one static graph per shape (training batch, evaluation batch), each
        # planned for its shape. A second shape of the same forward (another run in the process:
        # a sweep, the tests) would otherwise recompile it with symbolic sizes, which Inductor's
        # Triton tiling of torch 2.11 failed an assertion on (H200, second lease)
        forward_fn=torch.compile(model, dynamic=False) if tc.compiled else None,
    )
    step_fn: nn.Module = objective
    if distributed.is_distributed():
        blocks = getattr(model, "blocks", ())  # a ResNet is sharded as one unit
        step_fn = distributed.parallelize(
            objective, blocks, parallel=tc.parallel, dtype=autocast, find_unused=mpp is not None
        )
        if ema is not None and tc.parallel == "fsdp":  # sharded like the model: the average
            distributed.shard(ema, getattr(ema, "blocks", ()), dtype=autocast)  # is shard-local
    optimizer = build_optimizer(model, run.optim, mpp)  # after FSDP replaced the parameters
    sharded = distributed.is_distributed() and tc.parallel == "fsdp"
    average = (
        Average(ema, model, tc.ema, warmup=tc.ema_warmup, fixed=not sharded)
        if ema is not None and tc.ema
        else None
    )
    scaler = precision.scaler(tc.precision, device)  # fp16's gradient scaler, else None
    live = LiveRun(
        objective=objective, optimizer=optimizer, ema=ema, mpp=mpp, device=device, scaler=scaler
    )
    trained = list(objective.parameters())
    return Parts(model, mpp, ema, objective, step_fn, live, average, trained)


def checkpoint_to_resume(record: RunRecord, run: RunConfig) -> Path | None:
    """The checkpoint the run ``run`` resumes from (``record.checkpoint``): its directory's
    newest, else ``--resume``'s; either must be a checkpoint this run can continue
    (``training_checkpoint``: one copied into the directory from another run is refused as
    ``--resume``'s is); None: a new run."""
    if record.resume_from is not None and record.last is not None:
        log.info(
            f"--resume {record.resume_from} not used: {record.run_dir} holds checkpoints of its own"
        )
    chosen = record.checkpoint
    return None if chosen is None else training_checkpoint(chosen, run.to_dict())


# timm's ModelEmaV3 warmup (use_warmup=True): its defaults warmup_gamma=1, warmup_power=2/3,
# min_decay=0, update_after_step=0
TIMM_GAMMA, TIMM_POWER = 1.0, 2 / 3


def ema_decay(warmup: EmaWarmup, decay: float, step: int) -> float:
    """The EMA's decay at the update after optimizer step ``step`` (0 for the first), by
    ``warmup`` (train.ema_warmup): tf, min(decay, (1 + step) / (10 + step)) (TensorFlow's
    ``num_updates`` rule); timm, ``ModelEmaV3.get_decay(step + 1)`` with use_warmup (0 at the first
    update, which copies the weights, then min(decay, 1 - (1 + step / gamma) ** -power)); none,
    ``decay`` throughout (Polyak averaging from the initial weights, as timm's ModelEmaV2)."""
    if warmup == "tf":
        return min(decay, (1 + step) / (10 + step))
    if warmup == "timm":
        return 0.0 if step <= 0 else min(decay, 1 - (1 + step / TIMM_GAMMA) ** -TIMM_POWER)
    return decay


class Average:
    """Polyak averaging of ``model``'s floating-point weights into ``ema``, one fused update per
    step (5x cheaper than tensor by tensor: 1 against 6 ms a step for the Fashion-MNIST ViT); the
    decay ramps up by ``warmup`` (``ema_decay``; by default (1 + step) / (10 + step), TensorFlow's
    ``num_updates`` rule), so early averages are not dominated by the random initial weights.
    Under FSDP the tensors are looked up at every step (its parameters are re-registered as they
    are sharded and gathered)."""

    def __init__(
        self,
        ema: nn.Module,
        model: nn.Module,
        decay: float,
        *,
        warmup: EmaWarmup = "tf",
        fixed: bool,
    ) -> None:
        self.ema, self.model, self.decay, self.warmup = ema, model, decay, warmup
        self.tensors = self._tensors() if fixed else None

    def _tensors(self) -> tuple[list[Tensor], list[Tensor]]:
        pairs = zip(self.ema.state_dict().values(), self.model.state_dict().values(), strict=True)
        floats = [(e, p) for e, p in pairs if e.dtype.is_floating_point]
        return [e for e, _ in floats], [p.detach() for _, p in floats]

    @torch.no_grad()
    def update(self, step: int) -> None:
        decay = ema_decay(self.warmup, self.decay, step)
        averages, weights = self.tensors or self._tensors()
        torch._foreach_lerp_(averages, weights, 1 - decay)  # e += (1 - decay) (w - e)


def init_from_pretrained(run: RunConfig) -> VisionTransformer | ResNetClassifier:
    """Pre-trained weights for fine-tuning [P App. B.1.1]: drop the whole head (pre-logits too),
    attach a zero-initialised one, and 2D-interpolate the position embeddings to the new grid
    (``io.adapt``, with ``run.model``'s ``FINETUNE_KEYS``); what was loaded and changed is
    logged."""
    from ..io.adapt import adapt_pretrained
    from ..io.api import load

    assert run.init_from is not None
    model = load(run.init_from, num_heads=run.model.num_heads, posemb=run.model.posemb)
    before = model.cfg
    h, w = before.image_hw
    log.info(
        f"init     {run.init_from}: {model.num_params():,} pre-trained parameters, {h}x{w} px, "
        f"{before.num_classes} classes"
    )
    changes = {k: getattr(run.model, k) for k in FINETUNE_KEYS}
    model = adapt_pretrained(model, changes, source=run.init_from)
    if isinstance(model, VisionTransformer) and before.image_hw != run.model.image_hw:
        (gh, gw), (nh, nw) = before.grid, run.model.grid
        log.info(
            f"         position embeddings {gh}x{gw} -> {nh}x{nw} (2D interpolation, corners "
            f"aligned) for {run.model.image_hw[0]}x{run.model.image_hw[1]} px"
        )
    dropped = "; pre-logits dropped" if before.representation_size is not None else ""
    log.info(
        f"         head replaced for {run.model.num_classes} classes, zero-initialised{dropped}"
    )
    return model
