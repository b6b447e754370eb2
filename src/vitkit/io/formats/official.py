"""The official Flax checkpoints: vit_jax and big_vision ``.npz`` files [PAPER.md A1, A2, A10].

Shapes: P patch, C channels, W ResNet root width, D hidden, H heads, Dh = D / H, M mlp_dim,
N patches, T = 1 + N tokens, L layers, R representation size, K classes.

Two codebases wrote them, one model under two sets of names. vit_jax (``models_vit.py``): blocks
``Transformer/encoderblock_{i}/`` in the released naming (``RELEASED``) or current flax's
(``CURRENT``), the posemb (1, T, D) with a class-token slot, BiT ResNet stems for hybrids
[PAPER.md A2], keys maybe under ``opt/target/``. big_vision (``models/vit.py``): keys under
``params/``, current names, maybe scan-stacked (``Transformer/encoderblock/``, leading axis L),
the posemb (1, N, D) or a fixed one when none is stored; ``MAPHead_0`` for ``classifier='map'``.
Flax kernels are HWIO (conv), (in, out) (Dense), (D, H, Dh) for q/k/v and (H, Dh, D) for out;
ours are timm's. The inferred config has ``act='gelu_tanh'`` and LayerNorm eps 1e-6 (Flax's).

Loading is strict: every array used, every needed one present with its shape, or one
``CheckpointError`` listing all; names and shapes come from the members' headers before any array
is read. Writing (``write_official``) runs the crosswalk backwards in the released naming,
float32, bit for bit; what the format cannot hold is refused first (``_unwritable``).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple, get_args

import numpy as np
import torch
from torch import nn

from ...config import Classifier, ConfigError, ModelConfig, Posemb, ResNetConfig
from ...errors import UserFileError
from ...files import atomic_write
from ...model import ResNetClassifier, VisionTransformer
from ...model.posemb import grid_of
from ..checkpoint import CheckpointError, bounded, listing, npz_shapes, read_npz

PREFIXES = ("", "opt/target/", "params/")  # plain / vit_jax training state / big_vision
# The released files' naming (older flax numbered submodules across types), and current flax's.
RELEASED = ("LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3")
CURRENT = ("LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1", "MlpBlock_0")
VIT_JAX_POSEMB = "Transformer/posembed_input/pos_embedding"  # (1, T, D): class slot included
BIG_VISION_POSEMB = "pos_embedding"  # (1, N, D): patches only
MAP_HEAD = "MAPHead_0"  # big_vision pool_type='map'
MAP_ATTENTION = f"{MAP_HEAD}/MultiHeadDotProductAttention_0"
DEFAULT_IMAGE_SIZE = 224  # the paper's resolution, used only when no stored posemb fixes the grid
LAYER_NORM_EPS = 1e-6  # flax nn.LayerNorm's default, which Google's ViT code keeps
GELU_NOTE = (
    "act='gelu': this model computes the exact GELU, but the official format records no "
    "activation and Google's code computes the tanh approximation (as vitkit does when it reads "
    "the file: act='gelu_tanh'), so the file's logits differ slightly from this model's"
)


class _Rule(NamedTuple):
    """How one tensor of ours is made: from these arrays (at ``layer`` when scan-stacked)."""

    keys: tuple[str, ...]
    layer: int | None
    convert: Callable[..., np.ndarray]


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _conv(w: np.ndarray) -> np.ndarray:
    return w.transpose(3, 2, 0, 1)  # HWIO (kh, kw, in, out) -> OIHW (out, in, kh, kw)


def _dense(w: np.ndarray) -> np.ndarray:
    return w.T  # (in, out) -> (out, in)


def _qkv_weight(*kernels: np.ndarray) -> np.ndarray:
    # n x (D, H, Dh) -> n x (H*Dh, D) -> (nD, D), rows ordered as given: q, k, v as timm's fused
    # qkv (or k, v as its MAP head's kv)
    return np.concatenate([w.reshape(w.shape[0], -1).T for w in kernels])


def _qkv_bias(*biases: np.ndarray) -> np.ndarray:
    return np.concatenate([b.reshape(-1) for b in biases])  # n x (H, Dh) -> (nD,)


def _out_weight(w: np.ndarray) -> np.ndarray:
    return w.reshape(-1, w.shape[-1]).T  # (H, Dh, D) -> (D, H*Dh)


def _cls_slot(pe: np.ndarray) -> np.ndarray:
    # big_vision adds its posemb before prepending the class token, which gets none: a zero slot
    # in our (1, T, D) table is exact
    return np.concatenate([np.zeros_like(pe[:, :1]), pe], axis=1)  # (1, N, D) -> (1, 1+N, D)


# The inverse of each conversion the vit_jax layout uses, for writing: our tensor, the number n of
# arrays its rule names and the heads H -> those arrays, in order. Transposes, reshapes and splits
# only, so a file written and read back holds the same bits.


def _to_same(a: np.ndarray, n: int, heads: int) -> list[np.ndarray]:
    return [a]


def _to_hwio(w: np.ndarray, n: int, heads: int) -> list[np.ndarray]:
    return [w.transpose(2, 3, 1, 0)]  # OIHW (out, in, kh, kw) -> HWIO (kh, kw, in, out)


def _to_in_out(w: np.ndarray, n: int, heads: int) -> list[np.ndarray]:
    return [w.T]  # (out, in) -> (in, out)


def _to_head_kernels(w: np.ndarray, n: int, heads: int) -> list[np.ndarray]:
    # (nD, D) -> n x (H*Dh, D) -> n x (D, H, Dh): q, k, v of timm's fused qkv
    return [c.T.reshape(c.shape[1], heads, -1) for c in np.split(w, n)]


def _to_head_biases(b: np.ndarray, n: int, heads: int) -> list[np.ndarray]:
    return [c.reshape(heads, -1) for c in np.split(b, n)]  # (nD,) -> n x (H, Dh)


def _to_out_kernel(w: np.ndarray, n: int, heads: int) -> list[np.ndarray]:
    return [w.T.reshape(heads, -1, w.shape[0])]  # (D, H*Dh) -> (H*Dh, D) -> (H, Dh, D)


def _to_no_slot(pe: np.ndarray, n: int, heads: int) -> list[np.ndarray]:
    return [pe[:, 1:]]  # (1, 1+N, D) -> (1, N, D): big_vision's posemb has no class slot


_INVERSES: dict[Callable[..., np.ndarray], Callable[[np.ndarray, int, int], list[np.ndarray]]] = {
    _same: _to_same,
    _conv: _to_hwio,
    _dense: _to_in_out,
    _qkv_weight: _to_head_kernels,
    _qkv_bias: _to_head_biases,
    _out_weight: _to_out_kernel,
    _cls_slot: _to_no_slot,
}


class _Arrays:
    """A checkpoint's array names and shapes (not their data), addressed without the file's key
    prefix."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        prefix = next((p for p in PREFIXES if f"{p}embedding/kernel" in shapes), None)
        if prefix is None:
            raise CheckpointError(
                "not an official ViT checkpoint: no patch embedding 'embedding/kernel' "
                f"(nor under {', '.join(repr(p) for p in PREFIXES[1:])}); "
                f"first keys: {', '.join(list(shapes)[:5])}"
            )
        self.shapes = shapes
        self.prefix = prefix
        self.keys = [k[len(prefix) :] for k in shapes if k.startswith(prefix)]

    def __contains__(self, key: str) -> bool:
        return self.prefix + key in self.shapes

    def shape(self, key: str, ndim: int) -> tuple[int, ...]:
        shape = self.shapes[self.prefix + key]
        if len(shape) != ndim:
            raise CheckpointError(f"{self.prefix}{key}: expected {ndim} dimensions, found {shape}")
        return shape

    def find(self, pattern: str) -> str | None:
        """The first key matching a regular expression (the shape it fixes is the same in all)."""
        return next((k for k in self.keys if re.fullmatch(pattern, k)), None)


def _array(arrays: Mapping[str, np.ndarray], key: str, layer: int | None) -> np.ndarray:
    """The array ``key`` (its ``layer`` when scan-stacked) as float32."""
    a = np.asarray(arrays[key])
    if not np.issubdtype(a.dtype, np.floating):
        raise CheckpointError(f"{key}: dtype {a.dtype} is not a float type")
    return (a if layer is None else a[layer]).astype(np.float32)


def _width(w: _Arrays, dense: str) -> int | None:
    """Output width of an optional Dense layer, from its kernel (in, out) or its bias (out,)."""
    if f"{dense}/kernel" in w:
        return w.shape(f"{dense}/kernel", 2)[1]
    return w.shape(f"{dense}/bias", 1)[0] if f"{dense}/bias" in w else None


def _infer_resnet(w: _Arrays) -> ResNetConfig | None:
    """ResNet stages from the unit keys ``block{s}/unit{u}/``; root only when there are none."""
    if "conv_root/kernel" not in w:
        return None
    width = w.shape("conv_root/kernel", 4)[3]  # (7, 7, C, W): W = int(64 * width_factor)
    units: dict[int, int] = {}
    for key in w.keys:
        if m := re.match(r"block(\d+)/unit(\d+)/", key):
            units[int(m[1])] = max(units.get(int(m[1]), 0), int(m[2]))
    try:
        num_layers = tuple(units.get(s, 0) for s in range(1, max(units, default=0) + 1))
        return ResNetConfig.from_width(num_layers, width)
    except ConfigError as e:
        raise CheckpointError(f"hybrid ResNet stages {sorted(units.items())}: {e}") from None


def _infer(w: _Arrays, posemb: str | None) -> tuple[ModelConfig, tuple[str, ...], bool, str | None]:
    """The model the arrays describe, the block naming, scan-stacking and the posemb key."""
    ph, pw, C, D = w.shape("embedding/kernel", 4)  # (P, P, C, D)
    if ph != pw:
        raise CheckpointError(f"embedding/kernel has a {ph}x{pw} patch: expected a square patch")
    P = ph
    resnet = _infer_resnet(w)
    in_chans = w.shape("conv_root/kernel", 4)[2] if resnet else C
    scan = w.find(r"Transformer/encoderblock/.*") is not None
    query = w.find(r"Transformer/encoderblock(_\d+)?/MultiHeadDotProductAttention_\d/query/kernel")
    dense0 = w.find(r"Transformer/encoderblock(_\d+)?/MlpBlock_\d/Dense_0/kernel")
    if query is None or dense0 is None:
        raise CheckpointError("no encoder block with attention and MLP kernels under Transformer/")
    names = RELEASED if "MultiHeadDotProductAttention_1" in query else CURRENT
    stacked = int(scan)  # scan-stacked arrays carry a leading layer axis L
    if scan:
        num_layers = w.shape(query, 4)[0]  # (L, D, H, Dh)
    else:
        num_layers = 1 + max(
            int(m[1]) for k in w.keys if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))
        )
    H = w.shape(query, 3 + stacked)[-2]  # (D, H, Dh)
    mlp_dim = w.shape(dense0, 2 + stacked)[-1]  # (D, M)
    has_map = any(k.startswith(f"{MAP_HEAD}/") for k in w.keys)
    # big_vision's pool_type='0' (the first patch token) and MAPHead(buggy=True) (the MLP added to
    # the normed probe) cannot be told from the arrays: read as 'gap' and 'map'
    classifier: Classifier = "token" if "cls" in w else "map" if has_map else "gap"
    map_query = f"{MAP_ATTENTION}/query/kernel"
    if classifier == "map" and map_query in w:
        map_heads = w.shape(map_query, 3)[1]  # (D, H, Dh); the converted (D, D) has no split
        if map_heads != H:
            raise CheckpointError(
                f"{w.prefix}{map_query} has {map_heads} heads: expected the encoder's {H}, "
                "as big_vision's MAPHead"
            )
    stride = P * (resnet.stride if resnet else 1)
    posemb_key = next((k for k in (VIT_JAX_POSEMB, BIG_VISION_POSEMB) if k in w), None)
    if posemb_key is None:
        if posemb == "learn":
            raise CheckpointError("posemb='learn' but the checkpoint stores no position embedding")
        kind = posemb or "sincos2d"
        image_size: int | tuple[int, int] = stride * max(round(DEFAULT_IMAGE_SIZE / stride), 1)
    else:
        if posemb not in (None, "learn"):
            raise CheckpointError(f"posemb={posemb!r} but the checkpoint stores a learned one")
        kind = "learn"
        tokens = w.shape(posemb_key, 3)[1]  # (1, T, D) vit_jax or (1, N, D) big_vision
        try:
            gh, gw = grid_of(
                tokens - (classifier == "token" and posemb_key == VIT_JAX_POSEMB),
                what=w.prefix + posemb_key,
                hint="the file does not record the grid, so the image size cannot be inferred",
            )
        except ConfigError as e:
            raise CheckpointError(str(e)) from None
        image_size = (gh * stride, gw * stride)
    try:
        cfg = ModelConfig(
            image_size=image_size,
            patch_size=P,
            hidden_size=D,
            num_layers=num_layers,
            num_heads=H,
            mlp_dim=mlp_dim,
            num_classes=_width(w, "head") or 0,
            in_chans=in_chans,
            classifier=classifier,
            representation_size=_width(w, "pre_logits"),
            posemb=kind,  # type: ignore[arg-type]  # a str; ModelConfig checks it is a Posemb
            act="gelu_tanh",  # Flax's nn.gelu is the tanh approximation
            layer_norm_eps=LAYER_NORM_EPS,
            resnet=resnet,
        )
        bounded(cfg)
    except ConfigError as e:
        raise CheckpointError(f"official checkpoint describes an invalid model: {e}") from None
    return cfg, names, scan, posemb_key


def _rules(
    cfg: ModelConfig, names: tuple[str, ...], scan: bool, posemb_key: str | None
) -> dict[str, _Rule]:
    """The crosswalk: each of our tensors, the official arrays it comes from and the conversion."""
    rules: dict[str, _Rule] = {}

    def add(target: str, convert: Callable[..., np.ndarray], *keys: str, layer: int | None = None):
        rules[target] = _Rule(keys, layer, convert)

    def norm(target: str, key: str, layer: int | None = None) -> None:  # LayerNorm or GroupNorm
        add(f"{target}.weight", _same, f"{key}/scale", layer=layer)
        add(f"{target}.bias", _same, f"{key}/bias", layer=layer)

    def dense(target: str, key: str, layer: int | None = None) -> None:
        add(f"{target}.weight", _dense, f"{key}/kernel", layer=layer)
        add(f"{target}.bias", _same, f"{key}/bias", layer=layer)

    if cfg.resnet is not None:
        stem = "patch_embed.backbone.stem"
        add(f"{stem}.conv.weight", _conv, "conv_root/kernel")  # (7, 7, C, W) -> (W, C, 7, 7)
        norm(f"{stem}.norm", "gn_root")
        for s, depth in enumerate(cfg.resnet.num_layers):
            for u in range(depth):  # official names count from 1, ours from 0
                src = f"block{s + 1}/unit{u + 1}"
                dst = f"patch_embed.backbone.stages.{s}.blocks.{u}"
                for k in (1, 2, 3):
                    add(f"{dst}.conv{k}.weight", _conv, f"{src}/conv{k}/kernel")
                    norm(f"{dst}.norm{k}", f"{src}/gn{k}")
                if u == 0:  # the first unit of a stage changes width (and stride): projection
                    add(f"{dst}.downsample.conv.weight", _conv, f"{src}/conv_proj/kernel")
                    norm(f"{dst}.downsample.norm", f"{src}/gn_proj")
    add("patch_embed.proj.weight", _conv, "embedding/kernel")  # (P, P, C, D) -> (D, C, P, P)
    add("patch_embed.proj.bias", _same, "embedding/bias")
    if cfg.classifier == "token":
        add("cls_token", _same, "cls")  # (1, 1, D)
    if posemb_key is not None:
        no_slot = posemb_key == BIG_VISION_POSEMB and cfg.classifier == "token"
        add("pos_embed", _cls_slot if no_slot else _same, posemb_key)  # (1, T, D)
    ln1, mha, ln2, mlp = names
    for i in range(cfg.num_layers):
        src, dst = "Transformer/encoderblock" + ("" if scan else f"_{i}"), f"blocks.{i}"
        layer = i if scan else None
        norm(f"{dst}.norm1", f"{src}/{ln1}", layer)
        qkv = [f"{src}/{mha}/{n}" for n in ("query", "key", "value")]
        add(f"{dst}.attn.qkv.weight", _qkv_weight, *(f"{k}/kernel" for k in qkv), layer=layer)
        add(f"{dst}.attn.qkv.bias", _qkv_bias, *(f"{k}/bias" for k in qkv), layer=layer)
        add(f"{dst}.attn.proj.weight", _out_weight, f"{src}/{mha}/out/kernel", layer=layer)
        add(f"{dst}.attn.proj.bias", _same, f"{src}/{mha}/out/bias", layer=layer)
        norm(f"{dst}.norm2", f"{src}/{ln2}", layer)
        dense(f"{dst}.mlp.fc1", f"{src}/{mlp}/Dense_0", layer)
        dense(f"{dst}.mlp.fc2", f"{src}/{mlp}/Dense_1", layer)
    norm("norm", "Transformer/encoder_norm")
    if cfg.classifier == "map":  # big_vision MAPHead_0 -> timm's attn_pool
        add("attn_pool.latent", _same, f"{MAP_HEAD}/probe")  # (1, 1, D)
        add("attn_pool.q.weight", _qkv_weight, f"{MAP_ATTENTION}/query/kernel")
        add("attn_pool.q.bias", _qkv_bias, f"{MAP_ATTENTION}/query/bias")
        kv = [f"{MAP_ATTENTION}/{n}" for n in ("key", "value")]
        add("attn_pool.kv.weight", _qkv_weight, *(f"{k}/kernel" for k in kv))
        add("attn_pool.kv.bias", _qkv_bias, *(f"{k}/bias" for k in kv))
        add("attn_pool.proj.weight", _out_weight, f"{MAP_ATTENTION}/out/kernel")
        add("attn_pool.proj.bias", _same, f"{MAP_ATTENTION}/out/bias")
        norm("attn_pool.norm", f"{MAP_HEAD}/LayerNorm_0")
        dense("attn_pool.mlp.fc1", f"{MAP_HEAD}/MlpBlock_0/Dense_0")
        dense("attn_pool.mlp.fc2", f"{MAP_HEAD}/MlpBlock_0/Dense_1")
    if cfg.representation_size:
        dense("pre_logits.fc", "pre_logits")
    if cfg.num_classes:
        dense("head", "head")
    return rules


def _needed_shapes(cfg: ModelConfig, rules: Mapping[str, _Rule]) -> dict[str, tuple[int, ...]]:
    """The shape of every array ``rules`` read, as the model ``cfg`` needs it: the crosswalk run
    backwards (``_INVERSES``) on zero-stride views of a shape-only model's tensors, so nothing of
    the model's size is allocated."""
    with torch.device("meta"):
        ours = VisionTransformer(cfg).state_dict()
    needed: dict[str, tuple[int, ...]] = {}
    for target, rule in rules.items():
        view = np.broadcast_to(np.float32(0), tuple(ours[target].shape))  # no memory of its size
        arrays = _INVERSES[rule.convert](view, len(rule.keys), cfg.num_heads)
        for key, a in zip(rule.keys, arrays, strict=True):
            # scan-stacked arrays hold every layer: a leading axis L
            needed[key] = a.shape if rule.layer is None else (cfg.num_layers, *a.shape)
    return needed


def _check_keys(w: _Arrays, rules: Mapping[str, _Rule], cfg: ModelConfig) -> None:
    """One error naming every array the model needs and lacks, every array left unused and
    every array of another shape than the model needs (the first ``LISTED`` of each kind)."""
    needed = _needed_shapes(cfg, rules)
    missing = sorted(w.prefix + k for k in needed if k not in w)
    unused = sorted(set(w.shapes) - {w.prefix + k for k in needed})
    mismatched = sorted(
        f"{w.prefix}{k}: model {shape} vs file {w.shapes[w.prefix + k]}"
        for k, shape in needed.items()
        if k in w and w.shapes[w.prefix + k] != shape
    )
    parts = [
        f"{what} ({len(keys):,}): {listing(keys, sep)}"
        for what, keys, sep in (
            ("missing", missing, ", "),
            ("not used", unused, ", "),
            ("shape mismatch", mismatched, "; "),
        )
        if keys
    ]
    if parts:
        raise CheckpointError(
            f"official checkpoint does not fit the model it describes (hidden {cfg.hidden_size}, "
            f"{cfg.num_layers} layers, classifier {cfg.classifier!r}, "
            f"resnet {cfg.resnet.num_layers if cfg.resnet else None}). " + " | ".join(parts)
        )


def _plan(
    shapes: Mapping[str, tuple[int, ...]], posemb: str | None
) -> tuple[ModelConfig, str, dict[str, _Rule]]:
    """The model that arrays of these names and shapes describe, their key prefix and the
    crosswalk, every name and shape checked: what reading needs before any array's data."""
    if posemb is not None and posemb not in get_args(Posemb):
        raise CheckpointError(
            f"posemb={posemb!r}: expected None or one of {', '.join(map(repr, get_args(Posemb)))}"
        )
    w = _Arrays(shapes)
    cfg, names, scan, posemb_key = _infer(w, posemb)
    rules = _rules(cfg, names, scan, posemb_key)
    _check_keys(w, rules, cfg)
    return cfg, w.prefix, rules


def _convert(
    arrays: Mapping[str, np.ndarray], prefix: str, rules: Mapping[str, _Rule]
) -> dict[str, torch.Tensor]:
    """Our state dict from the official ``arrays``, whose names and shapes ``_plan`` checked (so
    every conversion fits)."""
    state = {}
    for target, rule in rules.items():
        value = rule.convert(*(_array(arrays, prefix + k, rule.layer) for k in rule.keys))
        state[target] = torch.from_numpy(np.ascontiguousarray(value))
    return state


def read_official(
    arrays: Mapping[str, np.ndarray], *, posemb: str | None = None
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Infer the model of a vit_jax or big_vision ``.npz`` and convert its arrays to our layout.

    ``arrays`` is the flat dict of the file (``vitkit.io.checkpoint.read_npz``; for a file,
    ``read_official_file`` checks it before reading it). ``posemb`` names the fixed position
    embedding of a checkpoint that stores none (default ``'sincos2d'``, as big_vision); it must
    be ``None`` or ``'learn'`` when one is stored. Returns the config and a state dict for
    ``load_state_dict_strict(VisionTransformer(cfg), state)``.
    """
    cfg, prefix, rules = _plan({k: np.shape(v) for k, v in arrays.items()}, posemb)
    return cfg, _convert(arrays, prefix, rules)


def read_official_file(
    path: str | os.PathLike, *, posemb: str | None = None
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """``read_official`` of an ``.npz`` file: every name and shape is checked from the members'
    headers (``npz_shapes``) before any array is read."""
    cfg, prefix, rules = _plan(npz_shapes(path), posemb)
    return cfg, _convert(read_npz(path), prefix, rules)


# ------------------------------------------------------------------ writing (vit_jax, released)


def _unwritable(model: VisionTransformer | ResNetClassifier) -> list[str]:
    """Why the official vit_jax layout cannot hold ``model`` (empty when it can)."""
    cfg = model.cfg
    if cfg.arch != "vit" or not isinstance(model, VisionTransformer):
        return [
            f"arch={cfg.arch!r} is the ResNet baseline; the format holds Vision Transformers and "
            "their hybrids"
        ]
    reasons = []
    if cfg.classifier == "map":
        reasons.append(
            "classifier='map' (an attention-pooling head): vit_jax pools the class token or the "
            "mean of the patch tokens"
        )
    if cfg.posemb != "learn":
        reasons.append(
            f"posemb={cfg.posemb!r}: vit_jax adds a learned position embedding table "
            "(a fixed sincos2d one is big_vision's)"
        )
    gh, gw = cfg.grid
    if gh != gw:
        reasons.append(
            f"image_size={cfg.image_size!r} makes a {gh}x{gw} patch grid: the file records the "
            "grid only as the number of position embeddings, which its readers take as a square"
        )
    if cfg.layer_norm_eps != LAYER_NORM_EPS:
        reasons.append(
            f"layer_norm_eps={cfg.layer_norm_eps!r}: Google's code uses {LAYER_NORM_EPS} and the "
            "file cannot record another"
        )
    if not model.pool_tokens or not isinstance(model.norm, nn.LayerNorm):
        reasons.append(
            "the model was pruned (prune_intermediate_layers: no pooling or no final norm), "
            "which the file cannot describe"
        )
    return reasons


def to_official(model: VisionTransformer | ResNetClassifier) -> dict[str, np.ndarray]:
    """``model``'s weights as the arrays of an official vit_jax ``.npz`` in the released files'
    naming (``Transformer/encoderblock_{i}/MultiHeadDotProductAttention_1/query/kernel`` (D, H,
    Dh), ``embedding/kernel`` HWIO, ...), float32: what ``write_official`` saves, and what
    ``read_official`` turns back into the same config and weights.

    A ``ConfigError`` in one line lists everything the format cannot hold (``_unwritable``).
    The activation is not among the arrays (see ``write_official``).
    """
    if not isinstance(model, (VisionTransformer, ResNetClassifier)):
        raise TypeError(f"to_official expects a vitkit model, got {type(model).__name__}")
    reasons = _unwritable(model)
    if reasons:
        raise ConfigError(
            "cannot write this model in the official vit_jax format: " + "; ".join(reasons)
        )
    cfg = model.cfg
    rules = _rules(cfg, RELEASED, scan=False, posemb_key=VIT_JAX_POSEMB)
    state = {k: v.detach().to("cpu", torch.float32).numpy() for k, v in model.state_dict().items()}
    if state.keys() != rules.keys():  # what a config can describe, so the reader can rebuild it
        extra, missing = sorted(state.keys() - rules.keys()), sorted(rules.keys() - state.keys())
        raise ConfigError(
            "cannot write this model in the official vit_jax format: its tensors are not those "
            f"its config describes (not in the config: {', '.join(extra) or 'none'}; missing: "
            f"{', '.join(missing) or 'none'})"
        )
    arrays: dict[str, np.ndarray] = {}
    for target, rule in rules.items():
        inverse = _INVERSES[rule.convert]
        values = inverse(state[target], len(rule.keys), cfg.num_heads)
        arrays.update(zip(rule.keys, map(np.ascontiguousarray, values), strict=True))
    return arrays


def write_official(model: VisionTransformer | ResNetClassifier, path: str | os.PathLike) -> Path:
    """Write ``model`` as an official vit_jax ``.npz`` (``to_official``'s arrays, ``np.savez``,
    no pickle) at ``path``, written beside it and renamed (never half a file); returns the path.

    Google's ``vit_jax`` code and timm's ``.npz`` loader read it, and ``vitkit.load`` reads back
    the same weights, with ``act='gelu_tanh'``. What the format cannot hold is a ``ConfigError``
    before anything is written. A model with exact GELU (``act='gelu'``) is written, with a
    ``UserWarning`` (``GELU_NOTE``): Google's code computes the tanh GELU.
    """
    path = Path(path)
    if path.suffix.lower() != ".npz":
        raise UserFileError(
            f"{path}: the official format is an .npz file: expected a path ending in .npz"
        )
    if path.is_dir():
        raise UserFileError(f"{path} is a directory: the official format is an .npz file")
    arrays = to_official(model)

    def write(tmp: Path) -> None:
        # A file object, as numpy appends '.npz' to a name without it. Float arrays need no
        # pickle; no allow_pickle=False either, which numpy 1.x would store as an array.
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]  # stubs: a key may be allow_pickle

    atomic_write(path, write)
    if model.cfg.act == "gelu":
        warnings.warn(GELU_NOTE, stacklevel=2)  # the command line shows it as one line
    return path
