"""timm's ``VisionTransformer``: its keys are already vitkit's layout, so this is inference only.

A timm state dict does not record the number of heads (qkv is fused), the pooling or the shape of
the patch grid. The heads come from a live timm module, a ``num_heads=`` argument, or the paper's
size whose hidden size, depth and MLP width match (Ti/S/M/B/L/H) — never guessed. Pooling is the
class token when the state dict has one, attention pooling (``global_pool='map'``, big_vision's
MAP head) when it has ``attn_pool.*`` and the mean otherwise; a timm module's ``global_pool`` is
read directly. timm's MAP models apply the final ``norm`` before ``attn_pool`` (their ``fc_norm``
is off), as vitkit. The grid is a live module's ``patch_embed.grid_size`` (so non-square models
convert), else square.

Hybrid timm state dicts load too (same ``patch_embed.backbone`` names); note that vitkit computes
the hybrid with the official code's numerics (weight-standardisation eps 1e-5 added to the std,
GroupNorm eps 1e-6), which were the numerics those weights were trained with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...config import ConfigError, ModelConfig, ResNetConfig
from ...model.posemb import grid_of
from ...presets import SIZES
from ..checkpoint import CheckpointError, bounded

# timm features outside the paper's ViT (and outside vitkit's model).
_UNSUPPORTED = {
    "reg_token": "register tokens",
    "fc_norm.weight": "a norm after pooling (fc_norm=True); build timm with fc_norm=False",
    "norm_pre.weight": "a pre-encoder norm (pre_norm=True)",
    "attn_pool.q_norm.weight": "a MAP head with q/k norms (qk_norm=True)",
    "attn_pool.pos_embed": "a MAP head with its own position embedding (pos_embed='abs')",
    "dist_token": "a distillation token (DeiT)",
}


def looks_like_timm_state(keys: Any) -> bool:
    return "patch_embed.proj.weight" in set(keys)


def _heads_from_size(hidden: int, depth: int, mlp: int) -> int | None:
    for size in SIZES.values():
        if (size.hidden_size, size.num_layers, size.mlp_dim) == (hidden, depth, mlp):
            return size.num_heads
    return None


def _resnet_config(state: Mapping[str, Tensor]) -> ResNetConfig | None:
    prefix = "patch_embed.backbone."
    if f"{prefix}stem.conv.weight" not in state:
        return None
    units: dict[int, set[int]] = {}
    for key in state:
        m = re.match(rf"{re.escape(prefix)}stages\.(\d+)\.blocks\.(\d+)\.", key)
        if m:
            units.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    width = state[f"{prefix}stem.conv.weight"].shape[0]  # (W, C, 7, 7)
    try:
        return ResNetConfig.from_width(tuple(len(units[s]) for s in sorted(units)), width)
    except ConfigError as e:
        raise CheckpointError(f"hybrid ResNet stem with {width} channels: {e}") from None


def read_timm(
    state: Mapping[str, Tensor],
    *,
    num_heads: int | None = None,
    classifier: str | None = None,
    act: str = "gelu",
    layer_norm_eps: float = 1e-6,
    grid: tuple[int, int] | None = None,
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """Infer the ``ModelConfig`` of a timm ViT state dict; the state dict itself is unchanged.

    ``grid`` is the (gh, gw) patch grid of ``pos_embed`` when known (a live module's); without
    it the grid must be square."""
    for key, what in _UNSUPPORTED.items():
        if key in state:
            raise CheckpointError(f"this timm model uses {what}, which vitkit's ViT does not have")
    try:
        proj = state["patch_embed.proj.weight"]  # (D, C, P, P)
        depth = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("blocks."))
        mlp = state["blocks.0.mlp.fc1.weight"].shape[0]
        pos = state.get("pos_embed")
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"not a timm VisionTransformer state dict: missing {e}") from None
    hidden, in_chans, patch = proj.shape[0], proj.shape[1], proj.shape[2]
    resnet = _resnet_config(state)
    if resnet is not None:
        in_chans = state["patch_embed.backbone.stem.conv.weight"].shape[1]
    heads = num_heads or _heads_from_size(hidden, depth, mlp)
    if heads is None:
        raise CheckpointError(
            f"a timm state dict does not record the number of attention heads, and no preset has "
            f"hidden_size={hidden}, num_layers={depth}, mlp_dim={mlp}: pass num_heads=..."
        )
    has_cls = "cls_token" in state
    latent = state.get("attn_pool.latent")
    if latent is not None and has_cls:
        raise CheckpointError(
            "this state dict pools with attention (attn_pool) next to a class token: big_vision's "
            "MAP model, as vitkit's, has none (timm: class_token=False, global_pool='map')"
        )
    classifier = classifier or ("token" if has_cls else "map" if latent is not None else "gap")
    if classifier == "gap" and has_cls:
        raise CheckpointError(
            "this state dict has a class token but GAP pooling was asked for: vitkit's GAP models "
            "(as the official code's) have no class token"
        )
    if latent is not None and tuple(latent.shape) != (1, 1, hidden):
        raise CheckpointError(
            f"attn_pool.latent {tuple(latent.shape)}: expected one probe (1, 1, {hidden}), as "
            "big_vision's MAP head (timm latent_len=1)"
        )
    prefix = 1 if has_cls else 0
    if pos is None:
        raise CheckpointError("timm state dict without pos_embed: not a ViT vitkit can load")
    stride = patch * (resnet.stride if resnet else 1)
    rep = state["pre_logits.fc.weight"].shape[0] if "pre_logits.fc.weight" in state else None
    num_classes = state["head.weight"].shape[0] if "head.weight" in state else 0
    try:
        gh, gw = grid_of(
            pos.shape[1] - prefix,
            expected=grid,
            what="pos_embed",
            hint="a timm state dict does not record a non-square grid; load the timm module itself",
        )
        cfg = ModelConfig(
            image_size=(gh * stride, gw * stride),
            patch_size=patch,
            hidden_size=hidden,
            num_layers=depth,
            num_heads=heads,
            mlp_dim=mlp,
            num_classes=num_classes,
            in_chans=in_chans,
            # classifier and act are strs read from the checkpoint; ModelConfig checks their values
            classifier=classifier,  # type: ignore[arg-type]
            representation_size=rep,
            act=act,  # type: ignore[arg-type]
            layer_norm_eps=layer_norm_eps,
            resnet=resnet,
        )
        bounded(cfg)
    except ConfigError as e:
        raise CheckpointError(f"timm state dict implies an invalid model: {e}") from None
    return cfg, dict(state)


def _act(module: nn.Module) -> str:
    """vitkit's ``act`` for a timm MLP activation: torch's ``nn.GELU`` or timm's own ``GELU`` /
    ``GELUTanh`` (what ``act_layer='gelu'`` / ``'gelu_tanh'`` build, e.g. timm's SigLIP MAP
    ViTs); any other activation is not the paper's MLP and is refused."""
    from timm.layers.activations import GELU, GELUTanh

    if isinstance(module, nn.GELU):
        return "gelu_tanh" if module.approximate == "tanh" else "gelu"
    if isinstance(module, (GELU, GELUTanh)):
        return "gelu_tanh" if isinstance(module, GELUTanh) else "gelu"
    raise CheckpointError(
        f"timm MLP activation {type(module).__name__}: expected GELU (exact or tanh), the paper's"
    )


def read_timm_module(model: nn.Module) -> tuple[ModelConfig, dict[str, Tensor]]:
    """A live timm ``VisionTransformer``: heads and pooling are read from the module."""
    pool = getattr(model, "global_pool", "token")
    if pool not in ("token", "avg", "map"):
        raise CheckpointError(
            f"timm global_pool={pool!r} is not the paper's or big_vision's (token, avg or map)"
        )
    if pool == "avg" and getattr(model, "cls_token", None) is not None:
        raise CheckpointError(
            "timm model averages patch tokens next to a class token; the paper's GAP model has "
            "no class token (build timm with class_token=False, global_pool='avg', fc_norm=False)"
        )
    blocks = getattr(model, "blocks", None)
    if not blocks:
        raise CheckpointError(f"{type(model).__name__} is not a timm VisionTransformer")
    with torch.no_grad():
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    grid = getattr(getattr(model, "patch_embed", None), "grid_size", None)  # (gh, gw) or None
    return read_timm(
        state,
        num_heads=blocks[0].attn.num_heads,
        classifier={"avg": "gap", "map": "map"}.get(pool, "token"),
        act=_act(blocks[0].mlp.act),
        layer_norm_eps=float(getattr(model.norm, "eps", 1e-6)),
        grid=None if grid is None else (int(grid[0]), int(grid[1])),
    )
