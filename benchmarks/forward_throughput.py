"""Forward throughput of vitkit against timm, same weights, same process, alternating contenders.

    .venv/bin/python benchmarks/forward_throughput.py                   # ViT-S/16 and ViT-B/16, 224, batch 32
    .venv/bin/python benchmarks/forward_throughput.py --models ViT-Ti/16 --rounds 3

Each round times both contenders on the same input (``iters`` forward passes each, after one
warm-up pass), alternating which goes first, so drift of a shared machine hits both sides alike;
half the rounds build timm first and half vitkit first (see ``build_pair``). Reports the median
images/s per contender, the median and range of the per-round ratios vitkit / timm, and the max
abs logit difference between the two (they hold the same weights).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import timm
import torch

import vitkit
from vitkit.presets import get_config


def timm_name(preset: str) -> str:
    cfg = get_config(preset)
    words = {192: "tiny", 384: "small", 768: "base", 1024: "large", 1280: "huge"}
    return f"vit_{words[cfg.hidden_size]}_patch{cfg.patch_size}_{cfg.image_size}"


def images_per_second(model: torch.nn.Module, x: torch.Tensor, iters: int) -> float:
    with torch.inference_mode():
        start = time.perf_counter()
        for _ in range(iters):
            model(x)
        return iters * x.shape[0] / (time.perf_counter() - start)


def build_pair(preset: str, vitkit_first: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """vitkit and timm models holding the same random weights, the one or the other built first.

    Where a tensor lands in memory changes matmul speed by several percent on this machine
    (measured: the model built second ran ~5% slower whichever it was), so the harness alternates
    the build order and pools the rounds of both orders.
    """
    torch.manual_seed(0)
    if vitkit_first:
        ours = vitkit.create_model(preset)
        with torch.no_grad():  # non-zero weights everywhere, so the logit check means something
            for p in ours.parameters():
                p.normal_(0, 0.02)
        peer = timm.create_model(timm_name(preset), pretrained=False)
        peer.load_state_dict(ours.state_dict())
    else:
        peer = timm.create_model(timm_name(preset), pretrained=False)
        with torch.no_grad():
            for p in peer.parameters():
                p.normal_(0, 0.02)
        ours = vitkit.load(peer)
    return ours.eval(), peer.eval()


def bench(preset: str, batch: int, rounds: int, iters: int) -> dict[str, float]:
    speeds: dict[str, list[float]] = {"vitkit": [], "timm": []}
    ratios = []
    diff = 0.0
    for vitkit_first in (False, True):
        ours, peer = build_pair(preset, vitkit_first)
        x = torch.randn(batch, 3, ours.cfg.image_size, ours.cfg.image_size)
        with torch.inference_mode():
            diff = max(diff, (ours(x) - peer(x)).abs().max().item())  # also the warm-up pass
        for r in range((rounds + 1) // 2):
            order = [("vitkit", ours), ("timm", peer)]
            for name, model in order if r % 2 == 0 else order[::-1]:
                speeds[name].append(images_per_second(model, x, iters))
            ratios.append(speeds["vitkit"][-1] / speeds["timm"][-1])
        del ours, peer
    return {
        "vitkit": statistics.median(speeds["vitkit"]),
        "timm": statistics.median(speeds["timm"]),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "max_abs_diff": diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["ViT-S/16", "ViT-B/16"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=12, help="timed rounds, half per build order")
    parser.add_argument("--iters", type=int, default=1, help="forward passes per timing")
    args = parser.parse_args()
    print(
        f"# torch {torch.__version__}, timm {timm.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}; fp32, batch {args.batch}, {args.rounds} rounds"
    )
    print("| model | vitkit img/s | timm img/s | median ratio | ratio range | max abs logit diff |")
    print("|---|---|---|---|---|---|")
    for preset in args.models:
        r = bench(preset, args.batch, args.rounds, args.iters)
        print(
            f"| {preset} | {r['vitkit']:.2f} | {r['timm']:.2f} | {r['ratio']:.3f} | "
            f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f} | {r['max_abs_diff']:.1e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
