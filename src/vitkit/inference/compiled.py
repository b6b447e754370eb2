"""The compiled torch path: one call turns a model into a function of images that computes its
logits faster: in fp32 the same logits as eager ones to rounding (the tests hold them to 1e-4); in
bf16, which ``precision="auto"`` takes where ``--precision auto`` would, within bf16's rounding
of them.

Two backends, the same mathematics:

- ``inductor``: TorchInductor compiles the model with *frozen* weights, which become constants of
  the graph: what depends on weights only is folded, each linear layer's weight is stored once in
  its matrix-product library's layout (eager PyTorch repacks it at every call), and LayerNorm,
  GELU, the residual adds and the bias are fused. The price: a compilation at the first call of
  each input shape.
- ``onednn``: every linear layer's weight packed once for oneDNN, the rest eager, no compilation:
  faster where MKL takes its generic path for fp32 (AMD CPUs), slower on Intel's.

``backend="auto"`` takes OpenVINO where the commands' engine would (``optimize_for_inference``);
else it measures, once, the model's widest fp32 product both ways and takes ``onednn`` where it
beats MKL by ``ONEDNN_MARGIN``, else ``inductor``. The returned function keeps the
weights as they were: train first, optimize last. ``vitkit predict/eval --fast`` (the torch
engine, compiled: ``inference.engine``) use it.
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
from ..model.flops import count_flops
from .shapes import ByShape, Precision

Backend = Literal["auto", "inductor", "onednn", "openvino"]
ONEDNN_MARGIN = 1.2  # oneDNN must beat MKL by this much: packing costs copies at every layer


class FrozenInference(ByShape):
    """``model``'s forward on frozen weights (compiled, or with oneDNN-packed linear layers), called
    under ``inference_mode`` (and bf16 autocast where ``precision`` says so), in eval mode."""

    def __init__(
        self, model: nn.Module, *, precision: Precision, backend: Literal["inductor", "onednn"]
    ):
        super().__init__(model, precision)
        self.backend = backend
        self.run: Callable[[Tensor], Tensor]
        if backend == "onednn":  # a copy: the caller's model keeps its own layers
            self.model = _pack_linears(copy.deepcopy(self.model))
            self.run = self.model
        else:
            # freezing: weights as constants (folded, pre-packed); fullgraph: a graph break would
            # fall back to eager silently, which is not the path the user asked for; dynamic off:
            # one graph per batch size, each planned for its shape, where a second size would
            # otherwise recompile the graph with a symbolic batch
            self.run = torch.compile(
                self.model, fullgraph=True, dynamic=False, options={"freezing": True}
            )
        self.eval()

    def forward(self, images: Tensor) -> Tensor:
        bf16 = self.bf16_for(images)
        with (
            torch.inference_mode(),
            torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=bf16),
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


def choose_backend(model: nn.Module, *, precision: Precision) -> Literal["inductor", "onednn"]:
    """``auto``'s choice: ``onednn`` for fp32 on a CPU where it beats MKL by ``ONEDNN_MARGIN``."""
    if precision != "fp32" or not _on_cpu(model) or onednn_speedup(model) < ONEDNN_MARGIN:
        return "inductor"
    return "onednn"


def optimize_for_inference(
    model: nn.Module,
    *,
    precision: Precision = "auto",
    backend: Backend = "auto",
    bf16: bool | None = None,
) -> ByShape:
    """``model`` (any vitkit model) as a weight-frozen inference function: call it on images
    (B, C, S, S) for logits (B, K).

    ``precision``: ``fp32`` (the eager logits to rounding), ``bf16`` (bf16 matrix products;
    logits within bf16's rounding, ~1e-2 on logits of scale 1), or ``auto``: as ``--precision
    auto`` decides (bf16 on CUDA, and on a CPU with native bf16 for a batch large enough to gain;
    else fp32), for the first batch of each input shape. ``bf16=True``/``False``: the earlier
    spelling of ``precision="bf16"``/``"fp32"``.

    ``backend``: ``inductor`` or ``onednn`` (see the module docstring), ``openvino`` (the
    ``openvino`` extra: ``inference.openvino``), or ``auto``: OpenVINO where the commands' engine
    would take it for a long run (``inference.engines``: installed, on a CPU with native bf16),
    else torch's backend as the module docstring says."""
    if bf16 is not None:
        precision = "bf16" if bf16 else "fp32"
    if precision not in ("auto", "fp32", "bf16"):
        raise ConfigError(f"precision={precision!r}: expected 'auto', 'fp32' or 'bf16'")
    if backend not in ("auto", "inductor", "onednn", "openvino"):
        raise ConfigError(
            f"backend={backend!r}: expected 'auto', 'inductor', 'onednn' or 'openvino'"
        )
    if backend == "onednn" and (precision != "fp32" or not _on_cpu(model)):
        raise ConfigError(
            "backend='onednn' packs fp32 weights on the CPU: use 'inductor' here, or "
            "precision='fp32' on the CPU"
        )
    if backend == "auto" and _on_cpu(model):
        from ..runtime.openvino import openvino_version
        from .engines import decide_engine

        chosen, _ = decide_engine(
            "auto",
            device=torch.device("cpu"),
            precision=precision,
            compile=False,
            images=None,  # a function kept for many calls
            image_gflop=count_flops(model.cfg) / 1e9,  # type: ignore[arg-type]
            openvino=openvino_version(),
        )
        if chosen == "openvino":
            backend = "openvino"
    if backend == "openvino":
        from .openvino import OpenVINOInference

        return OpenVINOInference(model, precision=precision)
    if backend == "auto":
        backend = choose_backend(model, precision=precision)
    return FrozenInference(model, precision=precision, backend=backend)
