"""An inference function whose ``precision="auto"`` is decided per input shape (``ByShape``): the
base of the compiled torch path (compiled.py) and the OpenVINO engine (openvino.py)."""

from __future__ import annotations

from typing import Literal

from torch import Tensor, nn

from ..model.flops import count_flops
from ..runtime.arithmetic import decide_auto

Precision = Literal["auto", "fp32", "bf16"]


class ByShape(nn.Module):
    """An inference function of ``model`` whose ``precision="auto"`` is decided for the first
    batch of each input shape, as ``--precision auto`` decides for a command's batches
    (``runtime.arithmetic.decide_auto``), and kept."""

    def __init__(self, model: nn.Module, precision: Precision) -> None:
        super().__init__()
        self.model = model.eval()
        self.precision = precision
        self.decided: dict[tuple[int, ...], bool] = {}  # an input shape -> bf16 for it

    def bf16_for(self, images: Tensor) -> bool:
        """Whether a batch of this shape is computed in bf16 (decided at its first call)."""
        if self.precision != "auto":
            return self.precision == "bf16"
        shape = tuple(images.shape)
        if shape not in self.decided:
            size = (images.shape[-2], images.shape[-1])
            cfg = self.model.cfg  # a vitkit model's config (its ModelConfig)
            gflop = count_flops(cfg, size) * images.shape[0] / 1e9  # type: ignore[arg-type]
            chosen, _ = decide_auto(images.device, task="infer", gflop=gflop)
            self.decided[shape] = chosen == "bf16"
        return self.decided[shape]
