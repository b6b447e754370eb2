"""A checkpoint opened to run: read once, with its class names and preprocessing; then its
engine and precision decided once, for the batches it will take, each decision said with its
reason (``Inference``). ``vitkit predict``, ``eval``, ``fewshot`` and ``inspect`` run a checkpoint
through it, and so can a Python user::

    inference = Inference.open("runs/fmnist/best")
    inference.prepare(batch=64)                      # says: precision ..., engine ...
    for path, top in inference.ranked(["shoe.png"], top=3):
        print(path, top)
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

import torch
from torch import Tensor, nn

from ..config.inference import InferenceConfig
from ..config.keys import require_count
from ..data import Preprocess, UnreadableImageWarning
from ..data.bounds import printable
from ..data.image_file import read_image
from ..errors import ConfigError, VitkitError
from ..io.api import load_with_meta
from ..model.flops import count_flops
from ..runtime.arithmetic import cpu_features, inference_precision
from ..runtime.machine import this_device
from ..runtime.openvino import openvino_version
from .engines import decide_engine

if TYPE_CHECKING:
    from ..data.run_data import Split
    from ..io.metadata import WeightsMeta
    from ..model import ResNetClassifier, VisionTransformer


class Inference(nn.Module):
    """A checkpoint's model as a function of images (B, C, H, W) -> logits (B, K), run by the
    engine and in the precision ``prepare`` decides, under ``inference_mode``, in eval mode.

    Before ``prepare`` it runs eagerly in fp32; its eager model (``model``) stays the
    checkpoint's, for what needs one (few-shot features, attention maps: ``autocast`` is the
    dtype they run under)."""

    def __init__(
        self,
        model: VisionTransformer | ResNetClassifier,
        meta: WeightsMeta,
        *,
        source: str,
        settings: InferenceConfig,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.model = model.eval().to(device)
        self.meta = meta  # what travels with the weights, as recorded (and checked when read)
        self.source = source  # the checkpoint as named, for messages
        self.settings = settings
        self.device = device
        recorded = meta.class_names or [str(i) for i in range(model.cfg.num_classes)]
        self.class_names = recorded  # a name per output, as recorded: what --json gives
        self.names = [printable(name) for name in recorded]  # as a terminal or a figure shows it
        # the recorded preprocessing, else the official one at the model's resolution
        self.preprocess = meta.preprocess or Preprocess(
            image_size=model.cfg.image_size, in_chans=model.cfg.in_chans
        )
        self.precision: str | None = None  # decided by prepare: fp32, bf16 or int8
        self.engine: str | None = None  # decided by prepare, in words
        self.autocast: torch.dtype | None = None  # the eager model's autocast dtype (bf16)
        self.run: nn.Module = _Eager(self.model, None)
        self.eval()

    @classmethod
    def open(
        cls,
        source: str,
        settings: InferenceConfig | None = None,
        *,
        device: str | torch.device = "auto",
        num_heads: int | None = None,
    ) -> Inference:
        """The checkpoint ``source`` (a path in any format vitkit reads, or a pretrained name)
        opened on ``device`` (``auto``: CUDA when torch sees a GPU, else the CPU), read once."""
        settings = settings or InferenceConfig()
        if not isinstance(device, torch.device):
            device = this_device(device, setting="--device")  # type: ignore[arg-type]  # checked there
        if settings.precision == "int8" and device.type != "cpu":
            raise VitkitError(
                f"--precision int8 runs on the CPU (x86 int8 kernels): not on {device}"
            )
        model, meta = load_with_meta(source, num_heads=num_heads)
        return cls(model, meta, source=str(source), settings=settings, device=device)

    def prepare(
        self,
        batch: int,
        *,
        images: int | None = None,
        calibration: Split | None = None,
        intermediates: bool = False,
        say: TextIO | None = None,
    ) -> Inference:
        """Decide the precision and the engine once, for forward passes of ``batch`` images of
        a run of ``images`` (None: not known), and say each with its reason on ``say`` (None:
        stdout). int8 is calibrated on ``calibration``'s training images and checked on its
        images (None: the data the checkpoint records). ``intermediates``: the caller reads the
        model's own features or attention (``model``), so the engine is torch, eager. A second
        call keeps the first decisions."""
        require_count("batch", batch)  # '32' failed a comparison deep inside; -5, 2.5 were taken
        if images is not None:
            require_count("images", images)
        if self.precision is not None:
            return self
        say = say or sys.stdout
        settings = self.settings
        openvino = openvino_version()  # the installed one, read once (importlib.metadata: ~35 ms)
        if settings.precision == "int8":
            self.run = self._int8(batch, calibration, say)
            self.precision, self.engine = "int8", "torch, compiled by inductor (int8)"
            why = "--precision int8"
            if openvino is not None and cpu_features().amx_bf16:
                why += "; slower on AMX than the openvino engine's bf16 (--precision auto)"
            print(f"engine {self.engine} ({why})", file=say, flush=True)
            return self
        image_gflop = count_flops(self.model.cfg) / 1e9
        chosen, why = inference_precision(
            settings.precision,  # int8 taken above
            self.device,
            gflop=image_gflop * max(batch, 1),
        )
        print(f"precision {chosen} ({why})", file=say, flush=True)
        self.precision = chosen
        self.autocast = torch.bfloat16 if chosen == "bf16" else None
        if intermediates:
            engine, why = "torch", "the model's own features and attention are read"
        else:
            engine, why = decide_engine(
                settings.engine,
                device=self.device,
                precision=chosen,
                compile=settings.compile,
                images=images,
                image_gflop=image_gflop,
                openvino=openvino,
            )
        if engine == "openvino":
            from .openvino import OpenVINOInference

            self.run = OpenVINOInference(
                self.model, precision="bf16" if chosen == "bf16" else "fp32"
            )
            self.engine = f"openvino {openvino}, {chosen}"
        elif settings.compile:
            from .compiled import choose_backend, optimize_for_inference

            precision: Literal["fp32", "bf16"] = "bf16" if chosen == "bf16" else "fp32"
            # torch was chosen above: auto's backend is torch's (optimize_for_inference's own
            # auto may pick OpenVINO, which --engine torch and --fast exclude)
            backend = settings.backend
            if backend == "auto":
                backend = choose_backend(self.model, precision=precision)
            compiled = optimize_for_inference(self.model, precision=precision, backend=backend)
            self.run = compiled
            self.engine = f"torch, compiled by {compiled.backend}"
            why += "" if settings.backend != "auto" else "; backend auto: measured"
        else:
            self.run = _Eager(self.model, self.autocast)
            self.engine = "torch, eager"
        print(f"engine {self.engine} ({why})", file=say, flush=True)
        return self

    def _int8(self, batch: int, calibration: Split | None, say: TextIO) -> nn.Module:
        """The int8 model, calibrated and checked on ``calibration`` (``inference.int8``)."""
        from .int8 import int8_model

        if calibration is None:  # the data the checkpoint was trained on
            from ..data.run_data import evaluation_split

            if self.meta.run is None:
                raise VitkitError(
                    f"--precision int8 calibrates on the training images of the data a "
                    f"checkpoint records, and {self.source} records no data: use vitkit eval "
                    f"{self.source} --data SPEC --precision int8, or bf16"
                )
            calibration = evaluation_split(None, self.meta.run, self.model.cfg, source=self.source)
        calibrated = int8_model(
            self.model, calibration, self.settings, batch_size=batch, source=self.source
        )
        print(calibrated.said(calibration), file=say, flush=True)
        return calibrated.model

    def forward(self, images: Tensor) -> Tensor:
        return self.run(images)  # (B, K)

    def train(self, mode: bool = True) -> Inference:
        if mode:
            raise ConfigError(
                "an Inference runs a checkpoint and cannot train: train its model, or "
                "vitkit.load the checkpoint"
            )
        self.training = False  # its engine's modules keep their own (an int8 graph has none)
        self.model.eval()
        return self

    def ranked(
        self, paths: Sequence[str | Path], *, top: int = 5, batch_size: int = 64
    ) -> Iterator[tuple[Path, list[tuple[str, float]] | str]]:
        """Each image file's ``top`` (class name, probability) pairs, best first, or why it
        cannot be read (warned too), in the order of ``paths``, ``batch_size`` files a forward
        pass, read with the checkpoint's preprocessing (upright, as EXIF says). Prepares for
        ``batch_size`` files if ``prepare`` was not called."""
        self.prepare(min(batch_size, len(paths)), images=len(paths))
        files = [Path(p) for p in paths]
        for start in range(0, len(files), batch_size):
            chunk = files[start : start + batch_size]
            images: dict[Path, Tensor] = {}  # the chunk's readable images, each (1, C, H, W)
            results: dict[Path, list[tuple[str, float]] | str] = {}
            for path in chunk:
                try:
                    images[path] = read_image(path, self.preprocess)
                except VitkitError as e:
                    results[path] = str(e)
                    warnings.warn(f"{e}; skipped", UnreadableImageWarning, stacklevel=2)
            if images:
                x = torch.cat(list(images.values())).to(self.device)  # (B, C, H, W)
                probs = self(x).float().softmax(dim=-1)  # (B, K)
                best = probs.topk(min(top, probs.shape[-1]), dim=-1)  # (B, top)
                for path, ps, ids in zip(
                    images, best.values.tolist(), best.indices.tolist(), strict=True
                ):
                    results[path] = [(self.class_names[i], p) for p, i in zip(ps, ids, strict=True)]
            for path in chunk:
                yield path, results[path]


class _Eager(nn.Module):
    """``model``'s own forward under ``inference_mode`` and ``autocast`` (a dtype, or None)."""

    def __init__(self, model: nn.Module, autocast: torch.dtype | None) -> None:
        super().__init__()
        self.model = model
        self.autocast = autocast

    def forward(self, images: Tensor) -> Tensor:
        on = self.autocast is not None
        with (
            torch.inference_mode(),
            torch.autocast(images.device.type, dtype=self.autocast, enabled=on),
        ):
            return self.model(images)  # (B, K)
