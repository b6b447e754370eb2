"""Optimizers and learning-rate schedules [P §4.1, Table 3, App. B.1; vit_jax hyper.py].

Pre-training: Adam (β1 0.9, β2 0.999) with decoupled weight decay (AdamW: big_vision applies
``wd`` times the schedule, to kernels only) — never on biases, norms, position embedding or class
token. Fine-tuning: SGD with momentum 0.9 and no weight decay. Both with a linear warmup, then
cosine or linear decay (vit_jax's linear decay ends at ``linear_end=1e-5``). Layer-wise decay
(``optim.layer_decay``, BEiT/MAE fine-tuning, not in the paper): one group per layer and decay,
each group's lr the schedule's times its ``lr_scale``, layers counted as timm counts them.

Not in the paper: Muon (Jordan et al. 2024; ``torch.optim.Muon``), momentum updates made
orthogonal by Newton–Schulz iterations, for the transformer blocks' weight matrices, with AdamW
for everything else; its update is scaled to AdamW's size (Moonshot's rule), so the same learning
rate and weight decay serve both. The Fashion-MNIST speed recipe uses it (benchmarks/RESULTS.md).
``Muon`` below is that optimizer with its Newton–Schulz iterations batched over same-shaped
matrices.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

import torch
from torch import nn

from ..config import OptimConfig
from ..errors import CheckpointError, ConfigError


@dataclass(frozen=True)
class ParamSetting:
    """How the optimizer treats one trained parameter: its weight decay, and under layer-wise
    decay its layer and learning-rate multiplier (``layer`` None and ``lr_scale`` 1: off)."""

    name: str
    param: nn.Parameter
    decays: bool
    weight_decay: float
    layer: int | None
    lr_scale: float


# timm's ViT group_matcher: the stem (the embedding: a hybrid's whole ResNet is patch_embed's)
_EMBEDDING = re.compile(r"cls_token|reg_token|pos_embed|patch_embed|norm_pre")
_BLOCK = re.compile(r"blocks\.(\d+)\.")


def layer_of(name: str, num_layers: int) -> int:
    """The layer of a ViT parameter named as timm names it, as timm's ``param_groups_layer_decay``
    counts: 0 the embedding (class token, position embedding, patch embedding and a hybrid's
    ResNet; register tokens would be too), block i i+1, everything else (the head, pre-logits, a
    MAP head) L+1, except the final norm (``norm``), which timm puts with the last block (L; MAE
    and BEiT put it at L+1)."""
    if _EMBEDDING.match(name):
        return 0
    if block := _BLOCK.match(name):
        return int(block.group(1)) + 1
    return num_layers if name.startswith("norm.") else num_layers + 1


def param_settings(cfg: OptimConfig, model: nn.Module, *others: nn.Module) -> list[ParamSetting]:
    """Every trained parameter (``requires_grad``; frozen ones have none) of ``model`` then of
    ``others`` (an objective's own, named ``objective.NAME``): weight decay except on the
    module's ``no_weight_decay()`` names (or its <= 1-D tensors when it names none); with
    ``optim.layer_decay`` d, the lr multiplier d^(L+1-layer) (``layer_of``; an objective's mask
    embedding is layer 0, as BEiT's mask token, the rest of it L+1)."""
    decay = cfg.layer_decay
    blocks = getattr(model, "blocks", None)
    if decay is not None and not blocks:
        raise ConfigError(
            f"optim.layer_decay={decay} needs a ViT's transformer blocks, found none in "
            f"{type(model).__name__}: set optim.layer_decay=none"
        )
    top = len(blocks) + 1 if blocks else 0  # L+1, the head's layer
    settings = []
    for i, module in enumerate((model, *others)):
        no_weight_decay = getattr(module, "no_weight_decay", None)
        skip = (
            no_weight_decay()
            if no_weight_decay is not None
            else {n for n, p in module.named_parameters() if p.ndim <= 1}
        )
        for name, p in module.named_parameters():
            if not p.requires_grad:
                continue
            layer = None
            if decay is not None:
                own = 0 if name == "mask_token" else top
                layer = layer_of(name, top - 1) if i == 0 else own
            settings.append(
                ParamSetting(
                    name=name if i == 0 else f"objective.{name}",
                    param=p,
                    decays=name not in skip,
                    weight_decay=0.0 if name in skip else cfg.weight_decay,
                    layer=layer,
                    lr_scale=1.0 if decay is None or layer is None else decay ** (top - layer),
                )
            )
    return settings


def param_groups(settings: list[ParamSetting], cfg: OptimConfig) -> list[dict]:
    """The optimizer's parameter groups: without layer decay two, the parameters that decay and
    those that do not (what every checkpoint before layer decay holds); with it one per layer and
    decay, in the order of their first parameter (timm's), each with its ``lr_scale``, which
    ``set_learning_rate`` multiplies the schedule's learning rate by."""
    if cfg.layer_decay is None:
        return [
            {"params": [s.param for s in settings if s.decays], "weight_decay": cfg.weight_decay},
            {"params": [s.param for s in settings if not s.decays], "weight_decay": 0.0},
        ]
    groups: dict[tuple[int | None, bool], dict[str, Any]] = {}
    for s in settings:
        group = groups.setdefault(
            (s.layer, s.decays),
            {
                "params": [],
                "weight_decay": s.weight_decay,
                "lr_scale": s.lr_scale,
                "lr": cfg.lr * s.lr_scale,
            },
        )
        group["params"].append(s.param)
    return list(groups.values())


class Muon(torch.optim.Muon):
    """``torch.optim.Muon`` (Nesterov momentum, 5 quintic Newton–Schulz iterations in bf16, the
    update scaled by 0.2·√max(rows, columns) to AdamW's size), with the iterations of all matrices
    of one shape done as one batch: a transformer has four shapes (qkv, attention output, the
    MLP's two), so 4 batched products replace 24 small ones per iteration. The same update, state
    and hyperparameters as ``torch.optim.Muon`` with ``adjust_lr_fn="match_rms_adamw"``; its
    checkpoints load either way. 1.10x the Fashion-MNIST ViT's training step on 2 CPU cores
    (benchmarks/RESULTS.md)."""

    def __init__(self, params: Any, *, lr: float, momentum: float, weight_decay: float):
        super().__init__(
            params,
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            adjust_lr_fn="match_rms_adamw",
        )

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        if closure is not None:
            raise ConfigError("vitkit's Muon takes no closure")
        for group in self.param_groups:
            if group["adjust_lr_fn"] != "match_rms_adamw":
                raise CheckpointError(
                    f"Muon's adjust_lr_fn is {group['adjust_lr_fn']!r}: vitkit's batched Muon "
                    "implements 'match_rms_adamw' only"
                )
            lr, momentum = group["lr"], group["momentum"]
            by_shape: dict[tuple[int, ...], list[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is not None:
                    by_shape.setdefault(tuple(p.shape), []).append(p)
            for shape, params in by_shape.items():
                grads = [p.grad for p in params if p.grad is not None]  # all: by_shape has no other
                buffers = []
                for p, grad in zip(params, grads, strict=True):
                    if "momentum_buffer" not in self.state[p]:
                        self.state[p]["momentum_buffer"] = torch.zeros_like(grad)
                    buffers.append(self.state[p]["momentum_buffer"])
                torch._foreach_lerp_(buffers, grads, 1 - momentum)
                update = torch.stack(buffers)  # (N, rows, columns)
                if group["nesterov"]:
                    update = torch.stack(grads).lerp_(update, momentum)
                update = orthogonalize(
                    update, group["ns_coefficients"], group["ns_steps"], group["eps"]
                ).to(params[0].dtype)
                torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
                scale = 0.2 * math.sqrt(max(shape))  # Moonshot's rule: AdamW's update size
                torch._foreach_add_(params, list(update.unbind(0)), alpha=-lr * scale)
        return None


def orthogonalize(
    g: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float
) -> torch.Tensor:
    """Muon's Newton–Schulz iteration X <- aX + (bA + cA²)X, A = XXᵀ, on a batch of matrices
    (N, rows, columns) in bf16, each first divided by its Frobenius norm; the wide orientation, so
    A is the smaller square. Approximately U·Vᵀ of each matrix's SVD U·S·Vᵀ (the quintic's
    coefficients trade exactness for speed: the singular values of random matrices end in about
    [0.7, 1.2] here)."""
    a, b, c = coefficients
    x = g.bfloat16()
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.mT  # (N, r, r), r = min(rows, columns)
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


class MuonWithAdamW:
    """Muon for some parameter groups, AdamW for the others, as one optimizer: ``param_groups``
    is both optimizers' groups (Muon's first; setting a group's ``lr`` sets it in its optimizer),
    and ``state_dict`` numbers the parameters across both in that order, the format of a single
    ``torch.optim.Optimizer`` and of ``get_optimizer_state_dict`` over ``optimizers``."""

    def __init__(self, muon: Muon, adamw: torch.optim.AdamW) -> None:
        self.optimizers = (muon, adamw)

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # looked up each time: loading replaces them
        return [g for o in self.optimizers for g in o.param_groups]

    def step(self) -> None:
        for optimizer in self.optimizers:
            optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        state, groups, offset = {}, [], 0
        for optimizer in self.optimizers:
            part = optimizer.state_dict()
            state.update({offset + i: s for i, s in part["state"].items()})
            groups += [
                {**g, "params": [offset + i for i in g["params"]]} for g in part["param_groups"]
            ]
            offset += sum(len(g["params"]) for g in part["param_groups"])
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups, offset = list(state_dict["param_groups"]), 0
        if len(groups) != len(self.param_groups):
            raise CheckpointError(
                f"the optimizer state has {len(groups)} parameter groups, Muon with AdamW has "
                f"{len(self.param_groups)}: it was written by another optimizer (optim.name)"
            )
        for optimizer in self.optimizers:
            mine, groups = (
                groups[: len(optimizer.param_groups)],
                groups[len(optimizer.param_groups) :],
            )
            ids = [i for g in mine for i in g["params"]]
            renumber = {i: i - offset for i in ids}
            optimizer.load_state_dict(
                {
                    "state": {
                        renumber[i]: s for i, s in state_dict["state"].items() if i in renumber
                    },
                    "param_groups": [
                        {**g, "params": [renumber[i] for i in g["params"]]} for g in mine
                    ],
                }
            )
            offset += len(ids)


def muon_matrices(model: nn.Module) -> set[int]:
    """The ids of the parameters Muon updates: the transformer blocks' weight matrices (attention
    q/k/v and output, the MLP's two layers); embeddings, head, norms and biases stay with AdamW."""
    return {id(p) for n, p in model.named_parameters() if n.startswith("blocks.") and p.ndim == 2}


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, objective: nn.Module | None = None
) -> torch.optim.Optimizer | MuonWithAdamW:
    """The optimizer over the model's parameters, then the objective's (masked patch prediction
    owns a mask embedding and a head)."""
    others = [objective] if objective is not None else []
    groups = param_groups(param_settings(cfg, model, *others), cfg)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    muon_groups: list[dict] = []
    if cfg.name == "muon":
        matrices = muon_matrices(model)
        if not matrices:
            raise ConfigError(
                "optim.name='muon' found no transformer weight matrices in the model "
                f"({type(model).__name__}): use 'adam'"
            )
        muon_groups = [
            {**g, "params": [p for p in g["params"] if id(p) in matrices]} for g in groups
        ]
        muon_groups = [g for g in muon_groups if g["params"]]
        groups = [
            {**g, "params": [p for p in g["params"] if id(p) not in matrices]} for g in groups
        ]
    # one fused kernel for the whole update (the same formula, ~5% of a small model's step
    # saved on CPU); FSDP's sharded parameters (DTensor) take the default implementation
    params = [p for group in groups for p in group["params"]]
    fused = all(type(p) is nn.Parameter for p in params) or None
    adamw = torch.optim.AdamW(
        groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=1e-8, fused=fused
    )
    if not muon_groups:
        return adamw
    muon = Muon(muon_groups, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return MuonWithAdamW(muon, adamw)


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


def set_learning_rate(optimizer: torch.optim.Optimizer | MuonWithAdamW, lr: float) -> None:
    """Each group's learning rate: ``lr`` times its layer-wise multiplier (``lr_scale``; none
    without layer decay), whatever the schedule, in Muon's groups as in AdamW's."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
