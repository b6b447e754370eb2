"""What a run says when it starts: its data and splits, model, device and precision, schedule
and directory, and whether it starts, resumes or is already finished."""

from __future__ import annotations

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


def banner(
    run: RunConfig,
    data: RunData,
    model: Any,
    *,
    device: torch.device,
    cadence: Cadence,
    run_dir: Path,
    step: int,
) -> list[str]:
    """The lines a run logs at its start (``step``: the step it resumes from, 0 if new)."""
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
    threads = f", {torch.get_num_threads()} threads" if device.type == "cpu" else ""
    compiled = ", compiled" if tc.compile else ""
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
        f"warmup {cadence.warmup_steps} steps, {run.optim.schedule} decay; evaluation every "
        f"{cadence.eval_every} steps"
    )
    if step == 0:
        state = "new run"
    elif step >= cadence.total_steps:
        state = f"already finished (step {step:,}): re-evaluating"
    else:
        state = f"resuming from step {step:,} of {cadence.total_steps:,}"
    lines.append(f"run dir  {run_dir}: {state}")
    return lines
