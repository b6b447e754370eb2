"""What a run says when it starts: its data and splits, model, device and precision, schedule,
the training tools that are on, and directory, and whether it starts, resumes or is already
finished."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..config import RunConfig
from ..data.run_data import RunData
from .cadence import Cadence


def _model_line(run: RunConfig, model: Any) -> str:
    cfg = run.model
    h, w = cfg.image_hw
    size = f"{h}x{w} px, {cfg.in_chans} channel{'s' if cfg.in_chans > 1 else ''}"
    if cfg.arch == "resnet":
        return f"ResNet baseline: {model.num_params():,} parameters, {size}"
    gh, gw = cfg.grid
    kind = "hybrid ViT" if cfg.resnet is not None else "ViT"
    return (
        f"{kind}: {model.num_params():,} parameters, {size}, patch {cfg.patch_size} "
        f"({gh}x{gw} tokens), width {cfg.hidden_size}, {cfg.num_layers} layers, "
        f"{cfg.num_heads} heads, {cfg.classifier} pooling, {cfg.num_classes} classes"
    )


# The training tools a run may turn on, each with the words the banner says when it is on
# (``None``: off). A new tool is one more entry.
TOOLS: tuple[Callable[[RunConfig], str | None], ...] = (
    lambda r: f"layer decay {r.optim.layer_decay:g}" if r.optim.layer_decay is not None else None,
    lambda r: f"weight decay {r.optim.weight_decay:g}" if r.optim.weight_decay else None,
    lambda r: f"gradient clipping {r.optim.grad_clip:g}" if r.optim.grad_clip else None,
    lambda r: f"mixup {r.train.mixup:g}" if r.train.mixup else None,
    lambda r: f"CutMix {r.train.cutmix:g}" if r.train.cutmix else None,
    lambda r: (
        f"mixup/CutMix switch {r.train.mixup_switch_prob:g}"
        if r.train.mixup and r.train.cutmix
        else None
    ),
    lambda r: (
        f"mixing probability {r.train.mixup_prob:g}"
        if (r.train.mixup or r.train.cutmix) and r.train.mixup_prob < 1
        else None
    ),
    lambda r: (
        f"random erasing {r.data.random_erase:g} (up to {r.data.random_erase_count})"
        if r.data.random_erase
        else None
    ),
    lambda r: f"label smoothing {r.train.label_smoothing:g}" if r.train.label_smoothing else None,
    lambda r: (
        f"EMA {r.train.ema:g}"
        + ("" if r.train.ema_warmup == "tf" else f" (warmup {r.train.ema_warmup})")
        if r.train.ema is not None
        else None
    ),
    lambda r: f"repeated augmentation x{r.data.aug_repeats}" if r.data.aug_repeats > 1 else None,
    lambda r: "RandAugment(2, 10)" if r.data.rand_augment else None,
    lambda r: f"augmentation policy {r.data.auto_augment}" if r.data.auto_augment else None,
    lambda r: "inception crops" if r.data.inception_crop else None,
    lambda r: f"random crops (padding {r.data.crop_padding})" if r.data.crop_padding else None,
    lambda r: "flips" if r.data.flip else None,
    lambda r: f"dropout {r.model.dropout_rate:g}" if r.model.dropout_rate else None,
    lambda r: (
        f"attention dropout {r.model.attention_dropout_rate:g}"
        if r.model.attention_dropout_rate
        else None
    ),
    lambda r: f"stochastic depth {r.model.drop_path_rate:g}" if r.model.drop_path_rate else None,
)


def tools_on(run: RunConfig) -> list[str]:
    """The training tools ``run`` turns on (regularisation, augmentation, averaging, layer-wise
    decay), in ``TOOLS``' order, as the banner names them."""
    return [said for tool in TOOLS if (said := tool(run)) is not None]


def banner(
    run: RunConfig,
    data: RunData,
    model: Any,
    *,
    device: torch.device,
    cadence: Cadence,
    run_dir: Path,
    step: int,
    precision_why: str | None = None,
) -> list[str]:
    """The lines a run logs at its start (``step``: the step it resumes from, 0 if new;
    ``precision_why``: why the precision is what it is, where vitkit decided it: ``vitkit.fit``)."""
    tc = run.train
    splits = f"{len(data.train):,} training images; validation: {data.val_name}; "
    splits += f"test: {data.test_name}" if data.test_name else "no test split"
    lines = [f"data     {run.data.dataset}: {splits}; {len(data.classes)} classes"]
    lines += [f"         {note}" for note in data.notes]
    if data.skipped:
        lines.append(
            f"         {len(data.skipped)} unreadable image(s) skipped, listed in "
            f"{run_dir / 'skipped_images.txt'}"
        )
    lines.append(f"model    {_model_line(run, model)}")
    precision = {"bf16": "bf16 autocast", "fp16": "fp16 autocast, gradient scaling"}.get(
        tc.precision, tc.precision
    )
    if device.type == "cuda" and tc.precision != "fp32":
        precision += ", TF32 matmuls"
    if precision_why is not None:
        precision += f" ({precision_why})"
    threads = f", {torch.get_num_threads()} threads" if device.type == "cpu" else ""
    compiled = ", compiled" if tc.compiled else ""
    workers = run.data.num_workers
    decoding = "" if workers is None else f", {workers} decoding workers"
    lines.append(f"device   {device}, {precision}{threads}{compiled}{decoding}")
    batch = tc.batch_size * tc.accum_steps
    accumulation = (
        f" ({tc.batch_size} x {tc.accum_steps} accumulation)" if tc.accum_steps > 1 else ""
    )
    epochs = cadence.total_steps / cadence.steps_per_epoch
    lines.append(
        f"schedule {cadence.total_steps:,} steps of {batch} images{accumulation}: {epochs:.1f} "
        f"epochs of {cadence.steps_per_epoch} steps; {run.optim.name} lr {run.optim.lr:g}, "
        f"warmup {cadence.warmup_steps} steps, {run.optim.schedule} decay; "
        + (
            f"evaluation every {cadence.eval_every} steps"
            if cadence.eval_every
            else "evaluation at the end"  # train.eval_every=0st ("every 0 steps")
        )
    )
    lines.append(f"tools    {', '.join(tools_on(run)) or 'none'}")
    if step == 0:
        state = "new run"
    elif step >= cadence.total_steps:
        state = f"already finished (step {step:,}): re-evaluating"
    else:
        state = f"resuming from step {step:,} of {cadence.total_steps:,}"
    lines.append(f"run dir  {run_dir}: {state}")
    return lines
