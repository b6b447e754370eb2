"""Our checkpoint format and the safe readers every format uses.

Our format is a directory holding ``model.safetensors`` (timm's key layout) and ``config.json``
(``{"format": "vitkit", "version": 1, "model": {...ModelConfig...}, ...WeightsMeta, "sha256":
{file: hex}}``), so a checkpoint rebuilds its model without the preset registry; it is written
atomically (``files.atomic_write``, ``files.atomic_directory``). ``sha256`` records the digest of
each file written beside config.json (the weights; a training checkpoint's ``state.pt`` too),
and reading one of ours refuses a file that changed since (``check_unchanged``): safetensors
checks a file's structure, not its bytes, so 64 flipped bytes mid-data read as other weights.
Every reader refuses a weight that is not finite, naming it (``check_finite``): a NaN printed
``nan`` probabilities and resumed as "the run diverged". Nothing here runs code from a file:
safetensors, ``np.load(allow_pickle=False)`` and ``torch.load(weights_only=True)`` only. Nothing
a file's metadata claims is allocated before its weights agree: ``build_loaded`` checks the
config's depth against the weights' names, then every name and shape against a shape-only (meta)
model, then builds it; an ``.npz``'s shapes come from its members' headers (``npz_shapes``). A
mismatch lists the first ``LISTED`` names of each kind and counts the rest.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from ..config import ConfigError, ModelConfig
from ..config.dicts import check_new
from ..errors import CheckpointError, MissingFileError, UserFileError
from ..files import atomic_write, sha256_of
from ..model import ResNetClassifier, VisionTransformer, build_model

if TYPE_CHECKING:
    from .metadata import WeightsMeta

log = logging.getLogger(__name__)

FORMAT_NAME = "vitkit"
FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
DIGESTS = "sha256"  # config.json's key: {file name: sha256 hex} of the files written beside it
_Named = TypeVar("_Named", bound=Mapping[str, Any])  # tensors or arrays by name

LISTED = 10  # names of each kind a mismatch lists; the rest are counted


def bounded(cfg: ModelConfig) -> ModelConfig:
    """``cfg``, a checkpoint's model, if it keeps a new run's bounds (``check_new``); a
    ``ConfigError`` naming the key otherwise, which each format's reader names the file in.
    Nothing of a size a checkpoint claims is allocated before this, in every format: where no
    weight ties ``image_size`` (posemb none or sincos2d) config.json alone decides it."""
    check_new(cfg, None)
    return cfg


def _exists(path: Path) -> Path:
    if not path.exists():
        raise MissingFileError(f"checkpoint not found: {path}")
    return path


def read_safetensors(path: str | os.PathLike) -> dict[str, Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = _exists(Path(path))
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(
            f"cannot read {path} as safetensors (corrupt or truncated?): {e}"
        ) from None
    return check_finite(state, path)


def read_torch(path: str | os.PathLike) -> dict[str, Tensor]:
    """A tensor-only ``.pth``/``.bin``/``.pt`` state dict, through ``torch.load(weights_only=True)``."""
    path = _exists(Path(path))
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"refusing to load {path}: it is a pickle holding Python objects, not only tensors, "
            "and unpickling could run code. Re-save it as a plain state dict "
            f"(torch.save(model.state_dict(), ...)) or as safetensors. ({str(e).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {path} (corrupt or truncated?): {e}") from None
    for key in ("state_dict", "model", "model_state_dict"):  # common wrappers around a state dict
        if isinstance(obj, Mapping) and key in obj and isinstance(obj[key], Mapping):
            obj = obj[key]
    if not isinstance(obj, Mapping) or not all(isinstance(v, Tensor) for v in obj.values()):
        raise CheckpointError(
            f"{path} does not hold a state dict of tensors (found {type(obj).__name__})"
        )
    return check_finite(dict(obj), path)


def _npz_error(path: Path, e: Exception) -> CheckpointError:
    if "pickle" in str(e).lower():
        return CheckpointError(
            f"refusing to load {path}: it holds pickled objects, not plain arrays"
        )
    return CheckpointError(f"cannot read {path} as .npz (corrupt or truncated?): {e}")


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """An ``.npz`` of arrays, read without pickle."""
    path = _exists(Path(path))
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise _npz_error(path, e) from None
    return check_finite(arrays, path)


def check_finite(tensors: _Named, path: str | os.PathLike) -> _Named:
    """``tensors`` (tensors or arrays by name, as read from ``path``) if every floating-point
    one is finite; a ``CheckpointError`` naming the first that is not otherwise. A trained
    model holds no NaN or inf (a run that diverges stops before it saves), so one is damage:
    refused where it is read, not found as ``nan`` probabilities or a resumed run "diverged".
    0.01-0.1 s for ViT-B/16's 86M weights (RESULTS.md)."""
    for name, value in tensors.items():
        if isinstance(value, Tensor) and value.is_floating_point():
            xp: Any = torch
        elif isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
            xp = np
        else:
            continue  # integer buffers, and dtypes numpy does not compute with
        # a sum is finite only if every term is (NaN and inf propagate), and takes a tenth of
        # isfinite's time; a sum that overflows is checked value by value
        if bool(xp.isfinite(value.sum())):
            continue
        finite = xp.isfinite(value)
        if not bool(finite.all()):
            size = value.numel() if isinstance(value, Tensor) else value.size
            raise CheckpointError(
                f"{path}: tensor {name!r} holds {int((~finite).sum()):,} of {size:,} values"
                " that are not finite (NaN or inf): the file is damaged or was saved from "
                "a diverged model; use another checkpoint"
            )
    return tensors


def npz_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """The name (as ``read_npz`` gives it) and shape of every array of an ``.npz``, from the
    members' ``.npy`` headers: no array's data is read, and a compressed member is inflated only
    as far as its header, so a small file that holds gigabytes of zeros costs nothing here."""
    path = _exists(Path(path))
    try:
        with zipfile.ZipFile(path) as archive:
            return {
                name.removesuffix(".npy"): _npy_shape(archive, name) for name in archive.namelist()
            }
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise _npz_error(path, e) from None


def _npy_shape(archive: zipfile.ZipFile, name: str) -> tuple[int, ...]:
    """The shape in the header of the ``.npy`` member ``name``; a ``ValueError`` if it holds
    Python objects (which ``np.load`` would unpickle) or is not an ``.npy``."""
    with archive.open(name) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    if dtype.hasobject:
        raise ValueError(f"{name} holds Python objects, which only pickle can read")
    return tuple(shape)


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    path = _exists(Path(path))
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"cannot read {path} as JSON: {e}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(t.shape)


def listing(names: Sequence[str], sep: str = ", ") -> str:
    """The first ``LISTED`` of ``names`` and the count of the rest ("... and 47,995 more"): a
    mismatch stays a readable line however many names it holds."""
    shown = sep.join(names[:LISTED])
    rest = len(names) - LISTED
    return f"{shown}{sep}... and {rest:,} more" if rest > 0 else shown


def check_state_dict(
    expected: Mapping[str, Any], found: Mapping[str, Any], *, source: str = "checkpoint"
) -> None:
    """Raise one ``CheckpointError`` naming every kind of mismatch (missing, unexpected and
    mis-shaped tensors): the first ``LISTED`` names of each and the count of the rest."""
    missing = [k for k in expected if k not in found]
    unexpected = [k for k in found if k not in expected]
    mismatched = [
        f"{k}: model {_shape(expected[k])} vs {source} {_shape(found[k])}"
        for k in expected
        if k in found and _shape(expected[k]) != _shape(found[k])
    ]
    if not (missing or unexpected or mismatched):
        return
    parts = []
    if missing:
        parts.append(f"missing from the {source} ({len(missing):,}): {listing(missing)}")
    if unexpected:
        parts.append(f"not in the model ({len(unexpected):,}): {listing(unexpected)}")
    if mismatched:
        parts.append(f"shape mismatch ({len(mismatched):,}): {listing(mismatched, '; ')}")
    raise CheckpointError(f"{source} does not fit the model. " + " | ".join(parts))


def check_depth(claimed: int, keys: Iterable[str], layer: str, *, what: str, source: str) -> None:
    """The number of layers a config claims (``what``, as the config names it) against the number
    the weights' names ``keys`` hold, layer ``i``'s names starting ``layer.format(i=i)``: a config
    that says 20,000 layers beside the weights of one is refused here, before a model of that
    depth is built (tens of seconds and gigabytes, even shape-only) to list what is missing."""
    before, after = layer.split("{i}")
    pattern = re.compile(re.escape(before) + r"(\d+)" + re.escape(after))
    held = 1 + max((int(m[1]) for k in keys if (m := pattern.match(k))), default=-1)
    if held != claimed:
        raise CheckpointError(
            f"{source}: the config says {what}={claimed}, the weights hold {held:,} "
            f"layer{'' if held == 1 else 's'} ({layer.format(i='<i>')}*): expected the same "
            "depth in both"
        )


def _check_our_depth(cfg: ModelConfig, keys: Sequence[str], source: str) -> None:
    """``check_depth`` for every repeated part of our layout: the transformer's blocks, and the
    ResNet's units in each stage (a hybrid's, under ``patch_embed.``, or the baseline's)."""
    if cfg.arch == "vit":
        check_depth(cfg.num_layers, keys, "blocks.{i}.", what="num_layers", source=source)
    if cfg.resnet is not None:
        root = "backbone." if cfg.arch == "resnet" else "patch_embed.backbone."
        for s, units in enumerate(cfg.resnet.num_layers):
            check_depth(
                units,
                keys,
                f"{root}stages.{s}.blocks.{{i}}.",
                what=f"resnet.num_layers[{s}]",
                source=source,
            )


def build_loaded(
    cfg: ModelConfig, state: Mapping[str, Tensor], *, source: str = "checkpoint"
) -> VisionTransformer | ResNetClassifier:
    """The model ``cfg`` describes, holding ``state`` (strictly: every name and shape, both
    ways). Nothing of the configured size is allocated before the weights are found to fit: the
    depth is checked against the names, every shape against a shape-only (meta) model, and only
    then is the model built (and initialised, as ``build_model`` does, so that buffers the
    weights do not hold, such as a fixed sin-cos posemb, are right) and loaded."""
    _check_our_depth(cfg, list(state), source)
    with torch.device("meta"):
        shapes = build_model(cfg).state_dict()
    check_state_dict(shapes, state, source=source)
    model = build_model(cfg)
    model.load_state_dict(state, strict=True)
    return model


def load_state_dict_strict(
    model: nn.Module, state: Mapping[str, Tensor], *, source: str = "checkpoint"
) -> None:
    """Load ``state`` into ``model``: every key and shape must match, both ways."""
    check_state_dict(model.state_dict(), state, source=source)
    model.load_state_dict(state, strict=True)


def save_safetensors(tensors: Mapping[str, Tensor], path: Path) -> None:
    """``safetensors.torch.save_file``, whose failed write (a full disk) is the ``OSError`` it is:
    safetensors reports it as a ``SafetensorError`` that names the errno only in its text."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(dict(tensors), str(path), metadata={"format": "pt"})
    except SafetensorError as e:
        raise safetensors_os_error(e, path) from None


def safetensors_os_error(e: Exception, path: Path) -> Exception:
    """The ``OSError`` naming ``path`` that safetensors' ``SafetensorError`` ``e`` of a failed
    write (a full disk) names by its errno only in its text; ``e`` itself otherwise."""
    found = re.search(r"\(os error (\d+)\)", str(e))  # Rust's io::Error: "... (os error 28)"
    if found is None:
        return e
    code = int(found[1])
    return OSError(code, os.strerror(code), str(path))


def save_torch(obj: Any, path: Path) -> None:
    """``torch.save`` to a file opened here, so that a failed write (a full disk) is the
    ``OSError`` it is: saving to a path, torch reports one as a ``RuntimeError`` without its
    errno; saving to a file, it raises the ``OSError`` but, closing the archive, replaces it by a
    ``RuntimeError`` of its own ("unexpected pos"), whose context it is."""
    with open(path, "wb") as f:
        try:
            torch.save(obj, f)
        except RuntimeError as e:
            failed = e.__context__
            if isinstance(failed, OSError):
                raise OSError(failed.errno, failed.strerror, str(path)) from None
            raise


def write_ours(
    cfg: ModelConfig,
    state: Mapping[str, Tensor],
    directory: str | os.PathLike,
    meta: WeightsMeta | None = None,
    *,
    beside: Sequence[str] = (),
) -> Path:
    """Write ``model.safetensors`` + ``config.json`` (with what ``meta`` records, when given)
    into ``directory``; returns the directory. config.json, written last, records the sha256 of
    the weights and of the files ``beside`` (names in ``directory``, written before: a training
    checkpoint's ``state.pt``)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise UserFileError(f"{directory} exists and is not a directory: our format is a directory")
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    atomic_write(directory / WEIGHTS_FILE, lambda p: save_safetensors(tensors, p))
    # read back from the page cache: ~0.2 s for ViT-B/16's 346 MB (RESULTS.md)
    digests = {name: sha256_of(directory / name) for name in (WEIGHTS_FILE, *beside)}
    config = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "model": cfg.to_dict(),
        **(meta.to_dict() if meta is not None else {}),
        DIGESTS: digests,
    }
    atomic_write(
        directory / CONFIG_FILE, lambda p: p.write_text(json.dumps(config, indent=2) + "\n")
    )
    return directory


def is_ours(directory: Path) -> bool:
    config = directory / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("format") == FORMAT_NAME
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return False


def read_ours(
    directory: str | os.PathLike, *, own_run: bool = False
) -> tuple[ModelConfig, dict[str, Tensor], WeightsMeta]:
    """Config, weights and what travels with them (``metadata.WeightsMeta``, checked against the
    model) of a checkpoint in our format; ``own_run``: ``read_our_config``'s."""
    cfg, recorded = read_our_config(directory, own_run=own_run)
    check_unchanged(Path(directory), WEIGHTS_FILE)
    return cfg, read_safetensors(Path(directory) / WEIGHTS_FILE), recorded


def check_unchanged(directory: Path, name: str) -> None:
    """The file ``name`` of our checkpoint ``directory`` against the sha256 its config.json
    recorded when vitkit wrote it; a ``CheckpointError`` saying so if it changed since. A
    checkpoint written before vitkit recorded digests (or a file it records none for) is read as
    it is."""
    digests = read_json(directory / CONFIG_FILE).get(DIGESTS, {})
    if not isinstance(digests, dict):
        raise CheckpointError(
            f"{directory / CONFIG_FILE}: expected {DIGESTS!r} to map file names to sha256 "
            f"digests, found {type(digests).__name__}"
        )
    expected = digests.get(name)
    if expected is None:
        return
    path = _exists(directory / name)
    found = sha256_of(path)
    if found != expected:
        raise CheckpointError(
            f"{path} changed since it was written: its sha256 is {found}, {CONFIG_FILE} "
            f"recorded {expected}; copy it again, or use another checkpoint"
        )


def read_our_config(
    directory: str | os.PathLike, *, own_run: bool = False
) -> tuple[ModelConfig, WeightsMeta]:
    """``read_ours`` without the weights (config.json alone): what a caller checks before it
    reads them, once. Its model is held to a new run's bounds (``bounded``) unless ``own_run``:
    a training run reads its own checkpoints as its config.json recorded them."""
    from .metadata import WeightsMeta

    directory = _exists(Path(directory))
    meta = read_json(directory / CONFIG_FILE)
    if meta.get("format") != FORMAT_NAME:
        raise CheckpointError(
            f'{directory / CONFIG_FILE} is not a vitkit config (no "format": "vitkit")'
        )
    if meta.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{directory}: checkpoint format version {meta.get('version')!r}, this vitkit reads {FORMAT_VERSION}"
        )
    try:
        cfg = ModelConfig.from_dict(meta.get("model", {}))
        if not own_run:
            bounded(cfg)
    except ConfigError as e:
        raise CheckpointError(f"{directory / CONFIG_FILE}: {e}") from None
    return cfg, WeightsMeta.from_dict(
        meta, cfg, source=str(directory), file=str(directory / CONFIG_FILE)
    )
