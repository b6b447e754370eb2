"""The model's configuration, in the paper's and the official code's vocabulary [P §3.1, Table 1].

No torch import here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ..errors import ConfigError
from .dicts import from_dict
from .keys import Key, Section, check, key

Classifier = Literal["token", "gap", "map"]
Posemb = Literal["learn", "sincos2d", "none"]
Activation = Literal["gelu", "gelu_tanh"]
Architecture = Literal["vit", "resnet"]
ImageSize = int | tuple[int, int]


def require(cond: bool, name: str, value: Any, allowed: str) -> None:
    """A check between fields: ``ConfigError`` '<name>=<value> is not valid: expected ...'."""
    if not cond:
        raise ConfigError(f"{name}={value!r} is not valid: expected {allowed}")


_SIDES = Key("pixels: one side for a square, or (height, width)", ge=1)


def image_size_of(value: Any, name: str = "image_size") -> int | tuple[int, int]:
    """``value`` as an image size: a positive int, or a (height, width) pair of them (a list is
    taken as a pair, since JSON has no tuples); a square pair becomes its int. A ``ConfigError``
    naming ``name`` otherwise."""
    size = check(ImageSize, value, name=name, spec=_SIDES)
    return size if isinstance(size, int) or size[0] != size[1] else size[0]


def size_hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """An image size (an int for a square, or a pair) as (height, width)."""
    return (size, size) if isinstance(size, int) else (size[0], size[1])


@dataclass(frozen=True, kw_only=True)
class ResNetConfig(Section):
    """The BiT ResNet stem of a hybrid model [P §3.1 "Hybrid Architecture", PAPER.md A2].

    ``num_layers`` holds the number of bottleneck units per stage; ``()`` keeps only the root
    (7x7/2 conv, GroupNorm, ReLU, 3x3/2 max-pool), as in the official R+ViT-Ti/16.
    ``width_factor`` may be fractional: as in vit_jax, the root has ``int(64 * width_factor)``
    channels and stage ``i`` units are ``width * 2**i`` wide (x4 at their output), so every width
    is a multiple of the root's, which GroupNorm's 32 groups must divide.
    """

    SECTION: ClassVar[str] = "model.resnet"

    num_layers: tuple[int, ...] = key(
        doc="bottleneck units per stage, e.g. (3, 4, 9); () keeps the root only", ge=1
    )
    width_factor: float = key(1, doc="root width int(64 x width_factor)", gt=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.width > 0 and self.width % 32 == 0,
            "model.resnet.width_factor",
            self.width_factor,
            f"a root width int(64 x width_factor) that GroupNorm's 32 groups divide, "
            f"found {self.width} channels",
        )

    @classmethod
    def from_width(cls, num_layers: tuple[int, ...], width: int) -> ResNetConfig:
        """The config whose root has ``width`` channels (as a checkpoint's root conv shows);
        the factor stays an integer when it is one, so configs of the paper's hybrids read 1."""
        return cls(
            num_layers=num_layers, width_factor=width // 64 if width % 64 == 0 else width / 64
        )

    @property
    def width(self) -> int:
        """Channels of the root conv and of the first stage's bottlenecks (vit_jax's rounding)."""
        return int(64 * self.width_factor)

    @property
    def stride(self) -> int:
        """Total downsampling of the backbone: root conv 2 x max-pool 2 x 2 per later stage."""
        return 4 * 2 ** max(len(self.num_layers) - 1, 0)

    @property
    def out_channels(self) -> int:
        if not self.num_layers:
            return self.width
        return self.width * 2 ** (len(self.num_layers) - 1) * 4


# The largest model a new run or a checkpoint read may hold (``ModelConfig.why_not_new``): 4096
# pixels a side and 256 x 256 tokens (a /16 model at 4096 px). Where no weight ties the image size
# (posemb none or sincos2d, the ResNet baseline) a checkpoint's config.json alone set it: 10^6
# made predict allocate 21.8 GB, 6,000 hung on one 20-pixel image (issue 43). A run recorded
# beyond them resumes as it began (config/dicts.py ``check_new``).
MAX_IMAGE_SIDE, MAX_TOKENS = 4096, 256 * 256
# And at most 10^11 parameters (4.5x ViT-22B): hidden_size=10^9 in a checkpoint's config.json
# overflowed torch's size arithmetic building even the shape-only model (a traceback), and as a
# --set of a new run filled the machine's memory.
MAX_PARAMETERS = 10**11


@dataclass(frozen=True, kw_only=True)
class ModelConfig(Section):
    """A Vision Transformer, pure or hybrid [P §3.1, Table 1; DESIGN.md "Configuration"].

    ``num_classes=0`` means no head: the model returns pooled (pre-logits) features, as in timm.
    ``representation_size`` adds the pre-training "pre-logits" layer (dense + tanh).
    ``classifier`` pools with the class token (``'token'``), the mean of the patch tokens
    (``'gap'``) or big_vision's multihead attention pooling (``'map'``: a learned probe attends
    over the patch tokens); only ``'token'`` has a class token.
    ``arch='resnet'`` is the paper's CNN baseline instead of a ViT: the hybrid's BiT backbone
    (``resnet``), global average pooling and a linear head; the transformer fields are unused.
    ``image_size`` is an int (square images) or a (height, width) pair; a square pair is stored as
    its int, so one size has one spelling and two configs of it compare equal.
    """

    SECTION: ClassVar[str] = "model"

    image_size: ImageSize = key(
        doc="input resolution: S for S x S images, or (height, width); each side a multiple of "
        f"the patch stride; a new run's (and a checkpoint's) at most {MAX_IMAGE_SIDE} a side and "
        f"{MAX_TOKENS:,} tokens",
        ge=1,
    )
    patch_size: int = key(
        doc="pixels per patch side (on the ResNet's feature map for a hybrid)", ge=1
    )
    hidden_size: int = key(doc="D: the width of every token [P Table 1]", ge=1)
    num_layers: int = key(doc="transformer blocks [P Table 1]", ge=1)
    num_heads: int = key(doc="attention heads, a divisor of hidden_size [P Table 1]", ge=1)
    mlp_dim: int = key(doc="hidden units of each block's MLP [P Table 1]", ge=1)
    num_classes: int = key(
        1000, doc="classes of the head; 0: no head (features only); training: from the data", ge=0
    )
    in_chans: int = key(
        3, doc="image channels (1: greyscale); training: from the data unless set", ge=1
    )
    classifier: Classifier = key(
        "token", doc="pooling: the class token, global average (gap) or attention pooling (map)"
    )
    representation_size: int | None = key(
        None, doc="the pre-training pre-logits layer (dense + tanh) of this width, or none", ge=1
    )
    dropout_rate: float = key(
        0.0, doc="dropout after embeddings and in MLPs [P Table 3]", ge=0, lt=1
    )
    attention_dropout_rate: float = key(0.0, doc="dropout of attention weights", ge=0, lt=1)
    drop_path_rate: float = key(
        0.0, doc="stochastic depth: the last block's drop rate (linear in depth)", ge=0, lt=1
    )
    posemb: Posemb = key(
        "learn", doc="position embedding: learned 1D [P §3.1], fixed 2D sin-cos, or none"
    )
    act: Activation = key(
        "gelu", doc="MLP activation: exact GELU (timm, HF) or the tanh approximation (flax)"
    )
    layer_norm_eps: float = key(1e-6, doc="LayerNorm epsilon (the official code's 1e-6)", gt=0)
    head_bias_init: float = key(0.0, doc="initial bias of the zero-initialised head")
    resnet: ResNetConfig | None = key(
        None, doc="the BiT backbone of a hybrid (or of arch=resnet); none for a pure ViT"
    )
    arch: Architecture = key(
        "vit", doc="vit, or resnet: the paper's CNN baseline (the backbone with a linear head)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "image_size", image_size_of(self.image_size, "model.image_size"))
        require(
            self.hidden_size % self.num_heads == 0,
            "model.num_heads",
            self.num_heads,
            f"a divisor of hidden_size={self.hidden_size}",
        )
        if self.posemb == "sincos2d":
            require(
                self.hidden_size % 4 == 0,
                "model.hidden_size",
                self.hidden_size,
                "a multiple of 4 for posemb='sincos2d'",
            )
        if self.arch == "resnet":
            require(
                self.resnet is not None,
                "model.resnet",
                self.resnet,
                "a ResNetConfig: arch='resnet' is the BiT backbone with a linear head",
            )
            require(
                self.representation_size is None,
                "model.representation_size",
                self.representation_size,
                "None for arch='resnet' (its head is one linear layer on the pooled features)",
            )
            return  # 'SAME' padding and global pooling take any image size
        stride = self.total_stride
        require(
            all(side % stride == 0 for side in self.image_hw),
            "model.image_size",
            self.image_size,
            f"each side a multiple of the total stride {stride} (patch_size"
            + (" x ResNet stride" if self.resnet else "")
            + ")",
        )

    def why_not_new(self) -> tuple[str, str] | None:
        """``image_size`` beyond ``MAX_IMAGE_SIDE`` a side, or a ViT's beyond ``MAX_TOKENS``
        patches: the memory and time a model of it takes grow with the pixels and the tokens;
        or a ViT of more than ``MAX_PARAMETERS`` weights (the key that sizes most of them)."""
        if max(self.image_hw) > MAX_IMAGE_SIDE:
            return "image_size", f"expected at most {MAX_IMAGE_SIDE} pixels a side"
        gh, gw = self.grid
        if self.arch == "vit" and gh * gw > MAX_TOKENS:
            return "image_size", (
                f"expected at most {MAX_TOKENS:,} tokens, found {gh} x {gw} patches of "
                f"{self.total_stride} pixels"
            )
        if self.arch == "vit":
            parts = self.weights_by_key
            total = sum(parts.values())
            if total > MAX_PARAMETERS:
                return max(parts, key=lambda k: parts[k]), (
                    f"expected a model of at most {MAX_PARAMETERS:,} parameters, found about "
                    f"{total:.2e} (depth {self.num_layers}, width {self.hidden_size}, MLP "
                    f"{self.mlp_dim}, {self.num_classes:,} classes, patches of {self.patch_size})"
                )
        return None

    @property
    def weights_by_key(self) -> dict[str, int]:
        """A ViT's weight matrices (the biases and norms left out: a lower bound of its
        parameters) by the key that sizes each part most: attention and the position embedding
        (hidden_size), the MLPs (mlp_dim; both num_layers where the depth exceeds the widths),
        the head (num_classes), the patch embedding (patch_size). Known without building it; a
        hybrid's ResNet is not counted."""
        width, depth, mlp, (gh, gw) = self.hidden_size, self.num_layers, self.mlp_dim, self.grid
        blocks = {
            "hidden_size": depth * 4 * width * width + (gh * gw + 1) * width,
            "mlp_dim": depth * 2 * width * mlp,
        }
        if depth > max(width, mlp):  # the depth, not a width, is what is out of bounds
            blocks = {"num_layers": sum(blocks.values())}
        return {
            **blocks,
            "num_classes": (self.representation_size or width) * (self.num_classes + width),
            "patch_size": self.in_chans * self.patch_size**2 * width,
        }

    @property
    def total_stride(self) -> int:
        """Pixels per token side: the patch size, times the backbone stride for a hybrid."""
        return self.patch_size * (self.resnet.stride if self.resnet else 1)

    @property
    def image_hw(self) -> tuple[int, int]:
        """``image_size`` as (height, width)."""
        return size_hw(self.image_size)

    @property
    def grid(self) -> tuple[int, int]:
        """The patch grid (gh, gw) at ``image_size``: tokens per column and per row."""
        h, w = self.image_hw
        return h // self.total_stride, w // self.total_stride

    @property
    def grid_size(self) -> int:
        """Tokens per side of a square patch grid at ``image_size`` (``grid`` for any grid)."""
        gh, gw = self.grid
        if gh != gw:
            raise ConfigError(
                f"grid_size is the side of a square grid, but image_size={self.image_size!r} "
                f"makes a {gh}x{gw} grid: use grid (gh, gw)"
            )
        return gh

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def num_prefix_tokens(self) -> int:
        return 1 if self.classifier == "token" else 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelConfig:
        return from_dict(cls, data)


# The regularisation: what a recipe keeps when a preset or a checkpoint supplies the architecture.
REGULARISATION = ("dropout_rate", "attention_dropout_rate", "drop_path_rate")
# What fine-tuning may change in pre-trained weights, the one list that both `finetune
# --init-from` and `create_model(pretrained=)` take [P App. B.1.1]: the head's classes (a new
# zero-initialised head), the resolution (the position embeddings resized) and the
# regularisation. Not representation_size: fine-tuning drops the pre-logits with the whole head
# (its head is one linear layer [P §3.1]); a new width would be a new, untrained layer.
FINETUNE_KEYS = ("num_classes", "image_size", *REGULARISATION)
