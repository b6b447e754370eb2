"""The fast inference path: one call turns a model into a function of images that computes the same
logits faster (fp32 logits match eager ones to rounding: the tests hold them to 1e-4).

Two backends, the same mathematics:

- ``inductor``: TorchInductor compiles the model with *frozen* weights, which become constants of
  the graph: what depends on weights only is folded, each linear layer's weight is stored once in
  its matrix-product library's layout (eager PyTorch repacks it at every call), and LayerNorm,
  GELU, the residual adds and the bias are fused. The price: a compilation at the first call of
  each input shape.
- ``onednn``: every linear layer's weight packed once for oneDNN, the rest eager, no compilation:
  faster where MKL takes its generic path for fp32 (AMD CPUs), slower on Intel's.

``backend="auto"`` measures, once, the model's widest fp32 product both ways and takes ``onednn``
where it beats MKL by ``ONEDNN_MARGIN``, else ``inductor``. The returned function keeps the
weights as they were: train first, optimize last. ``vitkit predict/eval --fast`` use it.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn

from ..errors import ConfigError

Backend = Literal["auto", "inductor", "onednn"]
ONEDNN_MARGIN = 1.2  # oneDNN must beat MKL by this much: packing costs copies at every layer


class FrozenInference(nn.Module):
    """``model``'s forward on frozen weights (compiled, or with oneDNN-packed linear layers), called
    under ``inference_mode`` (and bf16 autocast when asked), in eval mode."""

    def __init__(self, model: nn.Module, *, bf16: bool, backend: Literal["inductor", "onednn"]):
        super().__init__()
        self.backend = backend
        self.bf16 = bf16
        self.model = model.eval()
        self.run: Callable[[Tensor], Tensor]
        if backend == "onednn":  # a copy: the caller's model keeps its own layers
            self.model = _pack_linears(copy.deepcopy(self.model))
            self.run = self.model
        else:
            # freezing: weights as constants (folded, pre-packed); fullgraph: a graph break would
            # fall back to eager silently, which is not the path the user asked for
            self.run = torch.compile(self.model, fullgraph=True, options={"freezing": True})
        self.eval()

    def forward(self, images: Tensor) -> Tensor:
        with (
            torch.inference_mode(),
            torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=self.bf16),
        ):
            return self.run(images)  # (B, K)

    def train(self, mode: bool = True) -> FrozenInference:
        if mode:
            raise ConfigError(
                "an optimize_for_inference model has frozen weights and cannot train: "
                "train the original model, then optimize it again"
            )
        return super().train(False)


class OneDNNLinear(nn.Module):
    """A ``Linear`` whose weight is packed once in oneDNN's layout; takes and gives dense tensors
    (..., in) -> (..., out)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.out_features = linear.out_features
        weight = linear.weight.detach()
        bias = (
            linear.bias.detach() if linear.bias is not None else weight.new_zeros(weight.shape[0])
        )
        self.weight = weight.to_mkldnn()  # plain attributes: oneDNN tensors are not state
        self.bias = bias.to_mkldnn()

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1]).contiguous()  # (M, in)
        out = torch._C._nn.mkldnn_linear(flat.to_mkldnn(), self.weight, self.bias).to_dense()
        return out.reshape(*x.shape[:-1], self.out_features)  # (..., out)


def _pack_linears(model: nn.Module) -> nn.Module:
    """``model`` with every fp32 ``nn.Linear`` replaced by a ``OneDNNLinear`` (in place)."""
    for name, child in model.named_children():
        if isinstance(child, nn.Linear) and child.weight.dtype == torch.float32:
            setattr(model, name, OneDNNLinear(child))
        else:
            _pack_linears(child)
    return model


def _median_seconds(call: Callable[[], object], repeats: int = 5) -> float:
    call()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def onednn_speedup(model: nn.Module, rows: int = 1024) -> float:
    """How much faster oneDNN-packed than eager (MKL) the model's widest fp32 linear layer is for
    ``rows`` tokens on this machine (> 1: oneDNN is faster); 0 where oneDNN is unavailable."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears or not torch.backends.mkldnn.is_available():
        return 0.0
    widest = max(linears, key=lambda m: m.weight.numel())
    x = torch.randn(rows, widest.in_features)
    packed = OneDNNLinear(widest)
    with torch.inference_mode():
        mkl = _median_seconds(lambda: torch.nn.functional.linear(x, widest.weight, widest.bias))
        onednn = _median_seconds(lambda: packed(x))
    return mkl / onednn


def _on_cpu(model: nn.Module) -> bool:
    return all(p.device.type == "cpu" for p in model.parameters())


def choose_backend(model: nn.Module, *, bf16: bool) -> Literal["inductor", "onednn"]:
    """``auto``'s choice: ``onednn`` for fp32 on a CPU where it beats MKL by ``ONEDNN_MARGIN``."""
    if bf16 or not _on_cpu(model) or onednn_speedup(model) < ONEDNN_MARGIN:
        return "inductor"
    return "onednn"


def optimize_for_inference(
    model: nn.Module, *, bf16: bool = False, backend: Backend = "auto"
) -> FrozenInference:
    """``model`` (any vitkit model) as a weight-frozen inference function: call it on images
    (B, C, S, S) for logits (B, K). ``bf16`` computes under bf16 autocast (fp32 weights, bf16
    matrix products; logits within ~1e-2 of fp32). ``backend``: see the module docstring."""
    if backend not in ("auto", "inductor", "onednn"):
        raise ConfigError(f"backend={backend!r}: expected 'auto', 'inductor' or 'onednn'")
    if backend == "onednn" and (bf16 or not _on_cpu(model)):
        raise ConfigError("backend='onednn' packs fp32 weights on the CPU: use 'inductor' here")
    if backend == "auto":
        backend = choose_backend(model, bf16=bf16)
    return FrozenInference(model, bf16=bf16, backend=backend)
