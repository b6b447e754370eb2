"""The fast inference path: one call turns a model into a function of images that computes the same
logits faster (issue 5).

``optimize_for_inference(model)`` compiles the model with TorchInductor and *freezes* it: the
weights become constants of the graph, so the compiler folds what depends on weights only and
stores each linear layer's weight once in the layout its matrix-product library wants (MKL's packed
GEMM for fp32 on CPU, oneDNN for bf16), instead of packing it again at every call as eager PyTorch
does; it also fuses LayerNorm, GELU, the residual adds and the bias into fewer passes over memory.
The result is the same mathematics, so fp32 logits match eager ones to rounding (the tests hold it
to 1e-4; the harness reports the difference). ``bf16=True`` runs under bf16 autocast as eager
``torch.autocast`` does.

The price is a compilation at the first call of each input shape (tens of seconds on a CPU for
ViT-B/16), and frozen weights: the returned function keeps the weights as they were, so train the
model first, optimize it last. Use it where one model serves many batches (evaluation, serving);
``vitkit predict --fast`` and ``vitkit eval --fast`` use it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class FrozenInference(nn.Module):
    """``model``'s forward, compiled with frozen weights, called under ``inference_mode`` (and bf16
    autocast when asked) in eval mode."""

    def __init__(self, model: nn.Module, *, bf16: bool) -> None:
        super().__init__()
        self.model = model.eval()
        self.bf16 = bf16
        # freezing: weights as constants (folded, pre-packed); fullgraph: a graph break would fall
        # back to eager silently, which is not the path the user asked for
        self.compiled = torch.compile(self.model, fullgraph=True, options={"freezing": True})
        self.eval()

    def forward(self, images: Tensor) -> Tensor:
        with (
            torch.inference_mode(),
            torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=self.bf16),
        ):
            return self.compiled(images)  # (B, K)

    def train(self, mode: bool = True) -> FrozenInference:
        if mode:
            raise ValueError(
                "an optimize_for_inference model has frozen weights and cannot train: "
                "train the original model, then optimize it again"
            )
        return super().train(False)


def optimize_for_inference(model: nn.Module, *, bf16: bool = False) -> FrozenInference:
    """``model`` (any vitkit model) as a compiled, weight-frozen inference function: call it on
    images (B, C, S, S) for logits (B, K). ``bf16`` computes under bf16 autocast (fp32 weights,
    bf16 matrix products; logits within ~1e-2 of fp32)."""
    return FrozenInference(model, bf16=bf16)
