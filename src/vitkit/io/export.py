"""ONNX and OpenVINO IR export of a vitkit model, and their checks against PyTorch.

The graph takes ``images`` (B, C, H, W) float32 in [-1, 1] at the model's ``image_size``, B
dynamic, and returns ``logits`` (B, K), or ``features`` (B, R or D) for a model without a head.
Preprocessing is the caller's; the file's ``metadata_props`` (strings; lists as JSON) say what it
is, so that other tools need not ask vitkit::

    class_names, wnids, pretrained  class i's name and WordNet id, the weights' registry name
                                    (each only when the checkpoint records it)
    input_size, channels            [H, W]; "3" or "1"
    color_mode                      "RGB" or "L": the PIL mode an image file is converted to
    resize, antialias               "bilinear" or "bicubic" of the whole image; "true" or "false"
    normalization, mean, std        "minus_one_to_one"; input = (pixel / 255 - mean) / std
    image_orientation               "exif_transpose": an image file is first turned upright by
                                    its EXIF orientation tag (PIL's ``ImageOps.exif_transpose``)

The preprocessing keys (``color_mode`` on) are the checkpoint's ``Preprocess``, else the official
one at the model's resolution; a model whose channels are not 1 or 3 has none of them. The
OpenVINO IR (``export_openvino``: ``OUT.xml`` and its weights ``OUT.bin``, fp32) carries the same
keys in its ``rt_info`` under ``model_info``, where OpenVINO's Model API reads a model's labels.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..data.transforms import Preprocess, mode_of
from ..errors import CheckpointError, ConfigError, MissingExtraError, UserFileError
from ..files import atomic_files
from ..model import ResNetClassifier, VisionTransformer
from ..runtime.mode import eval_mode
from .metadata import IMAGE_ORIENTATION, checked_metadata, fitted_preprocess

# The exporter needs onnx and onnxscript, the check onnxruntime; the extra installs all three.
_ONNX_MODULES = ("onnx", "onnxscript", "onnxruntime")


def require_onnx() -> None:
    """Raise ``MissingExtraError`` (an ``ImportError``) naming the extra to install when an ONNX
    package is missing."""
    missing = []
    for name in _ONNX_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingExtraError("ONNX export", "export", ", ".join(missing))


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def onnx_metadata(
    cfg: ModelConfig,
    *,
    class_names: Sequence[str] | None = None,
    wnids: Sequence[str] | None = None,
    pretrained: str | None = None,
    preprocess: Preprocess | None = None,
) -> dict[str, str]:
    """The ``metadata_props`` of a model's ONNX file (module docstring), checked against ``cfg``
    (``metadata.checked_metadata``: one class name and wnid per class, ...), and a
    ``preprocess`` of the graph's channels and image size."""
    recorded = checked_metadata(cfg, class_names=class_names, wnids=wnids, pretrained=pretrained)
    preprocess = fitted_preprocess(preprocess, cfg, fixed_size="the ONNX graph")
    height, width = cfg.image_hw
    metadata = {"input_size": json.dumps([height, width]), "channels": str(cfg.in_chans)}
    for key, value in recorded.to_dict().items():  # lists as JSON, the source as it is
        metadata[key] = value if isinstance(value, str) else json.dumps(value)
    if preprocess is not None:
        mean, std = preprocess.mean_std
        metadata |= {
            "color_mode": mode_of(preprocess.in_chans),
            "resize": preprocess.resize,
            "antialias": json.dumps(preprocess.antialias),
            "normalization": preprocess.normalization,
            "mean": json.dumps(mean),
            "std": json.dumps(std),
            **IMAGE_ORIENTATION,  # as vitkit decodes a file: a phone's photo upright
        }
    return metadata


# The first opset with LayerNormalization, which every vitkit model holds.
MIN_OPSET = 17


def export_onnx(
    model: VisionTransformer | ResNetClassifier,
    path: str | os.PathLike,
    *,
    batch_size: int = 2,
    opset: int | None = None,
    external_data: bool = False,
    check: Callable[[Path], None] | None = None,
    class_names: Sequence[str] | None = None,
    wnids: Sequence[str] | None = None,
    pretrained: str | None = None,
    preprocess: Preprocess | None = None,
) -> Path:
    """Export ``model`` (a vitkit ``VisionTransformer`` or ``ResNetClassifier``) to ONNX at ``path``.

    ``batch_size`` is the example batch traced through the model; the exported batch dimension is
    dynamic whatever it is. ``opset`` is the ONNX opset (default: torch's). With ``external_data``
    the weights go to ``<path>.data`` beside the graph, where torch puts them anyway past 1.5 GiB
    (protobuf caps one file at 2 GB; ViT-H holds 2.5 GB of float32 weights). The files are staged
    in a temporary directory and renamed into place, weights first, so a reader never sees a
    half-written graph or a graph without its weights. ``class_names``, ``wnids``,
    ``pretrained`` and ``preprocess`` (default: the official preprocessing at the model's
    resolution) go into the file's ``metadata_props`` (``onnx_metadata``). ``check`` is called
    with the staged graph's path before it is renamed into place: what it raises leaves nothing
    written and a previous export as it was. An ``opset`` the exporter does not write is a
    ``ConfigError`` (torch's exporter writes its own opset where it cannot convert, and says so
    only on stderr). Returns ``path``.
    """
    require_onnx()
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
    if opset is not None:
        from onnx.defs import onnx_opset_version

        newest = onnx_opset_version()  # before the exporter, which prints a traceback first
        if not MIN_OPSET <= opset <= newest:
            raise ConfigError(
                f"opset={opset}: expected {MIN_OPSET} (LayerNormalization's first) to {newest} "
                "(this onnx's newest), or none for torch's own"
            )
    path = Path(path)
    if path.is_dir():
        raise UserFileError(
            f"{path} is a directory: the ONNX output is a file, e.g. {path}/model.onnx"
        )
    cfg = model.cfg
    metadata = onnx_metadata(
        cfg, class_names=class_names, wnids=wnids, pretrained=pretrained, preprocess=preprocess
    )
    images = torch.zeros(
        batch_size, cfg.in_chans, *cfg.image_hw, device=_device(model)
    )  # (B, C, H, W)
    output = "logits" if cfg.num_classes else "features"
    with eval_mode(model):
        program = torch.onnx.export(
            model,
            (images,),
            # torch.export, not TorchScript: the same numbers here (SDPA included), but TorchScript
            # is deprecated since torch 2.9 and traces control flow on shapes into silent
            # constants, where torch.export proves the batch dimension symbolic or refuses. The
            # cost: onnxscript as a dependency, and a few seconds per export.
            dynamo=True,
            input_names=["images"],
            output_names=[output],
            dynamic_shapes={"images": {0: torch.export.Dim("batch")}},
            opset_version=opset,
            verbose=False,  # otherwise the exporter prints its progress on stdout
        )
    assert program is not None  # None only from the legacy exporter (dynamo=False)
    written = program.model.opset_imports.get("")
    if opset is not None and written != opset:  # torch says so on stderr, then writes its own
        raise ConfigError(
            f"opset={opset}: torch's exporter cannot write this model at it (it wrote opset "
            f"{written}; LayerNormalization needs 17 or later): expected an opset it converts "
            "to, e.g. 17 to 25 with torch 2.14, or none for torch's own"
        )
    program.model.metadata_props.update(metadata)
    data = path.with_name(f"{path.name}.data")  # the name torch gives external weights
    # Not files.atomic_write: torch writes the weights' file name into the graph, so the graph
    # must be saved under its final name, which a hidden folder beside it allows.
    with atomic_files(path.parent) as tmp:
        staged = tmp / path.name
        try:
            program.save(staged, external_data=external_data)
        except OSError as e:  # onnx's writer names no file
            raise OSError(e.errno, e.strerror, str(e.filename or staged)) from None
        external = staged.with_name(data.name).exists()
        _fsync(staged, *([staged.with_name(data.name)] if external else []))
        if check is not None:  # before the rename: a file that fails it replaces nothing
            check(staged)
    if not external:
        data.unlink(missing_ok=True)  # the weights of a graph this export replaced
    return path


def verify_onnx(model: nn.Module, path: str | os.PathLike, images: Tensor) -> float:
    """Max absolute difference between onnxruntime's (CPU) outputs for ``images`` (B, C, H, W) and
    ``model``'s."""
    require_onnx()
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's own classes (InvalidGraph, Fail), none an OSError
        problem = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"onnxruntime cannot load {path}: {problem}") from None
    (name,) = [i.name for i in session.get_inputs()]
    (got,) = session.run(None, {name: images.detach().to("cpu", torch.float32).numpy()})
    with eval_mode(model), torch.inference_mode():
        want = model(images.to(_device(model))).float().cpu().numpy()  # (B, K) or (B, R)
    if got.shape != want.shape:
        raise CheckpointError(
            f"{path} returns shape {got.shape} where the model returns {want.shape}"
        )
    return float(np.abs(got - want).max())


def export_openvino(
    model: VisionTransformer | ResNetClassifier,
    path: str | os.PathLike,
    *,
    class_names: Sequence[str] | None = None,
    wnids: Sequence[str] | None = None,
    pretrained: str | None = None,
    preprocess: Preprocess | None = None,
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Export ``model`` to OpenVINO's IR: ``path`` (``.xml``, the graph) and the same name with
    ``.bin`` (its fp32 weights), converted by OpenVINO's PyTorch frontend with a dynamic batch;
    what travels with the weights goes into the IR's ``rt_info`` (``model_info``; the ONNX
    file's keys). Staged in a temporary directory and renamed into place, weights first, after
    ``check`` of the staged graph's path, as ``export_onnx``'s."""
    from ..runtime.openvino import require_openvino

    ov = require_openvino()
    path = Path(path)
    if path.suffix != ".xml" or path.is_dir():
        raise UserFileError(f"{path}: expected the IR's graph file, e.g. model.xml")
    cfg = model.cfg
    metadata = onnx_metadata(
        cfg, class_names=class_names, wnids=wnids, pretrained=pretrained, preprocess=preprocess
    )
    c, (h, w) = cfg.in_chans, cfg.image_hw
    example = torch.zeros(2, c, h, w)  # a batch of one could be traced as a constant 1
    with eval_mode(model), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings on Python conditions
        converted = ov.convert_model(model.cpu(), example_input=example, input=[(-1, c, h, w)])
    converted.inputs[0].get_tensor().set_names({"images"})
    converted.outputs[0].get_tensor().set_names({"logits" if cfg.num_classes else "features"})
    for key, value in metadata.items():
        converted.set_rt_info(value, ["model_info", key])
    with atomic_files(path.parent) as tmp:
        staged = tmp / path.name
        try:  # fp32 weights: OpenVINO compresses them to fp16 by default, which would move logits
            ov.save_model(converted, staged, compress_to_fp16=False)
        except RuntimeError as e:  # its writer's failure names neither the file nor the errno
            raise UserFileError(
                f"cannot write {path} and {path.with_suffix('.bin').name}: OpenVINO's writer "
                f"failed ({str(e).strip()}); is the disk full?"
            ) from None
        _fsync(staged, staged.with_suffix(".bin"))
        if check is not None:
            check(staged)
    return path


def _fsync(*files: Path) -> None:
    """Flush ``files`` to the disk, before they are renamed into place."""
    for written in files:
        with open(written, "rb") as f:
            os.fsync(f.fileno())


def verify_openvino(
    model: nn.Module, path: str | os.PathLike, images: Tensor, *, bf16: bool
) -> float:
    """Max absolute difference between OpenVINO's CPU outputs for ``images`` (B, C, H, W), in
    f32 (or bf16, ``bf16``) inference precision, and ``model``'s (fp32); NaN where either has
    a NaN."""
    from ..runtime.openvino import require_openvino

    core = require_openvino().Core()
    read = core.read_model(str(path))
    read.reshape([-1, *images.shape[1:]])
    hint = {"INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32"}
    compiled = core.compile_model(read, "CPU", hint)
    got = compiled.create_infer_request().infer([images.detach().float().cpu().numpy()])[0]
    with eval_mode(model), torch.inference_mode():
        want = model(images.to(_device(model))).float().cpu().numpy()  # (B, K) or (B, R)
    if got.shape != want.shape:
        raise CheckpointError(
            f"{path} returns shape {got.shape} where the model returns {want.shape}"
        )
    return float(np.abs(got - want).max()) if np.isfinite(got).all() else float("nan")
