"""int8 inference on a CPU: torchao's PT2E quantizer for x86 (static: per-channel int8 weights
and per-tensor int8 inputs of every linear layer), calibrated on images the caller gives, then
compiled by Inductor, whose oneDNN int8 kernels use VNNI/AMX. The patch embedding, attention's
products, softmax, LayerNorm and GELU stay fp32.

Why this path: measured on 2 cores of an AMD EPYC Zen 4, ViT-S/16 at batch 32 ran 652 ms here
against 840 ms for bf16 through ``optimize_for_inference`` and 936 ms for ONNX Runtime's static
int8 (QDQ, U8S8) of the same model (benchmarks/RESULTS.md, "bf16 on a CPU, and int8"). The
price: a calibration pass in fp32 and a compilation (tens of seconds): it pays for many images.

``check_int8`` compares the quantized model with fp32 on held-out images: top-1 agreement, the
change of top-1 accuracy and the largest change of a logit. ``int8_model`` does both for a
checkpoint: calibrated on ``calibration`` of its training images drawn by a seeded permutation
(the first of ``torch.randperm(N)`` under ``manual_seed(seed)``), checked on up to ``held_out``
images of the evaluated split drawn the same way, which training never saw, and refused in one
line when top-1 accuracy moves by more than a bound. int8 is never a default: ``auto`` chooses
between fp32 and bf16 (runtime/arithmetic.py), and a command asks for int8 by name. ``torchao``
is the ``int8`` extra (``pip install 'vitkit[int8]'``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..config.inference import InferenceConfig
from ..data import BatchOptions, subset
from ..data.run_data import Split, batches_of
from ..errors import ConfigError, MissingExtraError, VitkitError
from ..model import ResNetClassifier, VisionTransformer
from ..runtime.mode import eval_mode
from ..runtime.torchao import torchao_import


def require_torchao() -> None:
    """A ``MissingExtraError`` naming the extra when torchao is not installed."""
    try:
        with torchao_import():
            import torchao.quantization.pt2e  # noqa: F401
    except ImportError:
        raise MissingExtraError("int8 inference", "int8", "torchao") from None


class Int8Inference(nn.Module):
    """``model``'s forward in int8 (``quantize_int8``): images (B, C, H, W) -> logits (B, K),
    compiled at the first call of each batch size. ``model`` stays as it was (its parameters
    say the device); the int8 graph is a copy."""

    def __init__(self, model: nn.Module, quantized: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.model = model.eval()
        self.run = torch.compile(quantized)
        self.training = False

    def train(self, mode: bool = True) -> Int8Inference:
        if mode:
            raise ConfigError(
                "an int8 model is for inference and cannot train: train the original model"
            )
        self.training = False  # its children stay as they are (an exported graph has no modes)
        return self

    def forward(self, images: Tensor) -> Tensor:
        from torch._inductor import config

        # freezing: the int8 weights become constants, packed once for oneDNN; set around the
        # call, where compilation happens (torchao's packing fails under options={"freezing"})
        with torch.no_grad(), config.patch(freezing=True), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "To copy construct from a tensor", UserWarning)
            return self.run(images)


def quantize_int8(model: nn.Module, calibration: Iterable[Tensor]) -> Int8Inference:
    """``model`` (on the CPU) with int8 weights and inputs of its linear layers, observed on
    every batch of ``calibration`` (B, C, H, W) in fp32 first."""
    require_torchao()
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as x86
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    batches = iter(calibration)
    first = next(batches)
    batch = torch.export.Dim("batch", min=1)
    with torch.no_grad(), eval_mode(model):
        example = first[:1].repeat(2, 1, 1, 1)  # a batch of one would be traced as a constant 1
        graph = torch.export.export(model, (example,), dynamic_shapes=({0: batch},)).module()
        # the linear layers alone: the patch embedding's convolution is ~1% of a ViT's work,
        # and Inductor's int8 convolution fails on some of its shapes (a 1-channel 7x7 stride 7)
        quantizer = x86.X86InductorQuantizer()
        linear = x86.get_default_x86_inductor_quantization_config()
        quantizer.set_module_type_qconfig(nn.Linear, linear)
        observed = prepare_pt2e(graph, quantizer)
        for images in (first, *batches):
            observed(images)
        quantized = convert_pt2e(observed)
    return Int8Inference(model, quantized)


@dataclass(frozen=True)
class Int8Check:
    """int8 against fp32 on the same held-out images."""

    images: int
    agreement: float  # the share of images whose top-1 class is the same
    top1_fp32: float
    top1_int8: float
    max_logit_change: float

    @property
    def top1_change(self) -> float:
        """The change of top-1 accuracy, in points (negative: int8 is worse)."""
        return 100 * (self.top1_int8 - self.top1_fp32)

    def __str__(self) -> str:
        return (
            f"top-1 {100 * self.top1_fp32:.2f}% -> {100 * self.top1_int8:.2f}% "
            f"({self.top1_change:+.2f} points), the same top-1 class for "
            f"{100 * self.agreement:.2f}%, largest logit change {self.max_logit_change:.3g}"
        )


def check_int8(
    reference: Callable[[Tensor], Tensor],
    quantized: Callable[[Tensor], Tensor],
    batches: Iterable[tuple[Tensor, Tensor]],
) -> Int8Check:
    """``quantized`` against ``reference`` (fp32) on ``batches`` of (images (B, C, H, W),
    labels (B,)) that calibration did not see."""
    count = same = right_fp32 = right_int8 = 0
    largest = 0.0
    with torch.inference_mode():
        for images, labels in batches:
            want, got = reference(images).float(), quantized(images).float()  # (B, K)
            count += len(labels)
            same += int((want.argmax(1) == got.argmax(1)).sum())
            right_fp32 += int((want.argmax(1) == labels).sum())
            right_int8 += int((got.argmax(1) == labels).sum())
            largest = max(largest, float((got - want).abs().max()))
    if count == 0:
        raise ValueError("check_int8 needs at least one held-out image")
    return Int8Check(count, same / count, right_fp32 / count, right_int8 / count, largest)


@dataclass(frozen=True)
class Calibrated:
    """A checkpoint's int8 model, the training images it was calibrated on (indices into the
    split's training images) and its check."""

    model: Int8Inference
    indices: list[int]
    check: Int8Check

    def said(self, split: Split) -> str:
        """The line a command says of it."""
        return (
            f"precision int8 (torchao PT2E; calibrated on {len(self.indices)} training images; "
            f"{_checked(self.check, split)})"
        )


def _checked(check: Int8Check, split: Split) -> str:
    return f"on {check.images:,} held-out images of {split.name}: {check}"


def _drawn(count: int, size: int, seed: int) -> torch.Tensor:
    """The first ``count`` of a seeded permutation of ``size`` indices."""
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed))[:count]


def int8_model(
    model: VisionTransformer | ResNetClassifier,
    split: Split,
    settings: InferenceConfig,
    *,
    batch_size: int,
    source: str,
    seed: int = 0,
) -> Calibrated:
    """``model`` (the checkpoint ``source``'s, on the CPU) in int8, calibrated on ``split``'s
    training images and checked on its evaluated images in batches of ``batch_size``, as
    ``settings`` (``int8_*``) say; a ``VitkitError`` when it has no training images or when the
    check moves top-1 accuracy by more than ``settings.int8_max_change`` points."""
    if split.train is None or len(split.train) == 0:
        raise VitkitError(
            f"--precision int8 calibrates on the training images of {source}'s data, and "
            f"{split.name} has none beside it: give data with a train split, or use bf16"
        )
    calibration, held_out = settings.int8_calibration, settings.int8_held_out
    max_change = settings.int8_max_change
    options = BatchOptions.evaluation(model.cfg, batch_size=batch_size)
    indices = _drawn(calibration, len(split.train), seed)
    images = (x for x, _ in batches_of(subset(split.train, indices), options).epoch(0))
    quantized = quantize_int8(model, images)
    checked = _drawn(held_out, len(split.dataset), seed)
    check = check_int8(
        model, quantized, batches_of(subset(split.dataset, checked), options).epoch(0)
    )
    if abs(check.top1_change) > max_change:
        raise VitkitError(
            f"int8 refused: {_checked(check, split)}; more than --int8-max-change "
            f"{max_change:g} points: use --precision bf16 or fp32, or allow more"
        )
    return Calibrated(quantized, indices.tolist(), check)
