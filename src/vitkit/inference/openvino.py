"""The OpenVINO engine: a checkpoint's model converted once by OpenVINO's PyTorch frontend
(``openvino.convert_model``, traced with a dynamic batch), then compiled for the CPU at each batch
size it is called with (a static shape: OpenVINO's fastest; 0.3-3.6 s each, measured), computing
in bf16 or fp32 as the prepared precision says (``INFERENCE_PRECISION_HINT``).

Why: OpenVINO is what a user who serves a ViT on a CPU picks, and its CPU plugin's bf16 kernels
(AMX and AVX512_BF16, fused attention and normalisation) run a ViT faster than torch's eager
or compiled path on both CPU kinds we measured (benchmarks/RESULTS.md, "Inference against
OpenVINO"). The price: the conversion (3-6 s for ViT-S/16 to ViT-B/16), which ``auto`` pays only
for enough work (``inference.engines``). ``openvino`` is the ``openvino`` extra (Apache-2.0, kept
by Intel; also what optimum-intel serves through): ``pip install 'vitkit[openvino]'``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from ..runtime.openvino import require_openvino
from .shapes import ByShape, Precision


class OpenVINOInference(ByShape):
    """``model``'s forward pass by OpenVINO on the CPU: images (B, C, H, W) -> logits (B, K),
    fp32 tensors in and out, computed in bf16 or f32 as ``precision`` says (``auto``: for each
    input shape, ``ByShape``). ``model`` stays as it was (its parameters say the device); the
    converted graph is OpenVINO's."""

    backend = "openvino"

    def __init__(self, model: nn.Module, *, precision: Precision) -> None:
        super().__init__(model, precision)
        ov = require_openvino()
        self.core = ov.Core()
        self.converted: dict[tuple[int, int], Any] = {}  # (H, W) -> OpenVINO's model
        self.requests: dict[tuple[int, ...], Any] = {}  # an input shape -> its compiled request
        self.training = False

    def _convert(self, images: Tensor) -> Any:
        """The model as OpenVINO's graph for images of this height and width, any batch."""
        ov = require_openvino()
        _, c, h, w = images.shape
        example = torch.zeros(2, c, h, w)  # a batch of one could be traced as a constant 1
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's warnings on Python conditions
            return ov.convert_model(self.model, example_input=example, input=[(-1, c, h, w)])

    def _request(self, images: Tensor) -> Any:
        shape = tuple(images.shape)
        if shape not in self.requests:
            size = (shape[2], shape[3])
            if size not in self.converted:
                self.converted[size] = self._convert(images)
            graph = self.converted[size].clone()
            graph.reshape(list(shape))  # static: OpenVINO plans its kernels for this shape
            properties = {
                "INFERENCE_PRECISION_HINT": "bf16" if self.bf16_for(images) else "f32",
                "PERFORMANCE_HINT": "LATENCY",  # one request at a time, every core on it
                "INFERENCE_NUM_THREADS": torch.get_num_threads(),  # the threads torch was given
            }
            compiled = self.core.compile_model(graph, "CPU", properties)
            self.requests[shape] = compiled.create_infer_request()
        return self.requests[shape]

    def forward(self, images: Tensor) -> Tensor:
        if images.device.type != "cpu":
            raise ConfigError(f"the openvino engine runs on the CPU: images on {images.device}")
        request = self._request(images)
        x = images.detach().float().contiguous().numpy()  # (B, C, H, W)
        out = request.infer([x], share_inputs=True)[0]  # (B, K), OpenVINO's buffer
        return torch.from_numpy(out.copy())  # (B, K): the next call reuses that buffer

    def train(self, mode: bool = True) -> OpenVINOInference:
        if mode:
            raise ConfigError(
                "an OpenVINO model is for inference and cannot train: train the original model"
            )
        return self
