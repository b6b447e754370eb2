"""The per-core table on a CPU: vitkit's default against timm's default (fp32), and both at equal
precision (fp32, bf16 autocast), with vitkit's int8 beside; ViT-Ti/16, S/16 and B/16 at 224 px
(and the main job's model), inference at batch 1 (latency) and 32 (throughput), a training step at
batch 32. One process, the contenders of a row alternating, medians.

    .venv/bin/python benchmarks/cpu_table.py                       # the table (about 30 minutes)
    .venv/bin/python benchmarks/cpu_table.py --models ViT-S/16 --rows infer:32 --rounds 3

Contenders of a row (every one holds the same weights: throughput.py's ``make_subject``):

* ``vitkit default``: vitkit eager in the precision ``auto`` chooses for the row on this machine
  (runtime/arithmetic.py; the row says which), what ``vitkit train``, ``eval`` and ``predict`` do
  without flags; measured once when it is one of the next two;
* ``vitkit fp32``, ``vitkit bf16``; ``timm fp32`` (timm's default), ``timm bf16``, under the same
  ``torch.autocast``;
* inference only: ``vitkit bf16 fast`` (``optimize_for_inference(bf16=True)``: compiled, frozen
  weights; ``--fast``) and ``vitkit int8`` (inference/int8.py: calibrated on 4 batches of random
  images, compiled); where openvino is installed, ``vitkit openvino`` (the engine ``vitkit
  predict/eval`` take for a long run on a CPU with native bf16: inference/openvino.py, precision
  ``auto``) and ``openvino`` (OpenVINO at its defaults: ``convert_model`` at the row's static
  shape, ``compile_model(model, "CPU")``: bf16 on a CPU with native bf16, the LATENCY hint).

A training step is forward, cross-entropy, backward and AdamW (fused for both). Each round times
every contender for ``--min-time`` seconds' worth of iterations, the order rotated by one per round;
a ratio is the median over rounds of the per-round ratio. A training row measures its contenders a
pair at a time (vitkit and timm at one precision, the only two models in memory, alternating), as
one would compare two libraries alone: four models' weights, gradients and AdamW states at once
(5.5 GB for ViT-B/16) measured something of their own.

The share of the silicon: before the rows, the run measures this machine's GEMM peak in fp32,
bf16 and int8 (the best median over fixed products: 4096³ and each model's qkv, fc1 and fc2 at
M = batch x tokens; ``torch.mm``, oneDNN's packed weight for fp32, ``torch._int_mm`` for int8).
Each row's MFU is its FLOPs (the forward pass, three times it for a training step) over that
peak at the contender's precision. Where the CPU's model and clock are known (``DATASHEET``), the
MFU against the datasheet is printed too; where the machine hides its model, the header says so.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import re
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from throughput import (
    FMNIST,
    MATMUL_PATHS,
    build_timm,
    build_vitkit,
    environment,
    make_subject,
    timed,
)
from vitkit.inference.compiled import optimize_for_inference
from vitkit.model.flops import count_flops
from vitkit.runtime.arithmetic import cpu_features, decide_auto
from vitkit.runtime.openvino import openvino_version

MODELS = ("ViT-Ti/16", "ViT-S/16", "ViT-B/16", FMNIST)
ROWS = ("infer:1", "infer:32", "train:32")
CPU = torch.device("cpu")
# (numerator, denominator): the ratios the table reports, where both were measured
RATIOS = (
    ("vitkit default", "timm fp32"),
    ("vitkit fp32", "timm fp32"),
    ("vitkit bf16", "timm bf16"),
    ("vitkit int8", "vitkit bf16"),
    ("vitkit int8", "vitkit bf16 fast"),
    ("vitkit openvino", "openvino"),
    ("vitkit bf16 fast", "openvino"),
    ("vitkit int8", "openvino"),
)


def _autocast(bf16: bool) -> contextlib.AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)


def infer_step(model: Any, x: torch.Tensor, bf16: bool) -> Callable[[], Any]:
    model.eval()

    def step() -> Any:
        with torch.inference_mode(), _autocast(bf16):
            return model(x)

    return step


def train_step(model: Any, x: torch.Tensor, y: torch.Tensor, bf16: bool) -> Callable[[], Any]:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step() -> Any:
        with _autocast(bf16):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


Contender = Callable[[], Callable[[], Any]]  # builds a contender's model, returns its iteration


def contenders(subject: Any, task: str, x: torch.Tensor, y: torch.Tensor) -> dict[str, Contender]:
    """Each contender of a row, built when it is measured."""

    def library(build: Callable[..., Any], precision: str) -> Contender:
        bf16 = precision == "bf16"

        def make() -> Callable[[], Any]:
            model = build(subject, precision)
            return infer_step(model, x, bf16) if task == "infer" else train_step(model, x, y, bf16)

        return make

    found = {
        f"{name} {precision}": library(build, precision)
        for name, build in (("vitkit", build_vitkit), ("timm", build_timm))
        for precision in ("fp32", "bf16")
    }
    if task == "train":
        return found

    def fast() -> Callable[[], Any]:
        model = optimize_for_inference(build_vitkit(subject, "bf16"), bf16=True)
        return lambda: model(x)

    def int8() -> Callable[[], Any]:
        from vitkit.inference.int8 import quantize_int8

        calibration = [torch.rand_like(x) * 2 - 1 for _ in range(4)]
        model = quantize_int8(build_vitkit(subject, "fp32"), calibration)
        return lambda: model(x)

    found |= {"vitkit bf16 fast": fast, "vitkit int8": int8}
    if openvino_version() is not None:
        found |= _openvino(subject, x)
    return found


def _openvino(subject: Any, x: torch.Tensor) -> dict[str, Contender]:
    """vitkit's OpenVINO engine and OpenVINO at its own defaults, on the same weights."""

    def engine() -> Callable[[], Any]:
        from vitkit.inference.openvino import OpenVINOInference
        from vitkit.runtime.openvino import require_openvino

        require_openvino()  # under this process's jemalloc: see require_openvino
        model = OpenVINOInference(build_vitkit(subject, "fp32"), precision="auto")
        return lambda: model(x)

    def defaults() -> Callable[[], Any]:
        from vitkit.runtime.openvino import require_openvino

        ov = require_openvino()
        model = build_vitkit(subject, "fp32")
        assert model is not None
        with torch.no_grad():
            converted = ov.convert_model(model.eval(), example_input=x, input=[tuple(x.shape)])
        request = ov.Core().compile_model(converted, "CPU").create_infer_request()
        array = x.numpy()
        return lambda: request.infer([array])[0]

    return {"vitkit openvino": engine, "openvino": defaults}


def precision_of(contender: str, default: str) -> str:
    """The arithmetic a contender runs in, whose peak its MFU is measured against (OpenVINO's
    defaults: bf16 where the CPU has it natively, as ``auto`` decides for a large batch)."""
    if contender == "vitkit default":
        return default
    if "openvino" in contender:
        return "bf16" if cpu_features().native_bf16 else "fp32"
    return "int8" if "int8" in contender else "bf16" if "bf16" in contender else "fp32"


def alternate(
    steps: dict[str, Callable[[], Any]], batch: int, rounds: int, min_time: float
) -> dict[str, list[float]]:
    """Images/s of each of ``steps`` a round, each timed for ``min_time`` seconds' worth of
    iterations, the order rotated by one per round."""
    iters = {}
    for name, step in steps.items():
        step()  # warm-up (compilation for the compiled ones)
        seconds = timed(step, 1, CPU)
        iters[name] = max(1, round(min_time / seconds))
    names = list(steps)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            rates[name].append(batch * iters[name] / timed(steps[name], iters[name], CPU))
    return rates


def measure(subject: Any, task: str, batch: int, rounds: int, min_time: float) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(1)
    cfg = subject.cfg
    x = torch.randn(batch, cfg.in_chans, *cfg.image_hw, generator=gen)  # (B, C, H, W)
    y = torch.randint(0, cfg.num_classes, (batch,), generator=gen)
    gflop = count_flops(cfg) * batch / 1e9
    default, _ = decide_auto(CPU, task="train" if task == "train" else "infer", gflop=gflop)
    found = contenders(subject, task, x, y)
    # training: vitkit and timm at one precision at a time; inference: every contender together
    groups = (
        [[f"vitkit {p}", f"timm {p}"] for p in ("fp32", "bf16")]
        if task == "train"
        else [list(found)]
    )
    rates: dict[str, list[float]] = {}
    for group in groups:
        rates |= alternate({name: found[name]() for name in group}, batch, rounds, min_time)
        gc.collect()  # the group's models, gradients and optimizer states go before the next
    rates["vitkit default"] = rates[f"vitkit {default}"]
    return {"rates": rates, "default": default}


# --- the silicon's peak ------------------------------------------------------------------------

Shape = tuple[int, int, int]  # (M, K, N): an (M, K) x (K, N) product


@dataclass(frozen=True)
class Peak:
    """The fastest GEMM this machine ran at one precision: GFLOP/s (int8: GOP/s), where."""

    gflops: float
    shape: Shape
    path: str


def gemm_shapes(subjects: Sequence[Any], batches: dict[str, int]) -> list[Shape]:
    """4096³, and each model's qkv, fc1 and fc2 products over a batch of its tokens."""
    shapes: list[Shape] = [(4096, 4096, 4096)]
    for subject in subjects:
        cfg = subject.cfg
        m = batches[subject.name] * (cfg.grid[0] * cfg.grid[1] + cfg.num_prefix_tokens)
        d, h = cfg.hidden_size, cfg.mlp_dim
        shapes += [s for s in ((m, d, 3 * d), (m, d, h), (m, h, d)) if s not in shapes]
    return shapes


def _products(precision: str, shape: Shape) -> dict[str, Callable[[], Any]]:
    m, k, n = shape
    if precision == "int8":  # int8 x int8 -> int32, oneDNN's VNNI / AMX-INT8 kernels
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8)
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8)
        return {"torch._int_mm": lambda: torch._int_mm(a, b)}
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    made = {path: make(a, b) for path, make in MATMUL_PATHS.items()}
    return {path: call for path, call in made.items() if call is not None}


def gemm_peak(precision: str, shapes: Sequence[Shape], repeats: int = 5) -> Peak:
    """The best median of ``repeats`` timings over ``shapes`` and the paths of ``precision``."""
    best = Peak(0.0, (0, 0, 0), "")
    for shape in shapes:
        for path, call in _products(precision, shape).items():
            call()  # warm-up: oneDNN's kernel choice, the first touch of the output
            iters = max(1, round(0.2 / timed(call, 1, CPU)))
            seconds = statistics.median(timed(call, iters, CPU) / iters for _ in range(repeats))
            gflops = 2 * shape[0] * shape[1] * shape[2] / seconds / 1e9
            if gflops > best.gflops:
                best = Peak(gflops, shape, path)
    return best


# The datasheet's peak per core and cycle by kind of unit (Intel's AMX tiles: 1,024 bf16 FLOP and
# 2,048 int8 OP; AVX-512 with two FMA units: 64 fp32 FLOP), and the largest turbo clock in GHz,
# by a substring of /proc/cpuinfo's model name. A VM that reports a generic name ("Intel(R)
# Xeon(R) Processor", "AMD EPYC") matches none.
AMX_CORE = {"bf16": 1024, "int8": 2048, "fp32": 64}
DATASHEET: dict[str, tuple[dict[str, int], float]] = {
    "Xeon(R) Platinum 8480": (AMX_CORE, 3.8),  # Sapphire Rapids
    "Xeon(R) Platinum 8592": (AMX_CORE, 3.9),  # Emerald Rapids
}


def datasheet_peaks(model_name: str, cores: int) -> tuple[dict[str, float] | None, str]:
    """GFLOP/s by precision from ``DATASHEET`` for ``cores`` cores of ``model_name``, and a line
    saying which entry, or why there is none."""
    for key, (per_cycle, ghz) in DATASHEET.items():
        if key in model_name:
            peaks = {p: flop * ghz * cores for p, flop in per_cycle.items()}
            return peaks, f"datasheet: {key} at {ghz} GHz x {cores} cores"
    if not re.search(r"\d{4}", model_name):
        return None, (
            f"datasheet: none, this machine reports its CPU as {model_name!r}, without a model "
            "number, so neither its units nor its clock are known; MFU is against the measured "
            "peak only"
        )
    return None, f"datasheet: {model_name!r} is not in cpu_table.DATASHEET; measured peak only"


def _siblings(cpu: int) -> str:
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    return path.read_text().strip() if path.exists() else str(cpu)


def physical_cores(threads: int, siblings: Callable[[int], str] = _siblings) -> int:
    """The cores ``threads`` threads can occupy on the CPUs this process may use: the datasheet's
    peak is per core, and two hyperthreads of one core share its matrix units. ``siblings``: a
    CPU's group of hyperthreads as Linux lists it ("0-1", "0,64")."""
    cores = {siblings(cpu) for cpu in os.sched_getaffinity(0)}
    return max(1, min(threads, len(cores)))


def cpu_model_name() -> str:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    found = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    return found.group(1).strip() if found else "unknown"


# --- the table ----------------------------------------------------------------------------------


def three_digits(value: float) -> str:
    """``value`` to three significant digits or more, with thousands separated (4,290; 416; 6.12):
    a tiny product's peak of a few GFLOP/s keeps its precision in print."""
    return f"{value:,.{max(0, 2 - math.floor(math.log10(value)))}f}" if value > 0 else "0"


def parse_shape(text: str) -> Shape:
    m, k, n = (int(v) for v in text.split("x"))
    return m, k, n


def row_batch(name: str, batch_text: str) -> int:
    return 256 if name == FMNIST and batch_text == "32" else int(batch_text)


def rows(
    args: argparse.Namespace,
    subjects: Sequence[Any],
    peaks: dict[str, Peak],
    datasheet: dict[str, float] | None,
) -> Iterator[str]:
    """The table, a line at a time as each row is measured."""
    extra = " datasheet MFU % |" if datasheet else ""
    yield (
        "| model | task | batch | default | contender | img/s | min-max | ratio | of | MFU % |"
        + extra
    )
    yield "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if datasheet else "")
    for subject in subjects:
        for row in args.rows:
            task, batch_text = row.split(":")
            batch = row_batch(subject.name, batch_text)
            print(f"{subject.name} {task} batch {batch}", file=sys.stderr, flush=True)
            measured = measure(subject, task, batch, args.rounds, args.min_time)
            rates, default = measured["rates"], measured["default"]
            # FLOPs of one image: the forward pass, three times it for a training step
            flops = count_flops(subject.cfg) * (3 if task == "train" else 1)
            for contender, samples in rates.items():
                ratios = [
                    (statistics.median(a / b for a, b in zip(samples, rates[of], strict=True)), of)
                    for top, of in RATIOS
                    if top == contender and of in rates
                ]
                rate = statistics.median(samples)
                precision = precision_of(contender, default)
                mfu = f"{100 * rate * flops / 1e9 / peaks[precision].gflops:.1f}"
                if datasheet:
                    mfu += f" | {100 * rate * flops / 1e9 / datasheet[precision]:.1f}"
                for ratio, of in ratios or [(None, "")]:
                    shown = "" if ratio is None else f"{ratio:.2f}"
                    yield (
                        f"| {subject.name} | {task} | {batch} | {default} | {contender} "
                        f"| {rate:.2f} | {min(samples):.2f}-{max(samples):.2f} | {shown} | {of} "
                        f"| {mfu} |"
                    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--rows", nargs="+", default=list(ROWS), help="TASK:BATCH")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds per timing")
    parser.add_argument(
        "--peak-shapes",
        nargs="*",
        default=None,
        metavar="MxKxN",
        help="the products the peak is measured over (default: 4096³ and the models')",
    )
    args = parser.parse_args(argv)
    env = environment(CPU)
    native = cpu_features().native_bf16 or "no native bf16"
    print(f"Command: `{env['command']}`  ")
    print(f"Date: {env['date']}  ")
    print(f"Machine: {env['machine']} ({native}), {env['threads']} threads  ")
    print(f"Versions: {', '.join(f'{k} {v}' for k, v in env['versions'].items())}  ")
    subjects = [make_subject(name) for name in args.models]
    batches = {s.name: row_batch(s.name, "32") for s in subjects}
    shapes = gemm_shapes(subjects, batches)
    if args.peak_shapes is not None:
        shapes = [parse_shape(text) for text in args.peak_shapes]
    peaks = {p: gemm_peak(p, shapes) for p in ("fp32", "bf16", "int8")}
    for precision, peak in peaks.items():
        unit = "GOP/s" if precision == "int8" else "GFLOP/s"
        print(
            f"GEMM peak {precision}: {three_digits(peak.gflops)} {unit} "
            f"({peak.path}, {'x'.join(map(str, peak.shape))}; best median of {len(shapes)} products)  "
        )
    datasheet, why = datasheet_peaks(cpu_model_name(), physical_cores(torch.get_num_threads()))
    print(why + "\n")
    for line in rows(args, subjects, peaks, datasheet):
        print(line, flush=True)


if __name__ == "__main__":
    main()
