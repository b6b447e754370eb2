"""Where vitkit's compiled training step spends its time: a ``torch.profiler`` trace of a few
steps, the device's time grouped by kind of work and printed as a table.

    .venv/bin/python benchmarks/step_profile.py --device cuda --model ViT-B/16 --batch 256
    .venv/bin/python benchmarks/step_profile.py --model fmnist --batch 4 --steps 2   # CPU, seconds

The step is the harness's ``vitkit-fast`` training step (benchmarks/throughput.py): the model
through ``torch.compile`` as ``train.compile`` runs it, bf16 autocast, cross-entropy, backward,
fused AdamW, ``zero_grad``. After ``--warmup`` steps (the compilation), ``--steps`` steps are
profiled. On CUDA every kernel, copy and memset of the trace is put in one kind by its name; on
a CPU every ``aten::`` operator's self time and every Inductor C++ kernel's is (the CPU then
stands for the device). ``idle`` is the profiled steps' wall time less the time of all kinds:
the device waiting for the host (launches, Python, the optimizer's bookkeeping). ``--eager``
profiles the step without ``torch.compile`` (``vitkit train`` without ``train.compile``). Kinds,
first match of the lower-cased name:

* attention: ``flash``, ``fmha``, ``attention``, ``sdpa`` (cuDNN's and PyTorch's SDPA kernels),
  ``bmm`` and ``softmax`` (a ViT's batched products and softmax are its attention's: the
  explicit path a CPU takes in bf16), but not ``log_softmax`` (the loss's);
* GEMM: ``gemm``, ``cutlass``, ``nvjet``, ``xmma``, ``cublas``, ``aten::mm``, ``addmm``, ``conv``
  (the patch embedding is a matrix product too);
* optimizer: ``adam``, ``multi_tensor``, ``foreach``;
* copies: ``memcpy``, ``memset``, ``copy``, ``aten::to``, ``contiguous``, ``clone``, ``cat``;
* normalisation + elementwise: everything else (Triton's fused kernels, layer norms, GELU, the
  loss).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence

import torch
import torch._inductor.config
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from throughput import (
    CONTENDERS,
    build_vitkit,
    make_step,
    make_subject,
    step_device,
    step_parser,
    synchronize,
)

KINDS: dict[str, tuple[str, ...]] = {
    # bmm and softmax: a ViT's batched products and softmax are its attention's (the explicit
    # path a CPU takes in bf16); its linear layers are mm and addmm
    # and cuDNN's attention backward has two helper kernels of its own (dot_do_o, convert_dq)
    "attention": ("flash", "fmha", "attention", "sdpa", "bmm", "softmax", "dot_do_o", "convert_dq"),
    "GEMM": ("gemm", "cutlass", "nvjet", "xmma", "cublas", "aten::mm", "addmm", "convolution"),
    "optimizer": ("adam", "multi_tensor", "foreach"),
    # nchwToNhwc: cuDNN's layout change of the patch embedding's input
    "copies": ("memcpy", "memset", "copy", "aten::to", "contiguous", "clone", "cat", "nchwtonhwc"),
}
ELEMENTWISE = "norm + elementwise"
IDLE = "idle"


def kind_of(name: str) -> str:
    """The kind of work a kernel or operator named ``name`` does (see the module docstring)."""
    lower = name.lower()
    # the loss's log-softmax (cross-entropy) is not attention's; a layer norm's kernel into which
    # Inductor fused a cast (``_to_copy``) is normalisation, not a copy
    if "log_softmax" in lower or "layer_norm" in lower:
        return ELEMENTWISE
    return next((k for k, keys in KINDS.items() if any(s in lower for s in keys)), ELEMENTWISE)


def _device_us(e: object, device: torch.device) -> float | None:
    """The device time of profiler event ``e`` in microseconds, None where it is not the device's
    work (CUDA: the kernels; CPU: the ATen operators and Inductor's C++ kernels)."""
    if getattr(e, "is_user_annotation", False):  # a span such as Optimizer.step on the device's
        return None  # timeline, around kernels that count on their own
    if device.type == "cuda" and e.device_type == DeviceType.CUDA:  # type: ignore[attr-defined]
        return float(e.time_range.elapsed_us())  # type: ignore[attr-defined]
    name: str = e.name  # type: ignore[attr-defined]
    if device.type == "cpu" and name.startswith(("aten::", "cpp_fused")):
        return float(e.self_cpu_time_total)  # type: ignore[attr-defined]
    return None


def top_kernels(events: Sequence[object], device: torch.device, n: int) -> list[tuple[str, float]]:
    """The ``n`` kernels (or operators) that took the most device time, with their microseconds,
    most first: which GEMM, which fused kernel, which attention kernel the step's time goes to."""
    totals: dict[str, float] = {}
    for e in events:
        if (us := _device_us(e, device)) is not None:
            totals[e.name] = totals.get(e.name, 0.0) + us  # type: ignore[attr-defined]
    return sorted(totals.items(), key=lambda item: -item[1])[:n]


def grouped(events: Sequence[object], device: torch.device, wall_us: float) -> dict[str, float]:
    """Microseconds of each kind over the profiled steps, ``idle`` the rest of ``wall_us``."""
    out = dict.fromkeys([*KINDS, ELEMENTWISE], 0.0)
    for e in events:
        if (us := _device_us(e, device)) is not None:
            out[kind_of(e.name)] += us  # type: ignore[attr-defined]
    out[IDLE] = max(0.0, wall_us - sum(out.values()))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = step_parser(__doc__)
    parser.add_argument("--steps", type=int, default=5, help="profiled steps")
    parser.add_argument(
        "--eager", action="store_true", help="the eager step (vitkit train without train.compile)"
    )
    parser.add_argument("--top", type=int, default=25, help="list the kernels that take longest")
    args = parser.parse_args(argv)
    device = step_device(args, "step_profile")

    subject = make_subject(args.model)
    cfg = subject.cfg
    x = torch.randn(args.batch, cfg.in_chans, *cfg.image_hw, device=device)  # (B, C, H, W)
    y = torch.randint(0, cfg.num_classes, (args.batch,), device=device)
    model = build_vitkit(subject, args.precision).to(device)
    # Inductor's C++ kernels (cpp_fused_*) in the CPU's trace, each under its own name
    torch._inductor.config.cpp.enable_kernel_profile = True
    fast = CONTENDERS["vitkit-fast"]  # the fused AdamW vitkit's loop uses, either way
    contender = dataclasses.replace(fast, fast=False) if args.eager else fast
    step = make_step(contender, model, "train", args.precision, x, y)
    for _ in range(args.warmup):
        step()
    synchronize(device)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        synchronize(device)  # the last kernels inside the window
        wall_us = (time.perf_counter() - start) * 1e6
    events = prof.events()
    per_step = {k: us / args.steps / 1e3 for k, us in grouped(events, device, wall_us).items()}
    top = [(name, us / args.steps / 1e3) for name, us in top_kernels(events, device, args.top)]
    step_ms = wall_us / args.steps / 1e3

    how = "eager" if args.eager else "compiled"
    what = f"{subject.name} train {args.precision} batch {args.batch}, {how}, {device.type}"
    print(f"{what}: {step_ms:.2f} ms/step over {args.steps} profiled steps")
    print("| kind | ms/step | % of step |\n|---|---|---|")
    for kind, ms in per_step.items():
        print(f"| {kind} | {ms:.2f} | {100 * ms / step_ms:.1f} |")
    print(f"the {len(top)} longest kernels:")
    print("| kernel | kind | ms/step | % of step |\n|---|---|---|---|")
    for name, ms in top:
        print(f"| {name[:100]} | {kind_of(name)} | {ms:.3f} | {100 * ms / step_ms:.1f} |")
    if args.json:
        top_rows = [{"kernel": name, "kind": kind_of(name), "ms_per_step": ms} for name, ms in top]
        raw = {"what": what, "step_ms": step_ms, "ms_per_step": per_step, "top": top_rows}
        args.json.write_text(json.dumps(raw, indent=1) + "\n")


if __name__ == "__main__":
    main()
