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

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .embed import PatchEmbed
from .heads import MAPHead, PreLogits, new_head
from .layers import Block
from .posemb import resize_grid, sincos2d


class VisionTransformer(nn.Module):
    """ViT-{Ti,S,B,L,H}/P and R+ViT hybrids, built from a ``ModelConfig``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        D = cfg.hidden_size
        self.patch_embed = PatchEmbed(cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if cfg.classifier == "token" else None
        grid = (cfg.grid_size, cfg.grid_size)
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
        self.norm = nn.LayerNorm(D, eps=cfg.layer_norm_eps)
        self.attn_pool = (  # after the final norm, as big_vision and timm (whose fc_norm is off)
            MAPHead(D, cfg.num_heads, cfg.mlp_dim, act=cfg.act, eps=cfg.layer_norm_eps)
            if cfg.classifier == "map"
            else None
        )
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
            block.reset_parameters()
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
        self.cfg = dataclasses.replace(
            self.cfg, num_classes=num_classes, representation_size=representation_size
        )
        device = self.norm.weight.device
        self._build_head(num_classes, representation_size)
        self.head.to(device)
        if self.pre_logits is not None:
            self.pre_logits.to(device)

    def resize_pos_embed(self, grid: int | tuple[int, int]) -> None:
        """Resize the position embeddings to a new square patch grid (fine-tuning at a higher
        resolution [P §3.2]); the class token's embedding is kept, the grid is interpolated."""
        gh, gw = (grid, grid) if isinstance(grid, int) else grid
        if gh != gw:
            raise ValueError(f"resize_pos_embed takes a square grid, got {gh}x{gw}")
        old = (self.cfg.grid_size, self.cfg.grid_size)
        self.cfg = dataclasses.replace(self.cfg, image_size=gh * self.patch_embed.stride)
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

    def _grid_of(self, num_patches: int) -> tuple[int, int]:
        g = self.cfg.grid_size
        if num_patches == g * g:
            return (g, g)
        side = round(num_patches**0.5)
        if side * side != num_patches:
            raise ValueError(
                f"{num_patches} patch tokens do not form a square grid: pass grid=(gh, gw) to encode"
            )
        return (side, side)

    def _add_posemb_and_prefix(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        B = x.shape[0]
        own = grid == (self.cfg.grid_size, self.cfg.grid_size)
        if self.cfg.posemb == "sincos2d":
            pe = self.pos_embed if own else sincos2d(grid, x.shape[-1]).to(x.device)
            x = x + pe  # (B, N, D); the class token gets no posemb (big_vision)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)  # (B, T, D)
        if self.cfg.posemb == "learn":
            pe = self.pos_embed if own else self._resized_pos_embed(grid, (self.cfg.grid_size,) * 2)
            x = x + pe  # (B, T, D)
        return self.pos_drop(x)

    def encode(self, patch_tokens: Tensor, grid: tuple[int, int] | None = None) -> Tensor:
        """Patch embeddings (B, N, D) -> encoded tokens (B, T, D): class token, posemb, blocks, LN."""
        grid = grid or self._grid_of(patch_tokens.shape[1])
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
        sees (B, R or D)."""
        x = self.pool(tokens)  # (B, D)
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

    forward_intermediates = intermediates

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
