"""Speed and memory of vitkit against timm, transformers and torchvision: one process, one run,
the same inputs, the contenders alternating.

    .venv/bin/python benchmarks/throughput.py          # quick default: the rows with speed targets
    .venv/bin/python benchmarks/throughput.py --full --out full.md --json full.json
    .venv/bin/python benchmarks/throughput.py --models ViT-B/16 --tasks infer --batch 1 32 --compile
    .venv/bin/python benchmarks/throughput.py --device cuda --models ViT-B/16 --tasks train --compile
    .venv/bin/python benchmarks/throughput.py --models fmnist --rounds 1 --iters 1 --batch 2 \\
        --train-batch 2 --peak-sizes 256                  # smoke run, seconds

Rows are model x task x precision x batch x contender:

* models: ViT presets at 224 (``ViT-Ti/16``, ``ViT-S/16``, ``ViT-B/16``, any preset name works) and
  ``fmnist``, the Fashion-MNIST model of ``vitkit.recipes.fmnist_vit``. One random draw of weights
  (std 0.02; LayerNorm scales 1 + that, so logits are O(1)) is loaded by every contender that can.
* tasks: ``infer`` is a forward pass under ``torch.inference_mode()`` at each ``--batch`` (batch 1:
  its ms/iter is the latency); ``train`` is forward, cross-entropy, backward, AdamW step and
  ``zero_grad`` at ``--train-batch`` (default 32; fmnist 128).
* precisions: ``fp32``, and ``bf16`` under ``torch.autocast`` of the device (fp32 weights).
* contenders: :data:`CONTENDERS`; a new fast path is one entry there.

Method. For each (model, task, precision, batch) the contenders are built, warmed up, and then timed
in rounds: each round times every contender for ``iters`` iterations, the order rotated by one per
round, so drift of a shared machine hits all alike. Half the rounds run on contenders built in the
opposite order (where weights land in memory can move matmul speed by ~5%: the model built second
ran slower, whichever it was; benchmarks/RESULTS.md). Each timing gives one images/s sample; the table shows the
median and min-max over rounds, the median over rounds of the per-round ratio to timm (eager
contenders against ``timm``, compiled ones against ``timm-compiled``), and the median as a
fraction of the matmul peak this run measures at that precision (square matrices of
``--peak-sizes``, median of 3, the faster of ``torch.mm`` and oneDNN's packed-weight product).
FLOPs are ``vitkit.model.flops.count_flops`` (2 x MACs of matmuls and convolutions: ViT-B/16 at
224 = 35.1 GFLOPs); a training step counts 3x the forward.

Correctness. ``max abs diff`` is the largest logit difference of an ``infer`` row's output against
vitkit eager fp32 on the same input, for contenders holding the same weights (bf16 rows show
bf16's own error against the fp32 reference).

Memory. ``mem MiB`` is what one iteration needs above the resting level (weights, and the optimizer
state made during warm-up, are resting; activations, gradients and temporaries are not). On CUDA:
``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus the allocated bytes
before. On CPU (Linux): the process's peak RSS (``VmHWM`` in ``/proc/self/status``, reset to the
current RSS by writing 5 to ``/proc/self/clear_refs``) minus its RSS before, after handing freed
heap back to the OS (``malloc_trim``; ``mallctl`` purge when jemalloc is preloaded) so that the
resting level is what is live. ``getrusage``'s peak cannot be reset, tracemalloc does not see
torch's allocations, and psutil reads no peak on Linux; elsewhere the column is empty.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import gc
import json
import math
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import vitkit
from vitkit.config import ModelConfig
from vitkit.inference.compiled import OneDNNLinear, optimize_for_inference
from vitkit.model.flops import count_flops
from vitkit.presets import PRESETS, get_config, resolve_name
from vitkit.recipes import fmnist_vit

FMNIST = "fmnist"
TASKS = ("infer", "train")
PRECISIONS = ("fp32", "bf16")
FULL_MODELS = ("ViT-Ti/16", "ViT-S/16", "ViT-B/16", FMNIST)
# The quick default: the rows with speed targets (benchmarks/RESULTS.md).
QUICK = (("ViT-B/16", "infer"), ("ViT-S/16", "train"), (FMNIST, "train"))
# torchvision's builders, by the vitkit preset they implement (random weights: torchvision's layout
# is not timm's, so these rows have speed but no logit check).
TORCHVISION = {
    "ViT-B/16": "vit_b_16",
    "ViT-B/32": "vit_b_32",
    "ViT-L/16": "vit_l_16",
    "ViT-L/32": "vit_l_32",
    "ViT-H/14": "vit_h_14",
}
MiB = 2**20


# --- the models under test and the contenders ---------------------------------------------------


@dataclass
class Subject:
    """A model under test: its config and the weights every same-weights contender loads."""

    name: str
    cfg: ModelConfig
    state: dict[str, Tensor]
    train_batch: int


def make_subject(name: str) -> Subject:
    """``fmnist`` or a preset name, with one seeded random draw of weights."""
    name = name if name == FMNIST else resolve_name(name)
    cfg = fmnist_vit() if name == FMNIST else get_config(name)
    torch.manual_seed(0)
    model = vitkit.create_model(cfg)
    with torch.no_grad():  # the head starts at zero and biases at zero: re-draw them all
        for p in model.parameters():
            p.normal_(0, 0.02)
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):  # scales near 1, as trained ones are: logits O(1)
                m.weight.add_(1.0)
    return Subject(name, cfg, model.state_dict(), 128 if name == FMNIST else 32)


class Logits(nn.Module):
    """transformers' models return an output object; the harness runs modules that give logits.
    A 1-channel model is exported as an RGB one (its kernel spread over R, G, B by luma weights
    that sum to 1), so a grey batch is fed to it as three equal channels: the same logits."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.channels = inner.config.num_channels

    def forward(self, images: Tensor) -> Tensor:
        if images.shape[1] != self.channels:  # (B, 1, H, W) -> (B, 3, H, W)
            images = images.expand(-1, self.channels, -1, -1)
        return self.inner(pixel_values=images).logits


# Builds one contender's model for a row at a precision ("fp32", "bf16"; a fast path may prepare its
# weights for it); None where it has no such model.
Builder = Callable[[Subject, str], "nn.Module | None"]


def build_vitkit(subject: Subject, precision: str) -> nn.Module | None:
    model = vitkit.create_model(subject.cfg)
    model.load_state_dict(subject.state)
    return model


def build_timm(subject: Subject, precision: str) -> nn.Module | None:
    """timm's registered model where the preset has one (vitkit lists timm's name as an alias),
    else timm's ``VisionTransformer`` built from the config; strict loading of vitkit's state
    dict (timm's layout) proves the architecture matches."""
    import timm

    preset = PRESETS.get(subject.name)
    names = [a for a in preset.aliases if timm.is_model(a)] if preset else []
    if names:
        model = timm.create_model(names[0], pretrained=False)
    else:
        cfg = subject.cfg
        model = timm.models.vision_transformer.VisionTransformer(
            img_size=cfg.image_hw,
            patch_size=cfg.patch_size,
            in_chans=cfg.in_chans,
            num_classes=cfg.num_classes,
            embed_dim=cfg.hidden_size,
            depth=cfg.num_layers,
            num_heads=cfg.num_heads,
            mlp_ratio=cfg.mlp_dim / cfg.hidden_size,
        )
    model.load_state_dict(subject.state)
    return model


def build_transformers(subject: Subject, precision: str) -> nn.Module | None:
    """``ViTForImageClassification`` with SDPA attention, from a ``save_pretrained`` directory
    that vitkit writes."""
    from transformers import ViTForImageClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as tmp:
        path = vitkit.save(build_vitkit(subject, precision), Path(tmp) / "hf", format="hf")
        model = ViTForImageClassification.from_pretrained(path, attn_implementation="sdpa")
    return Logits(model)


def build_torchvision(subject: Subject, precision: str) -> nn.Module | None:
    if subject.name not in TORCHVISION:
        return None
    import torchvision

    return torchvision.models.get_model(TORCHVISION[subject.name], weights=None)


class OnnxRuntime(nn.Module):
    """The model exported to ONNX (``vitkit export``'s path) and run by onnxruntime on CPU, behind a
    module's call so the harness times it like the others (the numpy hand-over shares memory)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()  # the same threads as torch
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name

    def forward(self, images: Tensor) -> Tensor:
        (logits,) = self.session.run(None, {self.input: images.numpy()})
        return torch.from_numpy(logits)


def build_onnx(subject: Subject, precision: str) -> nn.Module | None:
    """vitkit's model through ``vitkit.io.export.export_onnx`` (dynamic batch) and onnxruntime;
    fp32 only (the exported graph is fp32, autocast does not reach it)."""
    if precision != "fp32":
        return None
    from vitkit.io.export import export_onnx

    with tempfile.TemporaryDirectory() as tmp:
        path = export_onnx(build_vitkit(subject, precision), Path(tmp) / "model.onnx")
        return OnnxRuntime(path)  # the session holds the graph: the file may go


def compiled(build: Builder) -> Builder:
    """``torch.compile`` of what ``build`` makes (default settings; compiles on first call)."""

    def build_compiled(subject: Subject, precision: str) -> nn.Module | None:
        model = build(subject, precision)
        return None if model is None else torch.compile(model)

    return build_compiled


def adamw(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-4)


def fused_adamw(params: Any) -> torch.optim.Optimizer:
    """AdamW as one fused kernel over all parameters (CPU and CUDA), what vitkit's loop uses."""
    return torch.optim.AdamW(params, lr=1e-4, fused=True)


@dataclass(frozen=True)
class Contender:
    """One way to run a model: how to build it, and what the harness does with it."""

    build: Builder
    same_weights: bool = True  # it loads Subject.state, so its logits are checked against vitkit's
    compiled: bool = False  # compared with timm-compiled, and only run when asked (slow warm-up)
    # vitkit's documented fast path: inference through optimize_for_inference, training compiled
    # as train.compile does; compared with timm as users run it (eager)
    fast: bool = False
    tasks: tuple[str, ...] = TASKS
    devices: tuple[str, ...] = ("cpu", "cuda")
    optimizer: Callable[[Any], torch.optim.Optimizer] = adamw

    @property
    def reference(self) -> str:
        return "timm-compiled" if self.compiled else "timm"


CONTENDERS: dict[str, Contender] = {
    "vitkit": Contender(build_vitkit),
    "timm": Contender(build_timm),
    "transformers": Contender(build_transformers),
    "torchvision": Contender(build_torchvision, same_weights=False),
    "vitkit-compiled": Contender(compiled(build_vitkit), compiled=True),
    "timm-compiled": Contender(compiled(build_timm), compiled=True),
    "onnxruntime": Contender(build_onnx, tasks=("infer",), devices=("cpu",)),
    "vitkit-fast": Contender(build_vitkit, fast=True, optimizer=fused_adamw),
}


# --- measuring ----------------------------------------------------------------------------------


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(
    contender: Contender,
    model: nn.Module,
    task: str,
    precision: str,
    x: Tensor,
    y: Tensor,
) -> Callable[[], Tensor]:
    """One iteration of ``task`` on ``model``: returns the logits (infer) or the loss (train)."""
    if task == "infer" and contender.fast:
        fast = optimize_for_inference(model, bf16=precision == "bf16")
        return lambda: fast(x)
    if task == "infer":
        model.eval()

        def infer() -> Tensor:
            with torch.inference_mode(), autocast(precision, x.device):
                return model(x)

        return infer
    model.train()
    opt = contender.optimizer(model.parameters())
    if contender.fast:
        model = torch.compile(model)

    def train() -> Tensor:
        with autocast(precision, x.device):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return train


def build_steps(
    subject: Subject, task: str, precision: str, names: Sequence[str], x: Tensor, y: Tensor
) -> dict[str, Callable[[], Tensor]]:
    """The iteration of each contender that has the model, built in the order of ``names``."""
    steps = {}
    for name in names:
        model = CONTENDERS[name].build(subject, precision)
        if model is not None:
            steps[name] = make_step(CONTENDERS[name], model.to(x.device), task, precision, x, y)
    return steps


def timed(step: Callable[[], Any], iters: int, device: torch.device) -> float:
    """Seconds for ``iters`` calls of ``step``."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(iters):
        step()
    synchronize(device)
    return time.perf_counter() - start


def _status_kib(key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    if match is None:
        raise OSError(f"no {key} in /proc/self/status")
    return int(match.group(1))


def release_free_memory() -> None:
    """Hand freed heap back to the OS, so that RSS is what is live."""
    libc = ctypes.CDLL(None)
    if hasattr(libc, "mallctl"):  # jemalloc preloaded: purge every arena (MALLCTL_ARENAS_ALL)
        libc.mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0))
    if hasattr(libc, "malloc_trim"):  # glibc
        libc.malloc_trim(ctypes.c_size_t(0))


def peak_memory(step: Callable[[], Any], device: torch.device) -> int | None:
    """Call ``step`` once; returns the bytes it needed above the resting level (see the module
    docstring), or None where the platform cannot tell."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    try:
        release_free_memory()
        before = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
    except OSError:
        step()
        return None
    step()
    return (_status_kib("VmHWM") - before) * 1024


def _mm(a: Tensor, b: Tensor) -> Callable[[], Any]:
    """``torch.mm`` into a preallocated output (the kernel, not the allocator): MKL for fp32 on
    CPU, oneDNN for bf16, cuBLAS on CUDA."""
    out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
    return lambda: torch.mm(a, b, out=out)


def _onednn_linear(a: Tensor, b: Tensor) -> Callable[[], Any] | None:
    """oneDNN's matmul with the weight packed once in its layout (``OneDNNLinear``, what
    ``optimize_for_inference(backend="onednn")`` runs); None off CPU, for bf16 (``torch.mm``
    is oneDNN's already) or where torch has no oneDNN."""
    if (
        a.device.type != "cpu"
        or a.dtype != torch.float32
        or not torch.backends.mkldnn.is_available()
    ):
        return None
    linear = nn.Linear(b.shape[0], b.shape[1], bias=False)
    with torch.no_grad():
        linear.weight.copy_(b.t())
    packed = OneDNNLinear(linear)
    return lambda: packed(a)


MATMUL_PATHS: dict[str, Callable[[Tensor, Tensor], Callable[[], Any] | None]] = {
    "torch.mm": _mm,
    "oneDNN packed": _onednn_linear,
}


def matmul_peak(
    precision: str, device: torch.device, sizes: Sequence[int], repeats: int = 3
) -> tuple[float, str]:
    """GFLOP/s of the fastest matrix product this machine offers at ``precision``: the best, over
    ``sizes`` (square matrices) and :data:`MATMUL_PATHS`, of the median of ``repeats`` timings;
    returns it with the path that reached it. Both paths count because which library is faster
    depends on the CPU (MKL runs a generic code path on AMD's, oneDNN does not)."""
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    best, best_path = 0.0, ""
    for n in sizes:
        a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        for path, make in MATMUL_PATHS.items():
            call = make(a, b)
            if call is None:
                continue
            call()  # warm-up
            seconds = statistics.median(timed(call, 1, device) for _ in range(repeats))
            if 2 * n**3 / seconds / 1e9 > best:
                best, best_path = 2 * n**3 / seconds / 1e9, path
    return best, best_path


@dataclass
class Row:
    """The measurements of one contender on one (model, task, precision, batch)."""

    model: str
    task: str
    precision: str
    batch: int
    contender: str
    flops: int  # per image: forward, or 3x forward for a training step
    iters: int = 0
    seconds: list[float] = field(default_factory=list)  # one timing of `iters` iterations a round
    max_abs_diff: float | None = None
    peak_bytes: int | None = None

    @property
    def rates(self) -> list[float]:
        """Images/s of each round."""
        return [self.batch * self.iters / s for s in self.seconds]


def measure(
    subject: Subject,
    task: str,
    precision: str,
    batch: int,
    names: Sequence[str],
    *,
    rounds: int,
    iters: int | None,
    warmup: int,
    min_time: float,
    device: torch.device,
) -> list[Row]:
    """Rows of every contender in ``names`` that has this model and task (see the module docstring).

    ``iters=None`` picks the iterations per timing so that the fastest contender's timing lasts
    ``min_time`` seconds (judged by the iteration measured for memory), at most 100.
    """
    cfg = subject.cfg
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, cfg.in_chans, *cfg.image_hw, generator=gen).to(device)  # (B, C, H, W)
    y = torch.randint(0, cfg.num_classes, (batch,), generator=gen).to(device)
    reference = None
    if task == "infer":  # the reference path: vitkit eager fp32
        with torch.inference_mode():
            reference = build_vitkit(subject, "fp32").to(device).eval()(x).float()
    names = [
        n for n in names if task in CONTENDERS[n].tasks and device.type in CONTENDERS[n].devices
    ]
    flops = count_flops(cfg) * (3 if task == "train" else 1)
    rows: dict[str, Row] = {}
    done = 0
    for half, half_rounds in enumerate(((rounds + 1) // 2, rounds // 2)):
        if half_rounds == 0:
            continue
        steps = build_steps(subject, task, precision, names if half == 0 else names[::-1], x, y)
        if not steps:
            return []
        order = list(steps)
        for name in order:
            out = steps[name]()  # the first warm-up iteration: its logits are checked
            if half == 0:
                row = rows[name] = Row(subject.name, task, precision, batch, name, flops)
                if reference is not None and CONTENDERS[name].same_weights:
                    row.max_abs_diff = (out.float() - reference).abs().max().item()
            for _ in range(warmup - 1):
                steps[name]()
        if half == 0:  # one more iteration each, measured for memory and timed for `iters`
            seconds = []
            for name in order:
                start = time.perf_counter()
                rows[name].peak_bytes = peak_memory(steps[name], device)
                seconds.append(time.perf_counter() - start)
            n_iters = iters or max(1, min(100, math.ceil(min_time / min(seconds))))
            for row in rows.values():
                row.iters = n_iters
        for _ in range(half_rounds):
            k = done % len(order)
            for name in order[k:] + order[:k]:
                rows[name].seconds.append(timed(steps[name], rows[name].iters, device))
            done += 1
        del steps, out
    gc.collect()  # whatever reference cycles kept this row's models alive: free them now
    return [rows[n] for n in names if n in rows]


# --- reporting ----------------------------------------------------------------------------------


# Dense bf16 tensor-core peaks from NVIDIA's datasheets (TFLOP/s, SXM parts), by a substring of
# torch.cuda.get_device_name: model FLOPs utilisation (MFU) is measured against these, the way
# training reports quote it, beside the fraction of the matmul peak the harness measures itself.
DATASHEET_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L4": 121.0}


def datasheet_peak(device: torch.device) -> float | None:
    """The datasheet's dense bf16 peak of ``device`` in GFLOP/s; None for CPUs and unlisted GPUs."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((t * 1e3 for key, t in DATASHEET_BF16_TFLOPS.items() if key in name), None)


def summarize(
    rows: Sequence[Row], peaks: dict[str, float], datasheet: float | None = None
) -> list[dict[str, Any]]:
    """Per row: median, min and max images/s, ms per iteration, median per-round ratio to the
    reference contender of the same (model, task, precision, batch), fraction of the measured
    peak, and MFU against ``datasheet`` (GFLOP/s) where it is known."""
    by_key = {(r.model, r.task, r.precision, r.batch, r.contender): r for r in rows}
    out = []
    for r in rows:
        rates = r.rates
        ref = by_key.get((r.model, r.task, r.precision, r.batch, CONTENDERS[r.contender].reference))
        ratio = None
        if ref is not None:
            ratio = statistics.median(a / b for a, b in zip(rates, ref.rates, strict=True))
        median = statistics.median(rates)
        out.append(
            {
                **asdict(r),
                "images_per_s": median,
                "images_per_s_min": min(rates),
                "images_per_s_max": max(rates),
                "ms_per_iter": statistics.median(r.seconds) / r.iters * 1e3,
                "ratio_to_timm": ratio,
                "fraction_of_peak": median * r.flops / 1e9 / peaks[r.precision],
                "mfu": None if datasheet is None else median * r.flops / 1e9 / datasheet,
            }
        )
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(summary: Sequence[dict[str, Any]]) -> str:
    mfu = any(s["mfu"] is not None for s in summary)  # a GPU with a datasheet peak
    lines = [
        "| model | task | precision | batch | contender | ms/iter | img/s | min-max | vs timm "
        "| % peak | max abs diff | mem MiB |" + (" MFU % |" if mfu else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if mfu else ""),
    ]
    for s in summary:
        mem = None if s["peak_bytes"] is None else s["peak_bytes"] / MiB
        lines.append(
            f"| {s['model']} | {s['task']} | {s['precision']} | {s['batch']} | {s['contender']} "
            f"| {s['ms_per_iter']:.1f} | {s['images_per_s']:.2f} "
            f"| {s['images_per_s_min']:.2f}-{s['images_per_s_max']:.2f} "
            f"| {_fmt(s['ratio_to_timm'], '.3f')} | {100 * s['fraction_of_peak']:.1f} "
            f"| {_fmt(s['max_abs_diff'], '.1e')} | {_fmt(mem, '.1f')} |"
            + (f" {100 * s['mfu']:.1f} |" if mfu else "")
        )
    return "\n".join(lines)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment(device: torch.device) -> dict[str, Any]:
    """The machine and software a run measured."""
    if device.type == "cuda":
        machine = torch.cuda.get_device_name(device)
    else:
        cpuinfo = Path("/proc/cpuinfo")
        text = cpuinfo.read_text() if cpuinfo.exists() else ""
        name = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
        flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
        isa = [
            f
            for f in ("avx512f", "avx512_bf16", "amx_bf16")
            if flags and f in flags.group(1).split()
        ]
        machine = f"{name.group(1) if name else platform.processor() or platform.machine()}"
        machine += f" ({', '.join(isa) or 'no AVX-512'})"
    preload = os.environ.get("LD_PRELOAD", "")
    allocator = "jemalloc" if "jemalloc" in preload else "default (glibc malloc)"
    return {
        "command": shlex.join([os.path.relpath(sys.executable), *sys.argv]),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "device": str(device),
        "machine": machine,
        "threads": torch.get_num_threads(),
        "allocator": allocator + (f" (LD_PRELOAD={preload})" if preload else ""),
        "versions": {p: _version(p) for p in ("torch", "timm", "transformers", "torchvision")},
    }


def header(
    env: dict[str, Any], peaks: dict[str, float], paths: dict[str, str], sizes: Sequence[int]
) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    gflops = ", ".join(f"{p} {g:.0f} GFLOP/s ({paths[p]})" for p, g in peaks.items())
    return "\n".join(
        [
            f"Command: `{env['command']}`  ",
            f"Date: {env['date']}  ",
            f"Machine: {env['machine']}, device {env['device']}, {env['threads']} threads, "
            f"allocator {env['allocator']}  ",
            f"Versions: {versions}  ",
            f"Matmul peak (fastest of {', '.join(MATMUL_PATHS)}; n={'/'.join(map(str, sizes))}): "
            f"{gflops}",
        ]
    )


# --- command line -------------------------------------------------------------------------------


def step_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments of a script that runs one training step of one model (step_profile.py,
    compile_variants.py): the device, the model, its batch and precision, the untimed warm-up
    steps and where the figures go as JSON."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="ViT-B/16", help="a preset or 'fmnist'")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation) first")
    parser.add_argument("--json", type=Path, help="write the table's numbers here")
    return parser


def step_device(args: argparse.Namespace, script: str) -> torch.device:
    """``--device``, or the script's exit with one line where it names CUDA and torch sees none."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{script}: --device {args.device}: torch sees no CUDA device here")
    return device


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--full", action="store_true", help="all models, tasks, batches 1 and 32, all contenders"
    )
    parser.add_argument("--models", nargs="+", help=f"presets or {FMNIST!r} (default: quick plan)")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, help="default: quick plan")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--batch", nargs="+", type=int, help="inference batches (default 32)")
    parser.add_argument("--train-batch", type=int, help="default 32, fmnist 128")
    parser.add_argument("--contenders", nargs="+", choices=list(CONTENDERS))
    parser.add_argument("--compile", action="store_true", help="add the compiled contenders")
    parser.add_argument("--rounds", type=int, default=6, help="timings per contender and row")
    parser.add_argument("--iters", type=int, help="iterations per timing (default: --min-time)")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds per timing")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations first")
    parser.add_argument("--peak-sizes", nargs="+", type=int, default=[2048, 4096])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    args = parser.parse_args(argv)
    for flag in ("rounds", "warmup", "train_batch", "iters"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    return args


def plan(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[int], list[str]]:
    """(model, task) jobs, inference batches and contender names the arguments ask for."""
    if args.full or args.models or args.tasks:
        models = args.models or list(FULL_MODELS)
        jobs = [(m, t) for m in models for t in (args.tasks or TASKS)]
    else:
        jobs = list(QUICK)
    jobs = [(m if m == FMNIST else resolve_name(m), t) for m, t in jobs]  # unknown names fail here
    batches = args.batch or ([1, 32] if args.full else [32])
    names = args.contenders or (
        list(CONTENDERS) if args.full else ["vitkit", "vitkit-fast", "timm"]
    )
    if args.compile or (args.full and not args.contenders):
        names += [n for n, c in CONTENDERS.items() if c.compiled and n not in names]
    return jobs, batches, names


def run(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Measure what ``args`` ask for; returns the Markdown report and the raw numbers."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: torch sees no CUDA device here")
    jobs, batches, names = plan(args)
    measured = {p: matmul_peak(p, device, args.peak_sizes) for p in args.precisions}
    peaks = {p: gflops for p, (gflops, _) in measured.items()}
    paths = {p: path for p, (_, path) in measured.items()}
    rows: list[Row] = []
    for model_name, task in jobs:
        subject = make_subject(model_name)
        for precision in args.precisions:
            for batch in batches if task == "infer" else [args.train_batch or subject.train_batch]:
                print(
                    f"{subject.name} {task} {precision} batch {batch}", file=sys.stderr, flush=True
                )
                rows += measure(
                    subject,
                    task,
                    precision,
                    batch,
                    names,
                    rounds=args.rounds,
                    iters=args.iters,
                    warmup=args.warmup,
                    min_time=args.min_time,
                    device=device,
                )
    env = environment(device)
    summary = summarize(rows, peaks, datasheet_peak(device))
    report = header(env, peaks, paths, args.peak_sizes) + "\n\n" + table(summary)
    return report, {"environment": env, "peak_gflops": peaks, "peak_path": paths, "rows": summary}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        report, raw = run(args)
    except (ValueError, OSError, ImportError) as e:
        sys.exit(f"throughput: {e}")
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1) + "\n")


if __name__ == "__main__":
    main()
