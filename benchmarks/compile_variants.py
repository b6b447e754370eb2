"""Ways to compile vitkit's training step, each timed against timm compiled in the same run.

    .venv/bin/python benchmarks/compile_variants.py --device cuda --model ViT-B/16 --batch 256
    .venv/bin/python benchmarks/compile_variants.py --model fmnist --batch 4 --rounds 1 --iters 1

The step is the harness's (benchmarks/throughput.py): bf16 autocast, cross-entropy, backward,
AdamW, ``zero_grad``, on one batch held on the device. Variants (:data:`VARIANTS`):

* ``timm-compiled``, ``vitkit-compiled``: ``torch.compile(model)``, default settings (the
  reference, and vitkit as ``train.compile`` runs it);
* ``max-autotune``: Inductor tries several kernels per matrix product and wraps the compiled
  forward and backward in CUDA graphs; ``max-autotune-no-cudagraphs``: the kernel search alone;
* ``whole-step-graph``: the default-compiled model, and the whole step (forward, backward and a
  fused AdamW made ``capturable``, whose step count lives on the device) captured as one CUDA
  graph and replayed: one launch a step, the host out of the loop;
* ``patch-product``: the default-compiled step with the patch embedding computed as what it is,
  a product of each flattened patch with the projection (a reshape, then one GEMM), instead of
  cuDNN's strided convolution and its input's layout change (3.25 ms of the H200's 72.9-ms
  step, for 0.12% of its FLOPs: RESULTS.md); the same weights and function;
  ``patch-product-graph``: that, and the whole step as one CUDA graph;
* ``bf16-weights``: the default-compiled step of the model cast to bf16, no autocast: every
  activation in bf16, the residual stream and the layer norms' inputs too (autocast keeps them in
  fp32), and AdamW on bf16 weights. Not a recipe (no fp32 master weights): the ceiling of what a
  bf16 residual stream could gain, to say whether building one (fp32 master weights, checked for
  accuracy) is worth it;
* ``sdpa-*``: the default-compiled step with attention pinned to one SDPA backend
  (``torch.nn.attention.sdpa_kernel``): FlashAttention-2, cuDNN's (Hopper's fastest in some
  PyTorch releases), memory-efficient; on a CPU, flash and math.

Before the variants, attention alone (``--attention-iters``; 0 skips it): the model's
``scaled_dot_product_attention`` at its shape (batch, heads, tokens, head dim), forward and
backward in bf16, PyTorch's choice and each backend of the device pinned, timed the same way:
which backend to pin is measured in seconds, without compiling the model once per backend. Also
PyTorch's choice on q, k and v as the model passes them, strided views of one qkv product (the
H200's compiled ViT-B/16 step spent 0.80 ms a layer in attention).

Each variant is built, then warmed up under a compile-time cap (``--compile-cap`` seconds, an
alarm: a variant over it is reported and left out), then timed in ``--rounds`` rounds of
``--iters`` steps, the order rotated each round as the harness does (the warm-up's seconds
leave out what an earlier variant compiled the same way: ``whole-step-graph`` reuses
``vitkit-compiled``'s graphs); img/s is the median, "vs
timm" the median of per-round ratios to ``timm-compiled``. CUDA graphs run only on CUDA: on a
CPU, ``whole-step-graph`` is timed as the same step uncaptured (AdamW fused, not capturable), and
``max-autotune`` as Inductor runs it there (no graphs), with a line saying so.
"""

from __future__ import annotations

import contextlib
import json
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from throughput import (
    Subject,
    autocast,
    build_timm,
    build_vitkit,
    make_subject,
    step_device,
    step_parser,
    synchronize,
    timed,
)
from vitkit.config import ModelConfig

Step = Callable[[], Tensor]


@dataclass(frozen=True)
class Variant:
    """One way to compile the step: the model's builder, ``torch.compile``'s mode, whether the
    whole step is one CUDA graph, and the SDPA backend attention is pinned to (None: PyTorch's
    choice)."""

    build: Callable[[Subject, str], nn.Module | None] = build_vitkit
    mode: str | None = None
    whole_step_graph: bool = False
    sdpa: SDPBackend | None = None
    patch_product: bool = False
    bf16_weights: bool = False


REFERENCE = "timm-compiled"
VARIANTS: dict[str, Variant] = {
    REFERENCE: Variant(build_timm),
    "vitkit-compiled": Variant(),
    "max-autotune": Variant(mode="max-autotune"),
    "max-autotune-no-cudagraphs": Variant(mode="max-autotune-no-cudagraphs"),
    "whole-step-graph": Variant(whole_step_graph=True),
    "patch-product": Variant(patch_product=True),
    "patch-product-graph": Variant(patch_product=True, whole_step_graph=True),
    "bf16-weights": Variant(bf16_weights=True),
    "sdpa-flash": Variant(sdpa=SDPBackend.FLASH_ATTENTION),
    "sdpa-cudnn": Variant(sdpa=SDPBackend.CUDNN_ATTENTION),
    "sdpa-efficient": Variant(sdpa=SDPBackend.EFFICIENT_ATTENTION),
    "sdpa-math": Variant(sdpa=SDPBackend.MATH),
}
# The SDPA backends each device type has (cuDNN's and the memory-efficient one are CUDA's alone;
# math is the reference path, slow on CUDA and not worth the lease's time there).
SDPA_ON = {
    "cuda": ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient"),
    "cpu": ("sdpa-flash", "sdpa-math"),
}


class Pinned(nn.Module):
    """``inner`` with attention pinned to one SDPA backend inside the compiled graph (Dynamo
    traces ``sdpa_kernel``; a graph compiled outside it would keep PyTorch's choice)."""

    def __init__(self, inner: nn.Module, backend: SDPBackend) -> None:
        super().__init__()
        self.inner = inner
        self.backend = backend

    def forward(self, images: Tensor) -> Tensor:
        with sdpa_kernel(self.backend):
            return self.inner(images)


class CompileCapError(Exception):
    pass


@contextlib.contextmanager
def cap(seconds: int) -> Iterator[None]:
    """Raise :class:`CompileCapError` in the block once it has run ``seconds`` (SIGALRM: the
    main thread only)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise CompileCapError(f"over the {seconds} s cap")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def as_product(embed: nn.Module) -> None:
    """Make vitkit's patch embedding ``embed`` (model/embed.py) compute its convolution, kernel =
    stride = P, as a product: each P x P patch flattened (C, P, P) and projected to D."""
    conv = embed.proj

    def forward(x: Tensor) -> Tensor:  # (B, C, H, W)
        if embed.backbone is not None:
            x = embed.backbone(x)
        B, C, H, W = x.shape
        P = embed.patch_size
        patches = x.reshape(B, C, H // P, P, W // P, P).permute(
            0, 2, 4, 1, 3, 5
        )  # (B, gh, gw, C, P, P)
        patches = patches.reshape(B, (H // P) * (W // P), C * P * P)  # (B, N, C P P)
        return F.linear(patches, conv.weight.flatten(1), conv.bias)  # (B, N, D)

    embed.forward = forward


def build_step(
    variant: Variant, subject: Subject, precision: str, x: Tensor, y: Tensor, warmup: int
) -> Step:
    """The variant's training step on ``x, y``, warmed up ``warmup`` times (the compilation)."""
    model = variant.build(subject, precision)
    assert model is not None  # vitkit and timm have every ViT
    model = model.to(x.device).train()
    if variant.patch_product:
        as_product(model.patch_embed)
    if variant.bf16_weights:
        model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
    graph = variant.whole_step_graph and x.device.type == "cuda"
    # capturable: the step count and bias corrections stay on the device, as a graph needs
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True, capturable=graph)
    compiled = torch.compile(
        Pinned(model, variant.sdpa) if variant.sdpa else model, mode=variant.mode
    )
    # autocast's cache of bf16 weights would hold tensors made outside the graph: off when captured
    cast = autocast(precision, x.device)
    if variant.bf16_weights:
        cast = contextlib.nullcontext()  # the model computes in bf16 itself
    if graph:
        cast = torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)

    def step() -> Tensor:
        with cast:
            loss = F.cross_entropy(compiled(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=not graph)  # a captured step keeps its gradients' memory
        return loss.detach()

    if not graph:
        for _ in range(warmup):
            step()
        return step
    side = torch.cuda.Stream()  # warm-up off the default stream, as capture requires
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    whole = torch.cuda.CUDAGraph()
    with torch.cuda.graph(whole):
        loss = step()

    def replay() -> Tensor:
        whole.replay()
        return loss

    return replay


def attention_alone(
    cfg: ModelConfig,
    batch: int,
    device: torch.device,
    names: Sequence[str],
    rounds: int,
    iters: int,
) -> dict[str, float | str]:
    """Milliseconds of one forward and backward of the model's attention (one layer's, bf16) with
    PyTorch's choice (``default``) and with each backend of ``names`` pinned; a backend that has
    no kernel for the shape gets its error's first line instead."""
    gen = torch.Generator().manual_seed(2)
    gh, gw = cfg.grid  # patches per column and per row
    shape = (batch, cfg.num_heads, gh * gw + cfg.num_prefix_tokens, cfg.head_dim)
    # (B, heads, N, head_dim) each; random, not zeros: a kernel can run faster on zeros
    q, k, v = (
        torch.randn(shape, generator=gen).to(device, torch.bfloat16).requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(shape, generator=gen).to(device, torch.bfloat16)
    # as the model has them (model/layers.py): views of one qkv product (B, N, 3, heads, head_dim)
    B, H, N, Dh = shape
    qkv = torch.randn(B, N, 3, H, Dh, generator=gen).to(device, torch.bfloat16).requires_grad_()
    pins: dict[str, SDPBackend | None] = {"default": None, "default, q/k/v views": None}
    pins |= {n: VARIANTS[n].sdpa for n in names}

    def step(backend: SDPBackend | None, views: bool) -> Step:
        def run() -> Tensor:
            q_, k_, v_ = qkv.permute(2, 0, 3, 1, 4).unbind(0) if views else (q, k, v)
            # a fresh context each call: one made by @contextmanager runs once
            with sdpa_kernel(backend) if backend else contextlib.nullcontext():
                out = F.scaled_dot_product_attention(q_, k_, v_)
            out.backward(grad)
            return out

        return run

    out: dict[str, float | str] = {}
    for name, backend in pins.items():
        try:
            run = step(backend, views=name.endswith("views"))
            run()  # the kernel's first launch (and any autotuning) out of the timing
            out[name] = statistics.median(
                timed(run, iters, device) / iters * 1e3 for _ in range(rounds)
            )
        except RuntimeError as e:  # no kernel of that backend for this shape or device
            out[name] = str(e).splitlines()[0][:120]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = step_parser(__doc__)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="default: all")
    parser.add_argument("--compile-cap", type=int, default=120, help="seconds for the warm-up")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10, help="steps per timing")
    parser.add_argument(
        "--attention-iters", type=int, default=20, help="attention alone: calls per timing"
    )
    args = parser.parse_args(argv)
    device = step_device(args, "compile_variants")

    names = args.variants or list(VARIANTS)
    for name in [n for n in names if n.startswith("sdpa-") and n not in SDPA_ON[device.type]]:
        print(f"{name}: skipped, not a backend of {device.type}")
        names.remove(name)
    if device.type != "cuda":
        print("whole-step-graph, max-autotune: CUDA graphs run on CUDA only; timed here uncaptured")
    names = [REFERENCE, *(n for n in names if n != REFERENCE)]

    subject = make_subject(args.model)
    cfg = subject.cfg
    attention: dict[str, float | str] = {}
    if args.attention_iters:
        attention = attention_alone(
            cfg, args.batch, device, SDPA_ON[device.type], args.rounds, args.attention_iters
        )
        print(f"attention alone, one layer forward + backward, bf16, batch {args.batch}:")
        for name, ms in attention.items():
            print(f"  {name}: " + (f"{ms:.3f} ms" if isinstance(ms, float) else f"failed: {ms}"))
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, cfg.in_chans, *cfg.image_hw, generator=gen).to(device)
    y = torch.randint(0, cfg.num_classes, (args.batch,), generator=gen).to(device)
    steps: dict[str, Step] = {}
    compile_s: dict[str, float] = {}
    failed: dict[str, str] = {}
    for name in names:
        start = time.perf_counter()
        try:
            with cap(args.compile_cap):
                steps[name] = build_step(VARIANTS[name], subject, args.precision, x, y, args.warmup)
                synchronize(device)
        except (CompileCapError, RuntimeError) as e:  # RuntimeError: no kernel for a backend
            failed[name] = str(e).splitlines()[0][:120]
        compile_s[name] = time.perf_counter() - start
        print(f"{name}: warm-up {compile_s[name]:.1f} s", file=sys.stderr, flush=True)
    if REFERENCE not in steps:
        sys.exit(f"compile_variants: the reference {REFERENCE} failed: {failed[REFERENCE]}")

    seconds: dict[str, list[float]] = {n: [] for n in steps}
    order = list(steps)
    for r in range(args.rounds):
        k = r % len(order)
        for name in order[k:] + order[:k]:
            seconds[name].append(timed(steps[name], args.iters, device))
    rows = []
    for name in names:
        row: dict[str, object] = {"variant": name, "compile_s": compile_s[name]}
        if name in steps:
            rates = [args.batch * args.iters / s for s in seconds[name]]
            ref = [args.batch * args.iters / s for s in seconds[REFERENCE]]
            row["images_per_s"] = statistics.median(rates)
            row["ratio_to_timm"] = statistics.median(a / b for a, b in zip(rates, ref, strict=True))
        else:
            row["failed"] = failed[name]
        rows.append(row)

    what = f"{subject.name} train {args.precision} batch {args.batch}, {device.type}"
    print(f"{what}; warm-up capped at {args.compile_cap} s")
    print("| variant | img/s | vs timm-compiled | warm-up s |\n|---|---|---|---|")
    for row in rows:
        if "failed" in row:
            print(f"| {row['variant']} | failed: {row['failed']} | | {row['compile_s']:.1f} |")
        else:
            print(
                f"| {row['variant']} | {row['images_per_s']:.1f} | {row['ratio_to_timm']:.3f} "
                f"| {row['compile_s']:.1f} |"
            )
    if args.json:
        raw = {
            "what": what,
            "compile_cap_s": args.compile_cap,
            "rows": rows,
            "attention_ms": attention,
        }
        args.json.write_text(json.dumps(raw, indent=1) + "\n")


if __name__ == "__main__":
    main()
