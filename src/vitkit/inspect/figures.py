"""Figures of an inspected model, drawn from the data that ``filters``, ``posemb`` and
``attention`` return [P Fig. 6, 7, 14]. Each function writes one PNG and returns its path.

Figures are built on ``matplotlib.figure.Figure`` (rendered by Agg), never through pyplot, so
drawing them changes no global backend or state.

Shapes: k components, C channels, P patch, (gh, gw) patch grid, L layers, H heads, B images.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import Tensor

from ..data.bounds import printable
from ..files import atomic_write


def _save(fig: Figure, path: str | os.PathLike) -> Path:
    """``fig`` as the PNG ``path``, written beside it and renamed (``atomic_write``): a link
    there is replaced, never written through."""
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight"))
    return path


def plot_filters(
    components: Tensor,
    path: str | os.PathLike,
    *,
    explained_variance_ratio: Tensor | None = None,
    ncols: int = 7,
) -> Path:
    """Embedding-filter components (k, C, P, P) on a grid of ``ncols`` columns, each stretched to
    [0, 1]: RGB for C = 3, gray (the channel mean) otherwise; labelled with its share of the
    variance when given."""
    k, C, P, _ = components.shape
    ncols = min(ncols, k)
    nrows = math.ceil(k / ncols)
    f = components.float()
    if C != 3:
        f = f.mean(dim=1, keepdim=True).expand(k, 3, P, P)  # gray: the channel mean
    low = f.amin(dim=(1, 2, 3), keepdim=True)
    high = f.amax(dim=(1, 2, 3), keepdim=True)
    f = (f - low) / (high - low).clamp_min(1e-12)  # (k, 3, P, P); sign and scale are arbitrary
    # One mosaic image on white: a quarter tile between columns, half a tile (room for the label)
    # between rows.
    gx, gy = max(P // 4, 1), max(P // 2, 1)
    mosaic = torch.ones(nrows * (P + gy) - gy, ncols * (P + gx) - gx, 3)
    for i in range(k):
        row, col = divmod(i, ncols)
        top, left = row * (P + gy), col * (P + gx)
        mosaic[top : top + P, left : left + P] = f[i].permute(1, 2, 0)  # (P, P, 3)
    fig = Figure(figsize=(1.1 * ncols, 1.4 * nrows + 0.5))
    ax = fig.subplots()
    ax.imshow(mosaic.numpy())
    ax.axis("off")
    if explained_variance_ratio is not None:
        for i in range(k):
            row, col = divmod(i, ncols)
            x, y = col * (P + gx) + (P - 1) / 2, row * (P + gy) + P - 0.5
            ratio = 100 * float(explained_variance_ratio[i])
            ax.text(x, y, f"{ratio:.1f}%", ha="center", va="top", fontsize=7)
    ax.set_title(f"Embedding filters (first {k} principal components)")
    return _save(fig, path)


def plot_posemb_similarity(similarity: Tensor, path: str | os.PathLike) -> Path:
    """Position-embedding similarity (gh, gw, gh, gw): one small (gh, gw) map per patch position,
    laid out on the patch grid, with a shared colour scale over [-1, 1]."""
    gh, gw = similarity.shape[:2]
    # One mosaic image: tile (i, j) holds sim[i, j]; a NaN line (drawn blank) separates tiles.
    mosaic = torch.full((gh * (gh + 1) - 1, gw * (gw + 1) - 1), float("nan"))
    for i in range(gh):
        for j in range(gw):
            top, left = i * (gh + 1), j * (gw + 1)
            mosaic[top : top + gh, left : left + gw] = similarity[i, j]
    fig = Figure(figsize=(6, 5))
    ax = fig.subplots()
    image = ax.imshow(mosaic.numpy(), cmap="viridis", vmin=-1, vmax=1)
    ax.set_xticks([j * (gw + 1) + (gw - 1) / 2 for j in range(gw)], [str(j + 1) for j in range(gw)])
    ax.set_yticks([i * (gh + 1) + (gh - 1) / 2 for i in range(gh)], [str(i + 1) for i in range(gh)])
    ax.tick_params(length=0, labelsize=7)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set(xlabel="Input patch column", ylabel="Input patch row")
    ax.set_title("Position embedding similarity")
    fig.colorbar(image, ax=ax, label="Cosine similarity")
    return _save(fig, path)


def plot_attention_distance(distance: Tensor, path: str | os.PathLike) -> Path:
    """Mean attention distance (L, H): x = layer (network depth), one dot per head."""
    L, H = distance.shape
    fig = Figure(figsize=(5, 4))
    ax = fig.subplots()
    depth = list(range(1, L + 1))
    for h in range(H):
        ax.scatter(depth, distance[:, h].tolist(), s=14, label=f"Head {h + 1}")
    ax.set(
        xlabel="Network depth (layer)",
        ylabel="Mean attention distance (pixels)",
        title="Mean attention distance",
    )
    ax.set_ylim(bottom=0, top=max(1.1 * float(distance.max()), 1.0))
    ax.set_xticks(depth)
    ax.grid(alpha=0.3)
    if H <= 16:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # off the dots
    return _save(fig, path)


DISPLAY_PX = 160  # the least size an image is drawn at (its longer side): a 32 px photo is 5x
DIMMED = 0.2  # the share of an image kept where its attention map is 0


def rollout_overlays(
    images: Tensor, maps: Tensor, *, size: int = DISPLAY_PX
) -> tuple[Tensor, Tensor]:
    """Images (B, C, H, W) in [-1, 1] and their attention maps (B, gh, gw) as pictures to show:
    (B, 2, s*H, s*W, 3) in [0, 1], the input and the input dimmed where its map is low, and the
    maps upsampled to them (B, s*H, s*W). s is the least whole factor that makes the longer side
    at least ``size`` px. RGB for C = 3, gray (the channel mean) otherwise."""
    B, C, H, W = images.shape
    s = max(1, math.ceil(size / max(H, W)))
    shown = ((images.detach().float().cpu() + 1) / 2).clamp(0, 1)  # [-1, 1] -> [0, 1]
    if C != 3:
        shown = shown.mean(dim=1, keepdim=True).expand(B, 3, H, W)
    # nearest: each pixel a visible block, no detail invented; the map is smooth (bilinear)
    shown = F.interpolate(shown, scale_factor=s, mode="nearest")  # (B, 3, sH, sW)
    up = F.interpolate(
        maps[:, None].float(), size=shown.shape[-2:], mode="bilinear", align_corners=False
    ).clamp(0, 1)  # (B, 1, sH, sW)
    # blended toward black by the map (Fig. 6: the image times the map), keeping DIMMED of the
    # image where the map is 0: a colour map over a photo was unreadable, and black hid it
    pair = torch.stack([shown, shown * (DIMMED + (1 - DIMMED) * up)], dim=1)  # (B, 2, 3, sH, sW)
    return pair.permute(0, 1, 3, 4, 2), up[:, 0]  # (B, 2, sH, sW, 3), (B, sH, sW)


def plot_rollout(
    images: Tensor,
    maps: Tensor,
    path: str | os.PathLike,
    *,
    titles: list[str] | None = None,
    ncols: int = 2,  # pairs a row: 4 panels of 160 px fit the page (60em) at full size
) -> Path:
    """For each image (B, C, H, W) in [-1, 1] and its attention map (B, gh, gw) scaled to max 1,
    the pair ``rollout_overlays`` makes, drawn at one figure pixel per picture pixel."""
    pictures, up = rollout_overlays(images, maps)  # (B, 2, h, w, 3), (B, h, w)
    B, _, h, w, _ = pictures.shape
    pairs = min(ncols, B)
    nrows = math.ceil(B / pairs)
    # each panel w x h figure pixels (at _save's 100 dpi), a tenth of a panel between panels and
    # a title's height (t px) above each row
    n, t, gap = 2 * pairs, 20, 0.1
    fig = Figure(figsize=(w * (n + gap * (n - 1)) / 100, nrows * (h + t) / 100))
    top = 1 - t / (nrows * (h + t))
    fig.subplots_adjust(left=0, right=1, bottom=0, top=top, wspace=gap, hspace=t / h)
    axes = fig.subplots(nrows, n, squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for b in range(B):
        row, col = divmod(b, pairs)
        ax_input, ax_map = axes[row, 2 * col], axes[row, 2 * col + 1]
        ax_input.imshow(pictures[b, 0].numpy(), interpolation="nearest")
        ax_map.imshow(pictures[b, 1].numpy(), interpolation="nearest")
        # where the map is at half its maximum: a line that reads on any colours, white on black
        for colour, width in (("black", 2.5), ("white", 1.0)):
            ax_map.contour(up[b].numpy(), levels=[0.5], colors=colour, linewidths=width)
        # a class or file name is plain text: matplotlib would parse '$...$' as mathtext (a
        # traceback, or a RecursionError on 140 nested \sqrt{) and warn of a raw ESC's glyph
        title = printable(titles[b]) if titles else f"image {b}"
        ax_input.set_title(title, fontsize=8, parse_math=False)
        ax_map.set_title("attention rollout", fontsize=8)
    return _save(fig, path)
