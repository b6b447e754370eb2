"""Where bf16 pays on this CPU: vitkit's training step and forward pass in bf16 autocast against
fp32, over models and batches whose forward pass spans 0.02 to 300 GFLOP, alternating, medians;
and attention, PyTorch's fused kernel against the explicit products: alone, in both precisions,
and inside bf16 steps of the models. The measurements behind a CPU kind's
``runtime.arithmetic.Bf16Rule`` (its least work and its explicit-attention lengths).

    .venv/bin/python benchmarks/bf16_gain.py                  # the grid (about 10 minutes)
    .venv/bin/python benchmarks/bf16_gain.py --rows fmnist:train:256 ViT-S/16:infer:1
    .venv/bin/python benchmarks/bf16_gain.py --attention      # the attention tables only

A row is ``MODEL:TASK:BATCH[:compiled]``: a preset, ``fmnist`` (the main job's model) or
``wD-S-P`` (6 layers of width D on S px images in patches of P, 3 channels, 10 classes); ``train``
is forward, cross-entropy, backward and fused AdamW; ``infer`` a forward pass under
``inference_mode``. Each timing is the median of ``--rounds``, fp32 and bf16 alternating (the
order swapped every round); the ratio is the median of the per-round ratios, > 1: bf16 faster.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

import vitkit
from cpu_table import infer_step, train_step
from vitkit.config import ModelConfig
from vitkit.model.flops import count_flops
from vitkit.presets import get_config
from vitkit.recipes import fmnist_vit
from vitkit.runtime.arithmetic import cpu_features

GRID = (
    *("fmnist:train:4", "fmnist:train:8", "fmnist:train:16", "fmnist:train:20"),
    *("fmnist:train:256", "fmnist:train:256:compiled"),
    *("fmnist:infer:1", "fmnist:infer:4", "fmnist:infer:16", "fmnist:infer:24"),
    *("fmnist:infer:32", "fmnist:infer:64", "fmnist:infer:256"),
    *("w32-28-7:train:8", "w32-28-7:train:32", "w32-28-7:train:256"),
    *("w64-28-7:train:8", "w64-28-7:train:48", "w64-28-7:infer:64", "w32-28-7:infer:256"),
    *("ViT-Ti/16:train:32", "ViT-Ti/16:infer:1", "ViT-Ti/16:infer:32"),
    *("ViT-S/16:train:32", "ViT-S/16:infer:1", "ViT-S/16:infer:32"),
)
# (batch, heads, tokens, head dim): the main job's, ViT-Ti/S/B/16 at 224, B/32, and around the
# explicit path's limit of 256 tokens
ATTENTION = (
    (256, 4, 17, 32),
    (32, 3, 197, 64),
    (32, 6, 197, 64),
    (32, 12, 197, 64),
    (32, 12, 50, 64),
    (16, 12, 257, 64),
    (8, 12, 401, 64),
    (8, 12, 577, 64),
)


def model_config(name: str) -> ModelConfig:
    if name == "fmnist":
        return fmnist_vit()
    if name.startswith("w"):
        width, size, patch = map(int, name[1:].split("-"))
        return ModelConfig(
            image_size=size,
            patch_size=patch,
            hidden_size=width,
            num_layers=6,
            num_heads=max(width // 64, 2),
            mlp_dim=4 * width,
            num_classes=10,
            in_chans=3,
        )
    return get_config(name)


def model_step(
    cfg: ModelConfig, task: str, bf16: bool, batch: int, compiled: bool
) -> tuple[torch.nn.Module, Callable[[], object]]:
    """A model of ``cfg`` and one step of ``task`` on it."""
    torch.manual_seed(0)
    model = vitkit.create_model(cfg)
    run = torch.compile(model) if compiled else model
    x = torch.randn(batch, cfg.in_chans, *cfg.image_hw)  # (B, C, H, W)
    y = torch.randint(0, cfg.num_classes, (batch,))

    if task == "infer":
        return model, infer_step(run, x, bf16)
    return model, train_step(run, x, y, bf16)


def step(
    cfg: ModelConfig, task: str, bf16: bool, batch: int, compiled: bool
) -> Callable[[], object]:
    return model_step(cfg, task, bf16, batch, compiled)[1]


def alternate(
    a: Callable[[], object], b: Callable[[], object], rounds: int, min_time: float
) -> tuple[float, float, list[float]]:
    """Median seconds of ``a`` and of ``b``, and each round's ratio of a's time to b's."""
    for f in (a, b):
        f()
        f()  # warm-up (and compilation)
    start = time.perf_counter()
    a()
    iters = max(1, int(min_time / (time.perf_counter() - start)))
    times: list[list[float]] = [[], []]
    ratios = []
    for r in range(rounds):
        order = ((0, a), (1, b))
        for i, f in order if r % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            for _ in range(iters):
                f()
            times[i].append((time.perf_counter() - start) / iters)
        ratios.append(times[0][-1] / times[1][-1])
    return statistics.median(times[0]), statistics.median(times[1]), ratios


def rows_table(rows: Sequence[str], rounds: int, min_time: float) -> Iterator[str]:
    """The table of ``rows``, a line at a time as each is measured."""
    yield (
        "| model | task | batch | compiled | GFLOP a forward pass | fp32 img/s | bf16 img/s "
        "| bf16 / fp32 | range |"
    )
    yield "|---|---|---|---|---|---|---|---|---|"
    for row in rows:
        name, task, batch_text, *rest = row.split(":")
        batch, compiled = int(batch_text), rest == ["compiled"]
        cfg = model_config(name)
        fp32, bf16, ratios = alternate(
            step(cfg, task, False, batch, compiled),
            step(cfg, task, True, batch, compiled),
            rounds,
            min_time,
        )
        gflop = count_flops(cfg) * batch / 1e9
        yield (
            f"| {name} | {task} | {batch} | {'yes' if compiled else 'no'} | {gflop:.3g} "
            f"| {batch / fp32:.1f} | {batch / bf16:.1f} | {statistics.median(ratios):.2f} "
            f"| {min(ratios):.2f}-{max(ratios):.2f} |"
        )


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fused: bool) -> torch.Tensor:
    if fused:
        return F.scaled_dot_product_attention(q, k, v)
    weights = ((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)).float().softmax(-1)
    return weights.to(q.dtype) @ v


def attention_table(rounds: int) -> Iterator[str]:
    """Attention alone at ``ATTENTION``'s shapes, a line at a time."""
    yield (
        "| batch, heads, tokens, head dim | pass | fp32 fused ms | bf16 fused ms "
        "| bf16 explicit ms |"
    )
    yield "|---|---|---|---|---|"
    for shape in ATTENTION:
        for backward in (True, False):
            timings = []
            for dtype, fused in ((torch.float32, True), (torch.bfloat16, True), (torch.bfloat16, False)):  # fmt: skip
                q, k, v = (
                    torch.randn(*shape, dtype=dtype, requires_grad=backward) for _ in range(3)
                )

                def call(q=q, k=k, v=v, fused=fused, backward=backward) -> None:
                    with torch.set_grad_enabled(backward):
                        out = attention(q, k, v, fused)
                        if backward:
                            out.sum().backward()

                call()
                seconds = []
                for _ in range(rounds):
                    start = time.perf_counter()
                    call()
                    seconds.append(time.perf_counter() - start)
                timings.append(1e3 * statistics.median(seconds))
            what = "forward + backward" if backward else "forward"
            cells = " | ".join(f"{t:.1f}" for t in timings)
            yield f"| {', '.join(map(str, shape))} | {what} | {cells} |"


# bf16 steps whose attention the two paths compute, in the model (MODEL:TASK:BATCH)
PATHS = (
    "fmnist:train:256",
    "fmnist:infer:256",
    "ViT-Ti/16:train:32",
    "ViT-Ti/16:infer:32",
    "ViT-S/16:train:32",
    "ViT-S/16:infer:32",
    "ViT-B/32:infer:32",
    "ViT-B/16:infer:32",
)


def paths_table(rows: Sequence[str], rounds: int) -> Iterator[str]:
    """A bf16 step of each row with attention on the explicit path and on the fused kernel,
    alternating (each attention layer's limits set to take one or the other at every length), a
    line at a time."""
    from vitkit.model import layers

    yield "| model | task | batch | tokens | explicit s | fused s | fused / explicit |"
    yield "|---|---|---|---|---|---|---|"
    for row in rows:
        name, task, batch_text = row.split(":")
        cfg = model_config(name)
        model, run = model_step(cfg, task, True, int(batch_text), compiled=False)
        attentions = [m for m in model.modules() if isinstance(m, layers.Attention)]

        def on(explicit: bool, run=run, attentions=attentions) -> Callable[[], object]:
            most = 10**6 if explicit else 0

            def take_and_run() -> object:
                for attention in attentions:
                    attention.explicit_tokens = {"train": most, "infer": most}
                return run()

            return take_and_run

        fused, explicit, ratios = alternate(on(False), on(True), rounds, min_time=0.0)
        tokens = cfg.grid[0] * cfg.grid[1] + cfg.num_prefix_tokens
        yield (
            f"| {name} | {task} | {batch_text} | {tokens} | {explicit:.3f} | {fused:.3f} "
            f"| {statistics.median(ratios):.2f} |"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=list(GRID))
    parser.add_argument("--attention", action="store_true", help="the attention tables only")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds per timing")
    args = parser.parse_args(argv)
    cpu = cpu_features()
    print(f"CPU: native bf16 {cpu.native_bf16 or 'none'}; {torch.get_num_threads()} threads")
    tables = [] if args.attention else [rows_table(args.rows, args.rounds, args.min_time)]
    tables += [attention_table(max(args.rounds, 7)), paths_table(PATHS, args.rounds)]
    for table in tables:
        print()
        for line in table:
            print(line, flush=True)


if __name__ == "__main__":
    main()
