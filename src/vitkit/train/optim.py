"""Optimizers and learning-rate schedules [P §4.1, Table 3, App. B.1; vit_jax hyper.py].

Pre-training: Adam (β1 0.9, β2 0.999) with decoupled weight decay (AdamW: big_vision applies
``wd`` times the schedule, to kernels only) — never on biases, norms, position embedding or class
token. Fine-tuning: SGD with momentum 0.9 and no weight decay. Both with a linear warmup, then
cosine or linear decay (vit_jax's linear decay ends at ``linear_end=1e-5``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..config import OptimConfig


def param_groups(weight_decay: float, *modules: nn.Module) -> list[dict]:
    """Two groups: weights that decay, and the model's ``no_weight_decay()`` names that do not.
    Further modules (an objective's own parameters) follow the same rule, or decay their >= 2-D
    tensors when they name none."""
    decay, no_decay = [], []
    for module in modules:
        skip = (
            module.no_weight_decay()
            if hasattr(module, "no_weight_decay")
            else {n for n, p in module.named_parameters() if p.ndim <= 1}
        )
        for name, p in module.named_parameters():
            if p.requires_grad:
                (no_decay if name in skip else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, objective: nn.Module | None = None
) -> torch.optim.Optimizer:
    """The optimizer over the model's parameters, then the objective's (masked patch prediction
    owns a mask embedding and a head)."""
    groups = param_groups(cfg.weight_decay, model, *([objective] if objective is not None else []))
    if cfg.name == "adam":
        # one fused kernel for the whole update (the same formula, ~5% of a small model's step
        # saved on CPU); FSDP's sharded parameters (DTensor) take the default implementation
        params = [p for group in groups for p in group["params"]]
        fused = all(type(p) is nn.Parameter for p in params) or None
        return torch.optim.AdamW(
            groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=1e-8, fused=fused
        )
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)


def learning_rate(step: int, *, cfg: OptimConfig, total_steps: int, warmup_steps: int) -> float:
    """The learning rate at optimizer step ``step`` (0-based): warmup, then decay to ``end_lr``.

    Warmup is multiplicative, lr * min(1, (step + 1) / warmup), as vit_jax's ``hyper.py``.
    """
    if warmup_steps and step < warmup_steps:
        return cfg.lr * (step + 1) / warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    if cfg.schedule == "linear":
        shape = 1.0 - progress
    else:
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.end_lr + (cfg.lr - cfg.end_lr) * shape


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
