"""Classification head, the pre-training "pre-logits" layer [P §3.1, App. B.1.1, D.3] and the
attention-pooling (MAP) head of big_vision's ViTs.

Shapes: B batch, T tokens, D hidden, H heads, Dh = D / H head dim, M mlp_dim,
R representation size, K classes.

At pre-training the head is an MLP with one tanh hidden layer (the representation, or pre-logits);
at fine-tuning "a single, zero-initialized linear layer" replaces the whole head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layers import Mlp, lecun_normal_, xavier_uniform_


class PreLogits(nn.Module):
    """Dense + tanh: (B, D) -> (B, R)."""

    def __init__(self, dim: int, representation_size: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, representation_size)
        self.act = nn.Tanh()

    def reset_parameters(self) -> None:
        lecun_normal_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.fc(x))


def new_head(dim: int, num_classes: int, bias_init: float = 0.0) -> nn.Module:
    """A zero-initialised linear head (B, dim) -> (B, K), or the identity when ``num_classes=0``."""
    if num_classes == 0:
        return nn.Identity()
    head = nn.Linear(dim, num_classes)
    nn.init.zeros_(head.weight)
    nn.init.constant_(head.bias, bias_init)
    return head


class MAPHead(nn.Module):
    """Multihead attention pooling (``classifier='map'``): a learned probe attends over the encoded
    tokens, then a residual MLP: (B, T, D) -> (B, D) [big_vision ``MAPHead``; Lee et al. 2019].

        y = softmax((probe W_q)(x W_k)ᵀ / √Dh)(x W_v) W_o      one query, H heads, with biases
        pooled = y + MLP(LN(y))

    The parameters carry timm's ``AttentionPoolLatent`` names (``latent``, ``q``, ``kv`` (k and v
    stacked), ``proj``, ``norm``, ``mlp.fc1/fc2``); as in both, the heads, MLP width, GELU and
    LayerNorm eps are the encoder's, and there is no dropout.
    """

    def __init__(self, dim: int, num_heads: int, mlp_dim: int, *, act: str, eps: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.latent = nn.Parameter(torch.zeros(1, 1, dim))  # big_vision's "probe"
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, mlp_dim, act=act, dropout=0.0)

    def reset_parameters(self) -> None:
        """big_vision's initialisation: the probe is xavier-uniform over its (1, 1, D) shape (flax
        fans: in 1, out D, so U(+-sqrt(6 / (1 + D)))); q, k, v and out kernels xavier-uniform
        (each its own kernel in flax), attention biases zero; the MLP as the encoder's."""
        xavier_uniform_(self.latent[0])  # (1, D): fan_out 1, fan_in D
        xavier_uniform_(self.q.weight)
        xavier_uniform_(self.kv.weight, chunks=2)
        xavier_uniform_(self.proj.weight)
        for linear in (self.q, self.kv, self.proj):
            nn.init.zeros_(linear.bias)
        self.norm.reset_parameters()
        self.mlp.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        H, Dh = self.num_heads, self.head_dim
        q = self.q(self.latent).reshape(1, 1, H, Dh).transpose(1, 2)  # (1, H, 1, Dh)
        q = q.expand(B, -1, -1, -1)  # (B, H, 1, Dh): the same probe for every image
        kv = self.kv(x).reshape(B, T, 2, H, Dh)  # (B, T, 2, H, Dh)
        k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)  # 2 x (B, H, T, Dh)
        y = F.scaled_dot_product_attention(q, k, v)  # (B, H, 1, Dh)
        y = self.proj(y.transpose(1, 2).reshape(B, 1, D))  # (B, 1, D)
        y = y + self.mlp(self.norm(y))  # (B, 1, D)
        return y[:, 0]  # (B, D)
