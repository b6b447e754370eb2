"""Transformer encoder building blocks [P §3.1 Eq. 2-3, App. A; official vit_jax models_vit.py].

Shapes: B batch, T tokens, D hidden, H heads, Dh = D / H head dim, M mlp_dim.

Dropout sits where the paper puts it: "after every dense layer except the qkv-projections and
directly after adding positional- to patch embeddings" [P App. B.1]; attention dropout acts on the
attention weights. Initialisation follows the official Flax code [PAPER.md A10].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..runtime.arithmetic import Task, process_rule


def lecun_normal_(weight: Tensor) -> Tensor:
    """Flax's default kernel init: truncated normal (+-2 std) with variance 1 / fan_in.

    The 0.8796 factor is the std of a standard normal truncated to [-2, 2]; dividing by it makes
    the truncated distribution's variance exactly 1 / fan_in, as ``variance_scaling`` does.
    """
    fan_in = weight[0].numel()  # Linear (out, in) or Conv (out, in, kh, kw)
    std = math.sqrt(1.0 / fan_in) / 0.87962566103423978
    return nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-2.0 * std, b=2.0 * std)


def xavier_uniform_(weight: Tensor, *, chunks: int = 1) -> Tensor:
    """Xavier-uniform init; a fused weight of ``chunks`` stacked kernels is initialised per kernel."""
    with torch.no_grad():
        for part in weight.chunk(chunks, dim=0):
            fan_out, fan_in = part.shape
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            part.uniform_(-bound, bound)
    return weight


def gelu(act: str) -> nn.Module:
    """Exact GELU (timm, Hugging Face) or the tanh approximation (flax ``nn.gelu``, official JAX)."""
    return nn.GELU(approximate="tanh" if act == "gelu_tanh" else "none")


class DropPath(nn.Module):
    """Stochastic depth: drops a residual branch per sample, scaling the survivors by 1/keep."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        self.rate = rate

    def forward(self, x: Tensor) -> Tensor:
        if self.rate == 0.0 or not self.training:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)  # (B, 1, 1)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"rate={self.rate}"


def explicit_is_faster(q: Tensor, most_tokens: dict[Task, int]) -> bool:
    """Whether attention over ``q`` (B, H, T, Dh) runs faster on the explicit path: bf16 on a
    CPU, over at most ``most_tokens["train"]`` tokens where gradients flow through it, at most
    ``most_tokens["infer"]`` where they do not (the CPU kind's ``Bf16Rule.explicit_tokens``)."""
    if q.device.type != "cpu" or q.dtype != torch.bfloat16:
        return False
    return q.shape[-2] <= most_tokens["train" if q.requires_grad else "infer"]


class Attention(nn.Module):
    """Multi-head self-attention with a fused qkv projection [P Eq. 5-8].

    The default path is ``F.scaled_dot_product_attention``; ``return_attention=True`` takes the
    explicit path (softmax(q kᵀ / √Dh) v, the softmax in fp32) and also returns the weights, for
    inspection. bf16 on a CPU over short sequences takes the explicit path too
    (``explicit_is_faster``), up to the lengths this process's CPU kind measured faster there,
    read when the module is built (a compiled forward pass probes nothing).
    """

    def __init__(
        self, dim: int, num_heads: int, *, attention_dropout: float, dropout: float
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.attn_drop_rate = attention_dropout
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(dropout)
        # a copy of this process's lengths: benchmarks/bf16_gain.py sets each layer's own
        self.explicit_tokens = dict(process_rule().explicit_tokens)

    def reset_parameters(self) -> None:
        xavier_uniform_(
            self.qkv.weight, chunks=3
        )  # q, k, v kernels are separate in the official code
        xavier_uniform_(self.proj.weight)
        nn.init.zeros_(self.qkv.bias)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: Tensor, *, return_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        B, T, D = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, self.num_heads, self.head_dim)  # (B, T, 3, H, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, H, T, Dh)
        drop = self.attn_drop_rate if self.training else 0.0
        weights = None
        if return_attention or explicit_is_faster(q, self.explicit_tokens):
            logits = (q * self.scale) @ k.transpose(-2, -1)  # (B, H, T, T)
            # the softmax's sums in fp32 under bf16 autocast too (a CPU's keeps bf16 outputs)
            weights = logits.float().softmax(dim=-1).to(q.dtype)  # (B, H, T, T)
            x = F.dropout(weights, drop, self.training) @ v  # (B, H, T, Dh)
        else:
            x = F.scaled_dot_product_attention(q, k, v, dropout_p=drop)  # (B, H, T, Dh)
        x = x.transpose(1, 2).reshape(B, T, D)  # (B, T, D)
        return self.proj_drop(self.proj(x)), weights


class Mlp(nn.Module):
    """The MLP block: dense -> GELU -> dropout -> dense -> dropout [P Eq. 3]."""

    def __init__(self, dim: int, hidden: int, *, act: str, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = gelu(act)
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(dropout)

    def reset_parameters(self) -> None:
        for fc in (self.fc1, self.fc2):
            xavier_uniform_(fc.weight)
            nn.init.normal_(fc.bias, std=1e-6)

    def forward(self, x: Tensor) -> Tensor:
        x = self.drop1(self.act(self.fc1(x)))  # (B, T, M)
        return self.drop2(self.fc2(x))  # (B, T, D)


class Block(nn.Module):
    """One pre-LN encoder layer: z' = MSA(LN(z)) + z; z = MLP(LN(z')) + z' [P Eq. 2-3]."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_dim: int,
        *,
        act: str,
        eps: float,
        dropout: float,
        attention_dropout: float,
        drop_path: float,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, num_heads, attention_dropout=attention_dropout, dropout=dropout)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, mlp_dim, act=act, dropout=dropout)
        self.drop_path = DropPath(drop_path)

    def reset_parameters(self) -> None:
        for norm in (self.norm1, self.norm2):
            norm.reset_parameters()
        self.attn.reset_parameters()
        self.mlp.reset_parameters()

    def forward(self, x: Tensor, *, return_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        y, weights = self.attn(self.norm1(x), return_attention=return_attention)
        x = x + self.drop_path(y)  # (B, T, D)
        x = x + self.drop_path(self.mlp(self.norm2(x)))  # (B, T, D)
        return x, weights
