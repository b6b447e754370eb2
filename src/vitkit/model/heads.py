"""Classification head and the pre-training "pre-logits" layer [P §3.1, App. B.1.1, D.3].

Shapes: B batch, D hidden, R representation size, K classes.

At pre-training the head is an MLP with one tanh hidden layer (the representation, or pre-logits);
at fine-tuning "a single, zero-initialized linear layer" replaces the whole head.
"""

from __future__ import annotations

from torch import Tensor, nn

from .layers import lecun_normal_


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
