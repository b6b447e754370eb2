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
a ratio is the median over rounds of the per-round ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from throughput import FMNIST, build_timm, build_vitkit, environment, make_subject, timed
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


def contenders(subject: Any, task: str, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """Each contender's iteration, and what ``auto`` chose (the default's precision)."""
    gflop = count_flops(subject.cfg) * len(x) / 1e9
    default, _ = decide_auto(CPU, task="train" if task == "train" else "infer", gflop=gflop)
    steps: dict[str, Callable[[], Any]] = {}
    for library, build in (("vitkit", build_vitkit), ("timm", build_timm)):
        for precision in ("fp32", "bf16"):
            model = build(subject, precision)
            bf16 = precision == "bf16"
            steps[f"{library} {precision}"] = (
                infer_step(model, x, bf16) if task == "infer" else train_step(model, x, y, bf16)
            )
    if task == "infer":
        fast = optimize_for_inference(build_vitkit(subject, "bf16"), bf16=True)
        steps["vitkit bf16 fast"] = lambda: fast(x)
        from vitkit.inference.int8 import quantize_int8

        calibration = [torch.rand_like(x) * 2 - 1 for _ in range(4)]
        int8 = quantize_int8(build_vitkit(subject, "fp32"), calibration)
        steps["vitkit int8"] = lambda: int8(x)
        if openvino_version() is not None:
            steps |= _openvino(build_vitkit(subject, "fp32"), x)
    return {"steps": steps, "default": default}


def _openvino(model: Any, x: torch.Tensor) -> dict[str, Callable[[], Any]]:
    """vitkit's OpenVINO engine and OpenVINO at its own defaults, on the same weights."""
    from vitkit.inference.openvino import OpenVINOInference
    from vitkit.runtime.openvino import require_openvino

    ov = require_openvino()  # under this process's jemalloc: see require_openvino
    engine = OpenVINOInference(model, precision="auto")
    with torch.no_grad():
        converted = ov.convert_model(model.eval(), example_input=x, input=[tuple(x.shape)])
    request = ov.Core().compile_model(converted, "CPU").create_infer_request()
    array = x.numpy()
    return {
        "vitkit openvino": lambda: engine(x),
        "openvino": lambda: request.infer([array])[0],
    }


def measure(subject: Any, task: str, batch: int, rounds: int, min_time: float) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(1)
    cfg = subject.cfg
    x = torch.randn(batch, cfg.in_chans, *cfg.image_hw, generator=gen)  # (B, C, H, W)
    y = torch.randint(0, cfg.num_classes, (batch,), generator=gen)
    built = contenders(subject, task, x, y)
    steps = built["steps"]
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
    rates["vitkit default"] = rates[f"vitkit {built['default']}"]
    return {"rates": rates, "default": built["default"]}


def rows(args: argparse.Namespace) -> Iterator[str]:
    """The table, a line at a time as each row is measured."""
    yield "| model | task | batch | default | contender | img/s | min-max | ratio | of |"
    yield "|---|---|---|---|---|---|---|---|---|"
    for name in args.models:
        subject = make_subject(name)
        for row in args.rows:
            task, batch_text = row.split(":")
            batch = 256 if name == FMNIST and batch_text == "32" else int(batch_text)
            print(f"{subject.name} {task} batch {batch}", file=sys.stderr, flush=True)
            measured = measure(subject, task, batch, args.rounds, args.min_time)
            rates, default = measured["rates"], measured["default"]
            for contender, samples in rates.items():
                ratios = [
                    (statistics.median(a / b for a, b in zip(samples, rates[of], strict=True)), of)
                    for top, of in RATIOS
                    if top == contender and of in rates
                ]
                cells = ratios or [(None, "")]
                for ratio, of in cells:
                    shown = "" if ratio is None else f"{ratio:.2f}"
                    yield (
                        f"| {subject.name} | {task} | {batch} | {default} | {contender} "
                        f"| {statistics.median(samples):.2f} | {min(samples):.2f}-"
                        f"{max(samples):.2f} | {shown} | {of} |"
                    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--rows", nargs="+", default=list(ROWS), help="TASK:BATCH")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds per timing")
    args = parser.parse_args(argv)
    env = environment(CPU)
    native = cpu_features().native_bf16 or "no native bf16"
    print(f"Command: `{env['command']}`  ")
    print(f"Date: {env['date']}  ")
    print(f"Machine: {env['machine']} ({native}), {env['threads']} threads  ")
    print(f"Versions: {', '.join(f'{k} {v}' for k, v in env['versions'].items())}\n")
    for line in rows(args):
        print(line, flush=True)


if __name__ == "__main__":
    main()
