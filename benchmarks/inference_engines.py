"""vitkit's CPU inference against OpenVINO at its defaults, on the same batch, in one run.

Contenders, each on the same random-initialised model and the same images:

- ``predict/eval``: the forward passes ``vitkit predict --batch-size B`` and ``vitkit eval
  --batch-size B`` run without a precision or engine flag: ``vitkit.Inference`` opened from a
  checkpoint and prepared for a run of ``--run-images`` images (default 10,000, a test set's:
  it says what it decided; a short run stays on torch, whose first call is cheaper);
- ``optimize_for_inference``: ``vitkit.optimize_for_inference(model)``, as a Python user calls it;
- ``torch eager bf16``: the model under bf16 autocast, for reference;
- ``int8 (torchao)`` with ``--int8``: ``--precision int8``'s model, calibrated on the batch;
- ``openvino``: OpenVINO's own path as its documentation gives it, ``openvino.convert_model`` on
  the model with a static input shape, ``Core().compile_model(model, "CPU")`` with its defaults
  (bf16 on a CPU with native bf16, the LATENCY hint).

After a first call each (its cost is printed: conversion, compilation), the contenders alternate,
round after round, each timing ``ceil(images / (B * rounds))`` calls a round; the medians of the
rounds' mean call times are printed, with images/s, each one's ratio to OpenVINO and the largest
logit difference from eager fp32 on the batch.

    .venv/bin/python benchmarks/inference_engines.py --models ViT-S/16 ViT-B/16 --batches 1 32
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import vitkit
from vitkit.inference import Inference


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def contenders(
    name: str, batch: int, images: int, folder: Path, *, int8: bool
) -> dict[str, Callable]:
    """Each contender's forward pass on one batch, after its first call (timed and printed)."""
    import openvino as ov

    torch.manual_seed(0)
    model = vitkit.create_model(name, num_classes=1000).eval()
    for p in model.parameters():  # logits of a trained model's scale, not a zero head's
        torch.nn.init.normal_(p, std=0.02)
    x = torch.randn(batch, 3, *model.cfg.image_hw)
    checkpoint = vitkit.save(model, folder / name.replace("/", "_"))
    found: dict[str, Callable] = {}

    def first(label: str, build: Callable[[], Callable]) -> None:
        start = time.perf_counter()
        run = build()
        run()
        print(f"  {label}: first call {time.perf_counter() - start:.1f} s")
        found[label] = run

    def command() -> Callable:
        inference = Inference.open(str(checkpoint), device="cpu")
        inference.prepare(batch, images=images)  # says the precision and the engine
        return lambda: inference(x)

    def python_api() -> Callable:
        fast = vitkit.optimize_for_inference(model)
        return lambda: fast(x)

    def eager() -> Callable:
        def run() -> torch.Tensor:
            with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
                return model(x)

        return run

    def openvino() -> Callable:
        with torch.no_grad():
            converted = ov.convert_model(model, example_input=x, input=[tuple(x.shape)])
        request = ov.Core().compile_model(converted, "CPU").create_infer_request()
        array = x.numpy()
        return lambda: torch.from_numpy(request.infer([array])[0].copy())

    first("predict/eval", command)
    first("optimize_for_inference", python_api)
    first("torch eager bf16", eager)
    first("openvino", openvino)
    if int8:
        from vitkit.inference.int8 import quantize_int8

        def quantized() -> Callable:
            run = quantize_int8(model, [x])
            return lambda: run(x)

        first("int8 (torchao)", quantized)
    with torch.inference_mode():
        want = model(x).float()  # (B, 1000): eager fp32
    for label, run in found.items():
        gap = float((run().float() - want).abs().max())
        print(f"  {label}: largest |logit - fp32| {gap:.3g} (logits up to {want.abs().max():.3g})")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["ViT-S/16", "ViT-B/16"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--images", type=int, default=256, help="images timed per contender")
    parser.add_argument(
        "--run-images", type=int, default=10_000, help="the run predict/eval is prepared for"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--int8", action="store_true", help="int8 (torchao) as a contender too")
    args = parser.parse_args()
    import openvino

    print(
        f"torch {torch.__version__}, openvino {openvino.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            for batch in args.batches:
                print(f"{name}, batch {batch}:")
                found = contenders(name, batch, args.run_images, Path(folder), int8=args.int8)
                calls = math.ceil(args.images / (batch * args.rounds))
                seconds: dict[str, list[float]] = {label: [] for label in found}
                for _ in range(args.rounds):
                    for label, run in found.items():
                        total = sum(_timed(run) for _ in range(calls))
                        seconds[label].append(total / calls)
                reference = statistics.median(seconds["openvino"])
                for label, values in seconds.items():
                    median = statistics.median(values)
                    rows.append(
                        f"{name:9} {batch:5} {label:24} {1000 * median:9.1f} ms "
                        f"({1000 * min(values):.1f}-{1000 * max(values):.1f}) "
                        f"{batch / median:8.1f} img/s  {reference / median:5.2f}x openvino"
                    )
    print("model     batch contender                call, median (min-max)  images/s  ratio")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
