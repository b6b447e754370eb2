"""Hugging Face ``ViTModel`` / ``ViTForImageClassification``: weights in and out [P §3.1].

HF's ViT is the paper's pure ViT (class token, learned 1D position embeddings, Eq. 1-4) with q, k
and v as three dense layers where vitkit (as timm) fuses them into one ``qkv``. The crosswalk of
names is written once (``_LAYER``, :func:`_crosswalk`) and used both ways; it reads the layout
``save_pretrained`` writes and transformers 4 holds (``encoder.layer.{i}.``) and transformers 5's
(``layers.{i}.``); :func:`write_hf` fills whichever the installed transformers builds.

Logits agree at the checkpoint's resolution (at other sizes HF interpolates position embeddings
bicubically, vitkit bilinearly); dropout and stochastic depth are 0 both ways. Refused, never
dropped: ``embeddings.mask_token``, a model with both pre-logits and a head (HF's classifier skips
the pooler), a non-square patch. ``image_size`` may be a (height, width) pair both ways.
An export also carries the class names (``id2label``; vitkit's ``wnids`` and ``pretrained`` keys
beside them) and vitkit's ``Preprocess`` as a ``preprocessor_config.json`` for
``ViTImageProcessor`` (whole image resized, antialiased, one mean and std; its
``image_orientation`` says that image files are turned upright first); reading maps it back,
or warns and drops one a ``Preprocess`` cannot express. A 1-channel model is exported as the
3-channel model that reads RGB as it reads PIL's 'L' (:func:`_rgb_from_luma`). transformers is
imported only by :func:`write_hf`; reading needs JSON and safetensors (or a tensor-only ``.bin``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...config import ConfigError, ModelConfig
from ...data.transforms import Preprocess
from ...errors import MissingExtraError, MissingFileError
from ...files import atomic_files
from ...model import VisionTransformer
from ...runtime.torchao import torchao_import
from ..checkpoint import (
    CheckpointError,
    bounded,
    check_depth,
    check_state_dict,
    load_state_dict_strict,
    read_json,
    read_safetensors,
    read_torch,
    safetensors_os_error,
)
from ..metadata import WeightsMeta, checked_metadata, fitted_preprocess
from .hf_processor import PROCESSOR_FILE, processor_config, read_preprocess

PREFIX = "vit."  # the backbone's name inside ViTForImageClassification


_PATCH_KEY = "embeddings.patch_embeddings.projection.weight"


# PIL's 'L' conversion (ITU-R 601-2 luma): L = R * 299/1000 + G * 587/1000 + B * 114/1000.
LUMA = (0.299, 0.587, 0.114)


# HF ``hidden_act`` -> vitkit ``act``. gelu_new / gelu_fast are tanh-approximation formulas within
# 1.2e-7 of torch's tanh GELU; anything else (relu, quick_gelu, ...) is not the paper's MLP.
_ACTS = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
}


_ACT_OUT = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh"}


# ViTConfig's defaults, used where a config.json leaves a field out (as transformers would).
_HF_DEFAULTS: dict[str, Any] = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-12,
    "image_size": 224,
    "patch_size": 16,
    "num_channels": 3,
    "qkv_bias": True,
    "pooler_act": "tanh",
}


# One encoder layer: vitkit module -> HF module(s), per layout. Three names = fused q, k, v.
# "classic": what save_pretrained writes and transformers 4 modules hold; "modular": the
# names of transformers 5 modules (it renames on load and back on save).
_LAYER_PREFIX = {"classic": "encoder.layer.{i}.", "modular": "layers.{i}."}


_LAYER = {
    "classic": {
        "norm1": ("layernorm_before",),
        "attn.qkv": (
            "attention.attention.query",
            "attention.attention.key",
            "attention.attention.value",
        ),
        "attn.proj": ("attention.output.dense",),
        "norm2": ("layernorm_after",),
        "mlp.fc1": ("intermediate.dense",),
        "mlp.fc2": ("output.dense",),
    },
    "modular": {
        "norm1": ("layernorm_before",),
        "attn.qkv": ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
        "attn.proj": ("attention.o_proj",),
        "norm2": ("layernorm_after",),
        "mlp.fc1": ("mlp.fc1",),
        "mlp.fc2": ("mlp.fc2",),
    },
}


def looks_like_hf_state(keys: Iterable[str]) -> bool:
    """True if ``keys`` hold a Hugging Face ViT patch embedding (with or without ``vit.``)."""
    return any(k in (_PATCH_KEY, PREFIX + _PATCH_KEY) for k in keys)


def _crosswalk(cfg: ModelConfig, layout: str, prefix: str) -> list[tuple[str, tuple[str, ...]]]:
    """(vitkit name, HF names) for every tensor of ``cfg``; more than one HF name = fused qkv."""
    modules: list[tuple[str, tuple[str, ...]]] = [
        ("patch_embed.proj", (prefix + "embeddings.patch_embeddings.projection",)),
        ("norm", (prefix + "layernorm",)),
    ]
    for i in range(cfg.num_layers):
        layer = prefix + _LAYER_PREFIX[layout].format(i=i)
        modules += [
            (f"blocks.{i}.{ours}", tuple(layer + n for n in hf))
            for ours, hf in _LAYER[layout].items()
        ]
    if cfg.representation_size is not None:
        modules.append(("pre_logits.fc", (prefix + "pooler.dense",)))
    if cfg.num_classes:
        modules.append(("head", ("classifier",)))  # outside the backbone: never prefixed
    pairs: list[tuple[str, tuple[str, ...]]] = [
        ("cls_token", (prefix + "embeddings.cls_token",)),
        ("pos_embed", (prefix + "embeddings.position_embeddings",)),
    ]
    for ours, hf in modules:
        for leaf in ("weight", "bias"):
            pairs.append((f"{ours}.{leaf}", tuple(f"{n}.{leaf}" for n in hf)))
    return pairs


def _hf_shapes(cfg: ModelConfig, layout: str, prefix: str) -> dict[str, Tensor]:
    """Every HF tensor ``cfg`` implies, as shape-only (meta) tensors for the strict check."""
    with torch.device("meta"):
        ours = VisionTransformer(cfg).state_dict()
    shapes: dict[str, Tensor] = {}
    for name, hf in _crosswalk(cfg, layout, prefix):
        # a fused qkv (3D, ...) splits into q, k, v: 3 x (D, ...)
        shapes.update(zip(hf, ours[name].chunk(len(hf), dim=0), strict=True))
    return shapes


def _layout_and_prefix(keys: Iterable[str]) -> tuple[str, str]:
    """Which key layout a state dict uses ('classic' or 'modular'), and its backbone prefix."""
    keys = list(keys)
    prefix = PREFIX if any(k.startswith(PREFIX) for k in keys) else ""
    body = [k[len(prefix) :] for k in keys if k.startswith(prefix)]
    modular = any(k.startswith("layers.") for k in body) and not any(
        k.startswith("encoder.") for k in body
    )
    return ("modular" if modular else "classic"), prefix


def _square(name: str, value: Any) -> Any:
    """HF allows (height, width) patch sizes; vitkit's patches are square."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or value[0] != value[1]:
            raise CheckpointError(f"{name}={list(value)}: vitkit's ViT takes square {name}s only")
        return value[0]
    return value


def _model_config(
    hf_config: Mapping[str, Any], *, num_classes: int, has_pooler: bool
) -> ModelConfig:
    """The ``ModelConfig`` of a HF ``ViTConfig`` dict; fields it leaves out take HF's defaults."""

    def get(key: str) -> Any:
        value = hf_config.get(key)
        return _HF_DEFAULTS[key] if value is None else value

    act = get("hidden_act")
    if act not in _ACTS:
        raise CheckpointError(
            f"hidden_act={act!r} is not the paper's GELU: expected one of {sorted(_ACTS)}"
        )
    if get("qkv_bias") is not True:
        raise CheckpointError("qkv_bias=False: vitkit's attention always has q, k, v biases")
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    head_dim = hf_config.get("head_dim")
    if head_dim is not None and head_dim * heads != hidden:
        raise CheckpointError(
            f"head_dim={head_dim} x num_attention_heads={heads} != hidden_size={hidden}: "
            "vitkit's heads split the hidden size"
        )
    representation_size = None
    if has_pooler:
        if get("pooler_act") != "tanh":
            raise CheckpointError(
                f"pooler_act={get('pooler_act')!r}: vitkit's pre-logits layer is dense + tanh"
            )
        representation_size = hf_config.get("pooler_output_size") or hidden
    eps = get("layer_norm_eps")  # HF's default is 1e-12, not the official 1e-6: kept exactly
    if isinstance(eps, int) and not isinstance(eps, bool):
        eps = float(eps)  # ModelConfig takes a float; a hand-written JSON may hold an int
    try:
        cfg = ModelConfig(
            image_size=get("image_size"),  # an int or a (height, width) pair, as ViTConfig's
            patch_size=_square("patch_size", get("patch_size")),
            hidden_size=hidden,
            num_layers=get("num_hidden_layers"),
            num_heads=heads,
            mlp_dim=get("intermediate_size"),
            num_classes=num_classes,
            in_chans=get("num_channels"),
            classifier="token",
            representation_size=representation_size,
            posemb="learn",
            act=_ACTS[act],  # type: ignore[arg-type]  # a str; ModelConfig checks the Activation
            layer_norm_eps=eps,
        )
        return bounded(cfg)
    except ConfigError as e:
        raise CheckpointError(f"Hugging Face config does not describe a vitkit ViT: {e}") from None


def read_hf(
    state: Mapping[str, Tensor], hf_config: Mapping[str, Any]
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """Convert a HF ViT state dict (keys with or without ``vit.``) and its config dict.

    The config's architecture fields decide the model; the weights decide whether there is a
    pooler (-> pre-logits, R = ``pooler_output_size``) and a classifier (-> head, K from
    ``classifier.weight``). The config's depth is checked against the weights' layers first (a
    config of 20,000 layers is not built to find that the weights hold one); then every missing,
    unexpected and mis-shaped tensor is listed in one ``CheckpointError``. The returned tensors
    may share memory with ``state`` (q, k, v are copied into the fused qkv).
    """
    model_type = hf_config.get("model_type", "vit")
    if model_type != "vit":
        raise CheckpointError(
            f"model_type={model_type!r}: expected 'vit' (ViTModel / ViTForImageClassification)"
        )
    layout, prefix = _layout_and_prefix(state)
    has_pooler = any(k.startswith(prefix + "pooler.") for k in state)
    if has_pooler and any(k.startswith("classifier.") for k in state):
        raise CheckpointError(
            "this state dict has both a pooler and a classifier; HF's classifier reads the class "
            "token without the pooler, which vitkit's head (after pre-logits) cannot express"
        )
    head = state.get("classifier.weight", state.get("classifier.bias"))
    cfg = _model_config(
        hf_config, num_classes=0 if head is None else head.shape[0], has_pooler=has_pooler
    )
    source = "Hugging Face state dict"
    layer = prefix + _LAYER_PREFIX[layout]
    check_depth(cfg.num_layers, state, layer, what="num_hidden_layers", source=source)
    try:
        check_state_dict(_hf_shapes(cfg, layout, prefix), state, source=source)
    except CheckpointError as e:
        # refused, not dropped: strict loading drops nothing silently, and vitkit's masked patch
        # prediction [P §4.6] corrupts patches without a learned mask token
        if any(k.endswith("embeddings.mask_token") for k in state):
            raise CheckpointError(
                f"{e} | embeddings.mask_token is the masked-image-modeling token "
                "(ViTForMaskedImageModeling, use_mask_token=True), which vitkit's ViT does not "
                "have: delete it from the state dict to load the encoder alone"
            ) from None
        raise
    ours = {
        name: torch.cat([state[n] for n in hf], dim=0) if len(hf) > 1 else state[hf[0]]
        for name, hf in _crosswalk(cfg, layout, prefix)
    }
    return cfg, ours


def _class_names(hf_config: Mapping[str, Any], num_classes: int) -> list[str] | None:
    """Class names from ``id2label`` when they cover 0..K-1 and are not HF's ``LABEL_{i}``."""
    id2label = hf_config.get("id2label")
    if not num_classes or not isinstance(id2label, Mapping):
        return None
    try:
        labels = {int(k): str(v) for k, v in id2label.items()}
    except (TypeError, ValueError):
        return None
    if sorted(labels) != list(range(num_classes)):
        return None
    names = [labels[i] for i in range(num_classes)]
    return None if names == [f"LABEL_{i}" for i in range(num_classes)] else names


def _read_weights(directory: Path) -> dict[str, Tensor]:
    """``model.safetensors``, its sharded form, or a tensor-only ``pytorch_model.bin``."""
    if (directory / "model.safetensors").is_file():
        return read_safetensors(directory / "model.safetensors")
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, Mapping):
            raise CheckpointError(f"{index}: no weight_map")
        state: dict[str, Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            if not isinstance(shard, str) or Path(shard).name != shard:
                raise CheckpointError(f"{index}: shard {shard!r} is not a file in {directory}")
            state.update(read_safetensors(directory / shard))
        return state
    if (directory / "pytorch_model.bin").is_file():
        return read_torch(directory / "pytorch_model.bin")
    raise MissingFileError(
        f"{directory}: no weights found; expected model.safetensors, "
        "model.safetensors.index.json (sharded) or pytorch_model.bin"
    )


def read_hf_dir(
    path: str | os.PathLike,
) -> tuple[ModelConfig, dict[str, Tensor], WeightsMeta]:
    """Config, weights (vitkit layout) and what travels with them (checked as
    ``WeightsMeta.from_dict`` checks it) of a ``save_pretrained`` directory: ``class_names`` from
    ``id2label`` when they are real names, ``wnids`` and ``pretrained`` from the config when it
    has them (a ``pretrained`` that is not a string is another tool's key, and ignored),
    ``preprocess`` from ``preprocessor_config.json`` when there is one that a ``Preprocess``
    expresses. Does not import transformers."""
    directory = Path(path)
    if not directory.is_dir():
        if not directory.exists():
            raise MissingFileError(f"checkpoint not found: {directory}")
        raise CheckpointError(f"{directory}: expected a Hugging Face save_pretrained directory")
    hf_config = read_json(directory / "config.json")
    model_type = hf_config.get("model_type")
    if model_type != "vit":
        raise CheckpointError(
            f"{directory / 'config.json'}: model_type={model_type!r}, but vitkit reads Hugging "
            "Face ViT (model_type 'vit': ViTModel / ViTForImageClassification)"
        )
    state = _read_weights(directory)
    try:
        cfg, ours = read_hf(state, hf_config)
    except CheckpointError as e:
        raise CheckpointError(f"{directory}: {e}") from None
    pretrained = hf_config.get("pretrained")  # vitkit's key, or another tool's if no string
    recorded = {
        "class_names": _class_names(hf_config, cfg.num_classes),
        "wnids": hf_config.get("wnids"),
        "pretrained": pretrained if isinstance(pretrained, str) else None,
    }
    if (directory / PROCESSOR_FILE).is_file():
        processor = read_json(directory / PROCESSOR_FILE)
        recorded["preprocess"] = read_preprocess(processor, cfg, directory / PROCESSOR_FILE)
    meta = WeightsMeta.from_dict(
        recorded, cfg, source=str(directory), file=str(directory / "config.json")
    )
    return cfg, ours, meta


def read_hf_module(model: nn.Module) -> tuple[ModelConfig, dict[str, Tensor]]:
    """Convert a live transformers ``ViTModel`` / ``ViTForImageClassification``."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise TypeError(
            f"expected a transformers ViT model with a .config, got {type(model).__name__}"
        )
    return read_hf(model.state_dict(), config.to_dict())


def _unexportable(cfg: ModelConfig) -> list[str]:
    """Why HF's ViT cannot express ``cfg`` (empty when it can)."""
    reasons = []
    if cfg.resnet is not None:
        reasons.append("it is a hybrid (ResNet + ViT); HF's ViTModel has no ResNet stem")
    if cfg.classifier == "map":
        reasons.append(
            "classifier='map' (an attention-pooling head, attn_pool.*); HF's ViT has no MAP head "
            "and always pools the class token"
        )
    elif cfg.classifier != "token":
        reasons.append(f"classifier={cfg.classifier!r}; HF's ViT always pools the class token")
    if cfg.posemb != "learn":
        reasons.append(f"posemb={cfg.posemb!r}; HF's ViT has learned position embeddings only")
    if cfg.representation_size is not None and cfg.num_classes:
        reasons.append(
            f"it has pre-logits (representation_size={cfg.representation_size}) and a head "
            f"({cfg.num_classes} classes); HF's classifier reads the class token without a "
            "pre-logits layer (a pooler exists only on a headless ViTModel)"
        )
    return reasons


def _rgb_from_luma(
    cfg: ModelConfig, state: Mapping[str, Tensor]
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """The 3-channel model that reads an RGB image as the 1-channel ``cfg`` reads its PIL 'L':
    the patch-embedding kernel spread over R, G and B by the luma weights, ``W_c = w_c W``.

    HF's pipeline always hands its processor RGB. This is exact up to rounding: the normalisation
    ``n(x) = (x - 127.5) / 127.5`` is affine with the same constants on every channel and the
    weights sum to 1, so ``sum_c w_c W n(x_c) = W n(sum_c w_c x_c) = W n(L)``; resizing applies
    one linear filter to every channel, so it commutes with the weighted sum (bicubic's clipping
    to 0..255 aside). What differs is where uint8 rounding happens (PIL rounds L, and each resize
    rounds its output): about one grey level, 1/127.5 after normalisation."""
    kernel = state["patch_embed.proj.weight"]  # (D, 1, P, P)
    luma = torch.tensor(LUMA, device=kernel.device).view(1, 3, 1, 1)  # (1, 3, 1, 1)
    rgb = (kernel.float() * luma).to(kernel.dtype)  # (D, 3, P, P)
    return dataclasses.replace(cfg, in_chans=3), {**state, "patch_embed.proj.weight": rgb}


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off in the block ("Writing model shards" for one shard of a
    few megabytes: a command's output says what it wrote, once), then as they were."""
    import huggingface_hub.utils as hub
    from transformers.utils import logging as hf_logging

    # transformers' switch turns the hub's global one too: each is put back as it was
    was, hub_off = hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
        if hub.are_progress_bars_disabled() != hub_off:
            (hub.disable_progress_bars if hub_off else hub.enable_progress_bars)()


def write_hf(
    model: VisionTransformer,
    directory: str | os.PathLike,
    *,
    class_names: Sequence[str] | None = None,
    wnids: Sequence[str] | None = None,
    pretrained: str | None = None,
    preprocess: Preprocess | None = None,
) -> Path:
    """Write ``model`` as a ``save_pretrained`` directory (safetensors); returns the directory.

    A model with a head becomes ``ViTForImageClassification``; a headless one ``ViTModel``, with
    the pooler holding its pre-logits layer if it has one. ``class_names`` become ``id2label`` and
    ``label2id``, ``wnids`` and ``pretrained`` the config's keys of those names; ``preprocess``
    (default: the official one at the model's resolution) becomes ``preprocessor_config.json``,
    for ``ViTImageProcessor``. A 1-channel model is written as the 3-channel model that reads RGB
    as it reads PIL's 'L' (``_rgb_from_luma``); a model of other than 1 or 3 channels keeps them,
    and gets no image processor. The files are written in a hidden folder and join the directory
    when whole (``files.atomic_files``): a new directory appears whole, an existing one gets all
    of them or none; a full disk is the ``OSError`` naming the file.
    """
    if not isinstance(model, VisionTransformer):
        raise TypeError(f"write_hf expects a vitkit VisionTransformer, got {type(model).__name__}")
    cfg = model.cfg
    reasons = _unexportable(cfg)
    if reasons:
        raise ConfigError("cannot write this model as a Hugging Face ViT: " + "; ".join(reasons))
    recorded = checked_metadata(cfg, class_names=class_names, wnids=wnids, pretrained=pretrained)
    preprocess = fitted_preprocess(preprocess, cfg, fixed_size="a Hugging Face ViT")
    processor = None if preprocess is None else processor_config(preprocess)
    try:
        with torchao_import():  # transformers imports torchao where it is installed
            from transformers import (
                ViTConfig,
                ViTForImageClassification,
                ViTImageProcessor,
                ViTModel,
            )
    except ImportError as e:
        raise MissingExtraError("writing a Hugging Face directory", "hf", "transformers") from e

    ours = model.state_dict()
    if cfg.in_chans == 1:
        cfg, ours = _rgb_from_luma(cfg, ours)
    extra_keys: dict[str, Any] = {  # wnids and pretrained, as ViTConfig keeps any key
        key: value for key, value in recorded.to_dict().items() if key != "class_names"
    }
    if recorded.class_names:
        extra_keys["id2label"] = dict(enumerate(recorded.class_names))
        extra_keys["label2id"] = {name: i for i, name in enumerate(recorded.class_names)}
    elif cfg.num_classes:
        extra_keys["num_labels"] = cfg.num_classes
    if cfg.representation_size is not None:
        extra_keys["pooler_output_size"] = cfg.representation_size
    hf_config = ViTConfig(
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.mlp_dim,
        hidden_act=_ACT_OUT[cfg.act],
        # dropout is not carried over (0 both ways): the two place it differently, and
        # conversion is for inference parity
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=cfg.layer_norm_eps,
        image_size=cfg.image_size,  # (height, width) when non-square, as ViTConfig takes it
        patch_size=cfg.patch_size,
        num_channels=cfg.in_chans,
        qkv_bias=True,
        encoder_stride=cfg.patch_size,
        **extra_keys,
    )
    if cfg.num_classes:
        hf_model: ViTForImageClassification | ViTModel = ViTForImageClassification(hf_config)
    else:
        hf_model = ViTModel(hf_config, add_pooling_layer=cfg.representation_size is not None)
        pooler = getattr(hf_model, "pooler", None)
        if pooler is not None and pooler.dense.out_features != cfg.representation_size:
            raise ConfigError(
                f"representation_size={cfg.representation_size} != hidden_size="
                f"{cfg.hidden_size}: this transformers' ViT pooler has no pooler_output_size; "
                "upgrade transformers"
            )
    layout, prefix = _layout_and_prefix(hf_model.state_dict())
    state: dict[str, Tensor] = {}
    for name, hf in _crosswalk(cfg, layout, prefix):
        state.update(zip(hf, ours[name].detach().cpu().chunk(len(hf), dim=0), strict=True))
    hf_model.to(next(model.parameters()).dtype)
    load_state_dict_strict(hf_model, state, source="converted vitkit state")

    from safetensors import SafetensorError

    directory = Path(directory)
    with atomic_files(directory) as into, _no_progress_bars():
        try:
            hf_model.save_pretrained(into)
        except SafetensorError as e:  # a full disk: the OSError it is, then named in directory
            raise safetensors_os_error(e, into / "model.safetensors") from None
        if processor is not None:
            ViTImageProcessor(**processor).save_pretrained(into)
    if processor is None:  # a model of other than 1 or 3 channels: no processor, not an earlier
        (directory / PROCESSOR_FILE).unlink(missing_ok=True)  # export's
    return directory
