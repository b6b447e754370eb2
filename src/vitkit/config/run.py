"""A training run's configuration: the model, the data, the optimizer, the loop (``RunConfig``).

``RunConfig`` is saved as ``config.json`` in every run directory and inside every checkpoint;
``data.dataset`` names the data with a spec such as ``cifar10:DIR``. The keys of files written by
an earlier vitkit are folded in by vitkit.compat (``RENAMED``). No torch import here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .data import DataConfig
from .dicts import from_dict
from .keys import Section, key
from .model import ModelConfig, require
from .train import OptimConfig, TrainConfig

# Where and how a run is spread over processes, devices and decoding workers, not what it
# computes: a checkpoint resumes under any of them (its tensors are written from the CPU; a batch
# depends on (seed, epoch, step) only).
# where the run computes, and when it ends: a resume may change them, and a run's default
# directory is named without them (compose.default_run_dir), so that the same command with a
# larger train.time_budget continues the run
PLACEMENT = (
    "train.parallel",
    "train.activation_checkpointing",
    "train.device",
    "data.num_workers",
    "train.time_budget",
)


@dataclass(frozen=True, kw_only=True)
class RunConfig(Section):
    """Everything a training run needs; saved as ``config.json`` in the run directory."""

    model: ModelConfig = key(doc="the model")
    data: DataConfig = key(doc="the data")
    optim: OptimConfig = key(doc="the optimizer")
    train: TrainConfig = key(doc="the loop")
    init_from: str | None = key(
        None, doc="pre-trained weights to start from: head replaced, posemb resized"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.train.objective == "mpp":
            require(
                self.model.arch == "vit" and self.model.resnet is None,
                "train.objective",
                self.train.objective,
                "'classification' for this model: masked patch prediction needs a plain ViT (a "
                "hybrid's ResNet would see the masked patches' pixels through its neighbours)",
            )
            require(
                not self.data.test_flip,
                "data.test_flip",
                self.data.test_flip,
                "False with train.objective='mpp' (its evaluation predicts patches, not classes)",
            )
            require(
                self.train.ema is None,
                "train.ema",
                self.train.ema,
                "None with train.objective='mpp' (the mask embedding and head are not averaged)",
            )
            require(
                not self.data.random_erase,
                "data.random_erase",
                self.data.random_erase,
                "0 with train.objective='mpp' (noise would replace the patch colours it predicts)",
            )
        require(  # more pads crops that are mostly zeros; 10^5 filled the memory, "use a
            # smaller batch" the message (the model's size: the images are resized to it first)
            self.data.crop_padding <= max(self.model.image_hw),
            "data.crop_padding",
            self.data.crop_padding,
            f"at most the model's image size ({max(self.model.image_hw)} px)",
        )
        require(
            not (self.optim.name == "muon" and self.model.arch != "vit"),
            "optim.name",
            self.optim.name,
            "'adam' for a ResNet (Muon takes the transformer blocks' weight matrices)",
        )
        require(
            not (self.optim.layer_decay is not None and self.model.arch != "vit"),
            "optim.layer_decay",
            self.optim.layer_decay,
            "none for a ResNet (layer-wise decay counts a ViT's transformer blocks)",
        )
        require(
            not (self.optim.name == "muon" and self.train.parallel == "fsdp"),
            "optim.name",
            self.optim.name,
            "'adam' with train.parallel='fsdp' (Muon orthogonalises whole matrices, FSDP shards "
            "them), or train.parallel='ddp'",
        )
        require(
            not (self.train.activation_checkpointing and self.model.arch != "vit"),
            "train.activation_checkpointing",
            self.train.activation_checkpointing,
            "False for a ResNet (checkpointing is per transformer block)",
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        return from_dict(cls, data)
