"""The Vision Transformer [P §3.1, Eq. 1-4; official vit_jax models_vit.py].

Shapes: B batch, C channels, P patch, (gh, gw) patch grid, N = gh * gw patches, T = prefix + N
tokens (prefix = 1 with a class token, 0 with GAP or MAP), D hidden, H heads, K classes,
R representation.

    z0 = [x_class; x_p E] + E_pos          (embed_patches, then encode)
    z_l = Block(z_{l-1}),  l = 1..L        (encode)
    y = LN(z_L)                            (encode)
    pooled = y[:, 0], mean(y) or MAP(y)    (pool; MAP: big_vision's attention pooling)
    logits = head(tanh(pre_logits(pooled)))  (forward_head; pre-logits only at pre-training)

One class serves pure and hybrid models: a hybrid's patch embedding runs a BiT ResNet first.
Parameter names follow timm's layout, so the crosswalk to other formats is a key map.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..config.dicts import check_new
from ..errors import ConfigError
from .embed import PatchEmbed
from .heads import MAPHead, PreLogits, new_head
from .layers import Block
from .posemb import grid_of, resize_grid, sincos2d

# timm's forward_intermediates features: spatial maps, or (spatial, prefix tokens) pairs
Features = list[Tensor] | list[tuple[Tensor, Tensor]]


class VisionTransformer(nn.Module):
    """ViT-{Ti,S,B,L,H}/P and R+ViT hybrids, built from a ``ModelConfig``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.arch != "vit":  # a ViT built from it would silently be another model
            raise ConfigError(
                f"model.arch={cfg.arch!r} is not a Vision Transformer: build it with "
                "vitkit.create_model (or vitkit.model.build_model)"
            )
        self.cfg = cfg
        D = cfg.hidden_size
        self.patch_embed = PatchEmbed(cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if cfg.classifier == "token" else None
        grid = cfg.grid
        self.pos_embed: Tensor | None  # a parameter, a buffer (sincos2d) or none
        if cfg.posemb == "learn":
            self.pos_embed = nn.Parameter(
                torch.zeros(1, cfg.num_prefix_tokens + grid[0] * grid[1], D)
            )
        elif cfg.posemb == "sincos2d":
            self.register_buffer("pos_embed", sincos2d(grid, D), persistent=False)  # (1, N, D)
        else:
            self.pos_embed = None
        self.pos_drop = nn.Dropout(cfg.dropout_rate)
        L = cfg.num_layers
        rates = [cfg.drop_path_rate * i / max(L - 1, 1) for i in range(L)]  # stochastic depth
        self.blocks = nn.ModuleList(
            Block(
                D,
                cfg.num_heads,
                cfg.mlp_dim,
                act=cfg.act,
                eps=cfg.layer_norm_eps,
                dropout=cfg.dropout_rate,
                attention_dropout=cfg.attention_dropout_rate,
                drop_path=rate,
            )
            for rate in rates
        )
        self.norm: nn.Module = nn.LayerNorm(D, eps=cfg.layer_norm_eps)
        self.attn_pool = (  # after the final norm, as big_vision and timm (whose fc_norm is off)
            MAPHead(D, cfg.num_heads, cfg.mlp_dim, act=cfg.act, eps=cfg.layer_norm_eps)
            if cfg.classifier == "map"
            else None
        )
        self.pool_tokens = True  # False once pruned for features (timm's global_pool='')
        self.pre_logits: PreLogits | None = None
        self.head: nn.Module = nn.Identity()
        self._build_head(cfg.num_classes, cfg.representation_size)
        if not self.norm.weight.is_meta:  # a meta model (shapes only, e.g. counting) has no values
            self.reset_parameters()

    # ---------------------------------------------------------------- construction and surgery

    def _build_head(self, num_classes: int, representation_size: int | None) -> None:
        D = self.cfg.hidden_size
        self.pre_logits = PreLogits(D, representation_size) if representation_size else None
        self.head = new_head(representation_size or D, num_classes, self.cfg.head_bias_init)

    def reset_parameters(self) -> None:
        """The official initialisation [PAPER.md A10]."""
        self.patch_embed.reset_parameters()
        if self.cls_token is not None:
            nn.init.zeros_(self.cls_token)
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.normal_(self.pos_embed, std=0.02)
        for block in self.blocks:
            assert isinstance(block, Block)
            block.reset_parameters()
        if isinstance(self.norm, nn.LayerNorm):  # not pruned (prune_norm: the identity)
            self.norm.reset_parameters()
        if self.attn_pool is not None:
            self.attn_pool.reset_parameters()
        if self.pre_logits is not None:
            self.pre_logits.reset_parameters()
        if isinstance(self.head, nn.Linear):
            nn.init.zeros_(self.head.weight)
            nn.init.constant_(self.head.bias, self.cfg.head_bias_init)

    def reset_head(self, num_classes: int, representation_size: int | None = None) -> None:
        """Fine-tuning surgery [P App. B.1.1]: drop the whole head (pre-logits included) and attach
        a zero-initialised linear head for ``num_classes`` (0 = no head). A MAP pooling head is
        kept: it makes the representation (as timm's ``reset_classifier`` keeps ``attn_pool``)."""
        cfg = dataclasses.replace(
            self.cfg, num_classes=num_classes, representation_size=representation_size
        )
        check_new(cfg, None)  # before the head is allocated: 10^12 classes asked 128 TB of torch
        self.cfg = cfg
        device = self.patch_embed.proj.weight.device  # the final norm may be pruned
        self._build_head(num_classes, representation_size)
        self.head.to(device)
        if self.pre_logits is not None:
            self.pre_logits.to(device)

    def resize_pos_embed(self, grid: int | tuple[int, int]) -> None:
        """Resize the position embeddings to a new patch grid, (gh, gw) or an int for a square one
        (fine-tuning at a higher resolution [P §3.2]): the class token's embedding is kept, the
        grid is interpolated, height and width separately. ``cfg.image_size`` becomes the images
        that tile into the new grid, (gh x stride, gw x stride)."""
        sides = (grid, grid) if isinstance(grid, int) else tuple(grid)
        if len(sides) != 2 or not all(
            isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in sides
        ):
            raise ConfigError(
                f"grid={grid!r} is not valid: expected a positive integer or a (gh, gw) pair "
                "of them"
            )
        gh, gw = sides
        old = self.cfg.grid
        stride = self.patch_embed.stride
        cfg = dataclasses.replace(self.cfg, image_size=(gh * stride, gw * stride))
        check_new(cfg, None)  # before the resize: a grid of 10^6 asked 128 TB of torch
        self.cfg = cfg
        if isinstance(self.pos_embed, nn.Parameter):
            with torch.no_grad():
                resized = self._resized_pos_embed((gh, gw), old)
            self.pos_embed = nn.Parameter(resized)
        elif self.pos_embed is not None:
            self.pos_embed = sincos2d((gh, gw), self.cfg.hidden_size).to(self.pos_embed.device)

    def _resized_pos_embed(self, grid: tuple[int, int], old: tuple[int, int]) -> Tensor:
        """Learned posemb for another grid: (1, prefix + N', D)."""
        assert isinstance(self.pos_embed, Tensor)
        prefix = self.cfg.num_prefix_tokens
        patches = resize_grid(self.pos_embed[:, prefix:], old, grid)  # (1, N', D)
        return torch.cat([self.pos_embed[:, :prefix], patches], dim=1)

    # ---------------------------------------------------------------- the paper's stages

    def embed_patches(self, images: Tensor) -> Tensor:
        """Images (B, C, H, W) -> patch embeddings (B, N, D), before class token and posemb."""
        self.patch_embed.grid(images.shape[-2], images.shape[-1])  # clear error on a bad size
        return self.patch_embed(images)

    def _add_posemb_and_prefix(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        B = x.shape[0]
        own = grid == self.cfg.grid
        if self.cfg.posemb == "sincos2d":
            pe = self.pos_embed if own else sincos2d(grid, x.shape[-1]).to(x.device)
            assert pe is not None  # the buffer of posemb='sincos2d'
            x = x + pe  # (B, N, D); the class token gets no posemb (big_vision)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)  # (B, T, D)
        if self.cfg.posemb == "learn":
            pe = self.pos_embed if own else self._resized_pos_embed(grid, self.cfg.grid)
            assert pe is not None  # the parameter of posemb='learn'
            x = x + pe  # (B, T, D)
        return self.pos_drop(x)

    def encode(self, patch_tokens: Tensor, grid: tuple[int, int] | None = None) -> Tensor:
        """Patch embeddings (B, N, D) -> encoded tokens (B, T, D): class token, posemb, blocks, LN.

        ``grid`` is the (gh, gw) the N tokens came from; without it, the model's grid or else a
        square one."""
        grid = grid or grid_of(
            patch_tokens.shape[1],
            expected=self.cfg.grid,
            what="the patch tokens given to encode",
            hint="pass grid=(gh, gw)",
        )
        x = self._add_posemb_and_prefix(patch_tokens, grid)
        for block in self.blocks:
            x, _ = block(x)
        return self.norm(x)

    def pool(self, tokens: Tensor) -> Tensor:
        """Encoded tokens (B, T, D) -> image representation (B, D): class token, mean (GAP) or
        attention pooling (MAP)."""
        if self.cfg.classifier == "token":
            return tokens[:, 0]
        if self.attn_pool is not None:
            return self.attn_pool(tokens)
        return tokens.mean(dim=1)

    # ---------------------------------------------------------------- timm's API

    def forward_features(self, images: Tensor) -> Tensor:
        """Images (B, C, H, W) -> encoded tokens (B, T, D), after the final LayerNorm."""
        grid = self.patch_embed.grid(images.shape[-2], images.shape[-1])
        return self.encode(self.patch_embed(images), grid)

    def forward_head(self, tokens: Tensor, pre_logits: bool = False) -> Tensor:
        """Encoded tokens (B, T, D) -> logits (B, K); with ``pre_logits=True`` the features the head
        sees (B, R or D). Once pruned for features (``prune_intermediate_layers``) there is no
        pooling: a head attached again sees each token, as timm's after ``global_pool=''``."""
        x = self.pool(tokens) if self.pool_tokens else tokens  # (B, D), or (B, T, D) once pruned
        if self.pre_logits is not None:
            x = self.pre_logits(x)  # (B, R)
        return x if pre_logits else self.head(x)

    def forward(self, images: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(images))

    def intermediates(self, images: Tensor, *, attention: bool = False) -> dict[str, Tensor]:
        """Every named intermediate of one forward pass (for inspection and few-shot features).

        Keys: ``patch_embed`` (B, N, D), ``block{i}`` (B, T, D), ``attn{i}`` (B, H, T, T) when
        ``attention=True`` (explicit softmax path, equal to the fused one), ``encoded`` (B, T, D),
        ``pooled`` (B, D), ``pre_logits`` (B, R or D), ``logits`` (B, K) when there is a head.
        """
        grid = self.patch_embed.grid(images.shape[-2], images.shape[-1])
        out: dict[str, Tensor] = {}
        x = out["patch_embed"] = self.patch_embed(images)
        x = self._add_posemb_and_prefix(x, grid)
        for i, block in enumerate(self.blocks):
            x, weights = block(x, return_attention=attention)
            out[f"block{i}"] = x
            if weights is not None:
                out[f"attn{i}"] = weights
        x = out["encoded"] = self.norm(x)
        x = out["pooled"] = self.pool(x)
        if self.pre_logits is not None:
            x = self.pre_logits(x)
        out["pre_logits"] = x
        if self.cfg.num_classes:
            out["logits"] = self.head(x)
        return out

    def forward_intermediates(
        self,
        images: Tensor,
        indices: int | Sequence[int] | None = None,
        *,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: Literal["NCHW", "NLC"] = "NCHW",
        intermediates_only: bool = False,
        output_dict: bool = False,
    ) -> tuple[Tensor, Features] | Features | dict[str, Tensor | list[Tensor]]:
        """timm's feature-extraction contract (dense prediction, feature pyramids), output for
        output equal to timm's ``VisionTransformer.forward_intermediates`` with the same weights.

        Args:
            images: (B, C, H, W), any multiple of the patch stride.
            indices: the blocks whose outputs are taken: an int n = the last n blocks, a list of
                block indices (negative from the end; taken in block order, each once), ``None``
                = all.
            return_prefix_tokens: each feature becomes a pair (spatial, prefix tokens (B, 1, D));
                a GAP model has no prefix tokens and returns its features alone.
            norm: pass each taken output through the final LayerNorm.
            stop_early: run no block after the last one taken (the final features are then the
                normed output of that block).
            output_fmt: ``'NCHW'`` spatial maps (B, D, gh, gw) or ``'NLC'`` tokens (B, N, D).
            intermediates_only: return only the features.
            output_dict: return ``{'image_intermediates': features, 'image_intermediates_prefix':
                prefix tokens (with ``return_prefix_tokens`` and a class token), 'image_features':
                final (unless ``intermediates_only``)}``.

        Returns:
            ``(final, features)`` with final the encoded tokens (B, T, D) after the final norm, or
            ``features`` alone, or the dict. ``features`` is one entry per block taken.
        """
        if output_fmt not in ("NCHW", "NLC"):
            raise ConfigError(f"output_fmt={output_fmt!r} is not valid: expected 'NCHW' or 'NLC'")
        take, last = _take_indices(len(self.blocks), indices)
        B = images.shape[0]
        gh, gw = self.patch_embed.grid(images.shape[-2], images.shape[-1])
        x = self._add_posemb_and_prefix(self.patch_embed(images), (gh, gw))  # (B, T, D)
        taken: list[Tensor] = []
        for i, block in enumerate(self.blocks[: last + 1] if stop_early else self.blocks):
            x, _ = block(x)  # (B, T, D)
            if i in take:
                taken.append(self.norm(x) if norm else x)
        p = self.cfg.num_prefix_tokens
        prefix = [y[:, :p] for y in taken] if p else None  # (B, 1, D) each
        spatial = [y[:, p:] for y in taken]  # (B, N, D) each
        if output_fmt == "NCHW":
            spatial = [
                y.reshape(B, gh, gw, -1).permute(0, 3, 1, 2).contiguous()  # (B, D, gh, gw)
                for y in spatial
            ]
        if output_dict:
            out: dict[str, Tensor | list[Tensor]] = {"image_intermediates": spatial}
            if return_prefix_tokens and prefix is not None:
                out["image_intermediates_prefix"] = prefix
            if not intermediates_only:
                out["image_features"] = self.norm(x)  # (B, T, D)
            return out
        features: Features = spatial
        if return_prefix_tokens and prefix is not None:
            features = list(zip(spatial, prefix, strict=True))
        if intermediates_only:
            return features
        return self.norm(x), features  # (B, T, D), features

    def prune_intermediate_layers(
        self,
        indices: int | Sequence[int] = 1,
        *,
        prune_norm: bool = False,
        prune_head: bool = True,
    ) -> list[int]:
        """timm's: keep only what ``forward_intermediates(indices=...)`` needs. Returns the
        absolute block indices of ``indices`` (in the order given).

        The blocks after the last one taken are removed (``cfg.num_layers`` follows);
        ``prune_norm`` replaces the final LayerNorm by the identity; ``prune_head`` removes the
        head, the pre-logits layer and the pooling, a MAP head included (``cfg.num_classes=0``),
        so ``forward`` and ``forward_head`` return the encoded tokens (B, T, D), as timm's. The config has no field
        for a missing norm or pooling: a model pruned that way does not reload from its config.
        """
        take, last = _take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[: last + 1]
        self.cfg = dataclasses.replace(self.cfg, num_layers=last + 1)
        if prune_head:
            self.reset_head(0)
            self.pool_tokens = False
            self.attn_pool = None  # timm's reset_classifier(0, '') drops a MAP head too
        if prune_norm:
            self.norm = nn.Identity()
        return take

    # ---------------------------------------------------------------- bookkeeping

    def no_weight_decay(self) -> set[str]:
        """Names of parameters that take no weight decay: biases, norms, posemb, class token and
        MAP probe (big_vision decays only kernels; timm would decay the probe)."""
        return {
            name
            for name, p in self.named_parameters()
            if p.ndim <= 1 or name in ("pos_embed", "cls_token", "attn_pool.latent")
        }

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _take_indices(num_blocks: int, indices: int | Sequence[int] | None) -> tuple[list[int], int]:
    """timm's ``feature_take_indices``: the absolute block indices ``indices`` names (an int n =
    the last n, ``None`` = all, negative indices from the end) and the largest of them."""
    if indices is None:
        indices = num_blocks
    if isinstance(indices, bool):
        raise ConfigError(
            f"indices={indices} is not valid: expected an int, a list of ints or None"
        )
    if isinstance(indices, int):
        if not 0 < indices <= num_blocks:
            raise ConfigError(
                f"indices={indices} is not valid: expected a number of last blocks from 1 to "
                f"{num_blocks}"
            )
        take = list(range(num_blocks - indices, num_blocks))
    else:
        take = [num_blocks + i if i < 0 else i for i in indices]
        if not take or not all(0 <= i < num_blocks for i in take):
            raise ConfigError(
                f"indices={list(indices)} is not valid: expected one or more block indices from "
                f"{-num_blocks} to {num_blocks - 1}"
            )
    return take, max(take)
