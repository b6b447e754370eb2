"""Figures of docs/guides/reproduction.md, drawn from ``studies/results.json`` (what ``studies/run.py``
measured). Run: ``python studies/plots.py``; studies with no results yet are left out."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "studies" / "results.json"
OUT = ROOT / "docs" / "reproduction"
SIZES = (50, 250, 1250, 6000)


def _save(fig, name: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(OUT / name, dpi=110)
    plt.close(fig)
    print(f"wrote {OUT / name}")
    return OUT / name


def data_requirements(results: dict) -> None:
    """(a) Test accuracy against training-set size (the paper's Fig. 3/4 in miniature)."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for model, style in (("vit", "o-"), ("resnet", "s-"), ("hybrid", "^-")):
        points = [
            (10 * n, results[f"a/{model}-{n}"]["accuracy"])
            for n in SIZES
            if f"a/{model}-{n}" in results
        ]
        if points:
            ax.plot(*zip(*points, strict=True), style, label=model)
    ax.set(xscale="log", xlabel="training images (class-balanced)", ylabel="test accuracy")
    ax.set_title("Fashion-MNIST, 600 steps of 128 for every size", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, "a_data_requirements.png")


def bars(
    results: dict,
    keys: list[tuple[str, str]],
    name: str,
    title: str,
    ylabel: str,
    metric="accuracy",
) -> None:
    shown = [
        (label, results[k][metric]) for label, k in keys if k in results and metric in results[k]
    ]
    if not shown:
        return
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(shown), 3.8))
    labels, values = zip(*shown, strict=True)
    ax.bar(range(len(values)), values, color="tab:blue")
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.4f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(values)), labels, fontsize=8)
    ax.set_ylim(min(values) - 0.05, min(1.0, max(values) + 0.03))
    ax.set(ylabel=ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    _save(fig, name)


def classifier_vs_lr(results: dict) -> None:
    """(c) Class token vs GAP across learning rates (the paper's Fig. 9)."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    for ax, metric, label in (
        (axes[0], "accuracy", "test accuracy"),
        (axes[1], "fewshot_5shot", "5-shot linear accuracy"),
    ):
        for classifier, style in (("token", "o-"), ("gap", "s-")):
            points = [
                (float(lr), results[k][metric])
                for lr in ("3e-4", "8e-4")
                if (k := f"c/{classifier}-lr{lr}") in results and metric in results[k]
            ]
            if points:
                (line,) = ax.plot(*zip(*points, strict=True), style, label=f"{classifier}, seed 0")
                again = results.get(f"c/{classifier}-lr8e-4-seed1", {})
                if metric in again:
                    ax.plot([8e-4], [again[metric]], "x", ms=9, color=line.get_color(),
                            label=f"{classifier}, seed 1")  # fmt: skip
        ax.set(xscale="log", xlabel="Adam learning rate", ylabel=label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(
        "Class token vs global average pooling, 600 steps of 128 on Fashion-MNIST", fontsize=10
    )
    _save(fig, "c_classifier_lr.png")


def main() -> None:
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    data_requirements(results)
    bars(
        results,
        [
            ("scratch\n500 labels", "a/vit-50"),
            ("MPP + ft\n500 labels", "b/mpp-ft-50"),
            ("scratch\n2500 labels", "a/vit-250"),
            ("MPP + ft\n2500 labels", "b/mpp-ft-250"),
        ],
        "b_mpp.png",
        "Masked patch prediction, then fine-tuning on few labels",
        "test accuracy",
    )
    classifier_vs_lr(results)
    bars(
        results,
        [
            ("main job\n28 px", "e/base"),
            ("fine-tuned\n28 px", "e/ft-28px"),
            ("fine-tuned\n56 px", "e/ft-56px"),
        ],
        "e_resolution.png",
        "Fine-tuning at a higher resolution (posemb interpolated)",
        "test accuracy",
    )


if __name__ == "__main__":
    main()
