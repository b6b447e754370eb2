"""One folder that shows what a trained ViT learned [P §4.5, Fig. 6, 7, 14]: each figure as a
PNG, the data behind it (``.json`` for small data, ``.npz`` for arrays), and an ``index.html``
with captions that opens in a browser.
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError, UserFileError
from ..files import atomic_write, atomic_write_text
from ..model import VisionTransformer
from .attention import attention_distance, attention_rollout, collect_attention, rollout_maps
from .figures import (
    DIMMED,
    DISPLAY_PX,
    plot_attention_distance,
    plot_filters,
    plot_posemb_similarity,
    plot_rollout,
)
from .filters import embedding_filters
from .posemb import posemb_similarity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Section:
    title: str
    caption: str
    png: str | None = None  # None: the panel was skipped and the caption says why
    files: tuple[Path, ...] = ()  # what the section wrote: its PNG and the data behind it


def sample_images(
    labels: Tensor, count: int, *, seed: int = 0, keys: Sequence[str | None] | None = None
) -> Tensor:
    """Indices of ``count`` of the images labelled ``labels`` (N,) to inspect: each class in turn
    takes the next of its images, in a random order drawn from ``seed`` (the same every time),
    whose file stem none drawn has (``keys``: their names, ``key_of``), else its next."""
    # not the first in sort order: a folder's first files of each class were one photo's
    # rotations, and its first 16 one picture 16 times
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))  # (N,)
    queues = [order[labels[order] == k].tolist() for k in labels.unique()]  # each class's draw
    # one stem in two class folders is one photo (a folder of a photo's rotations, a class each);
    # an image without a name stands for itself (its index)
    stems = [PurePath(k).stem if k else i for i, k in enumerate(keys or [None] * len(labels))]
    chosen: list[int] = []
    while len(chosen) < min(count, len(labels)):
        for queue in [q for q in queues if q][: count - len(chosen)]:  # this turn's classes
            seen = {stems[i] for i in chosen}
            fresh = (j for j, i in enumerate(queue) if stems[i] not in seen)
            chosen.append(queue.pop(next(fresh, 0)))  # none fresh: the class's next, a repeat
    return torch.tensor(chosen, dtype=torch.int64)


# an absolute path in free text: a "/" that starts a word, up to a space, colon, comma or bracket
_ABSOLUTE = re.compile(r"(?<![\w.~/])/[^\s:,()]+")


def _no_absolute_paths(text: str) -> str:
    """``text`` with each absolute path in it relative to the working directory when it is under
    it, else its last name: a page is shared, and the absolute path names the user's folders."""

    def shown(found: re.Match[str]) -> str:
        relative = os.path.relpath(found.group())
        if not relative.startswith(".."):
            return relative
        return os.path.basename(found.group().rstrip("/")) or found.group()

    return _ABSOLUTE.sub(shown, text)


def _describe(model: VisionTransformer, name: str | None) -> str:
    cfg = model.cfg
    stem = f"R{list(cfg.resnet.num_layers)}+ViT hybrid, " if cfg.resnet else ""
    h, w = cfg.image_hw
    image = f"{h}" if h == w else f"{h}x{w}"
    return (
        f"{name or 'model'}: {stem}D={cfg.hidden_size}, L={cfg.num_layers}, H={cfg.num_heads}, "
        f"patch {cfg.patch_size} ({cfg.total_stride} px per token), image {image} px, "
        f"{cfg.in_chans} channel(s), classifier={cfg.classifier}, posemb={cfg.posemb}, "
        f"{model.num_params():,} parameters"
    )


def _write_html(path: Path, heading: str, sections: list[_Section]) -> Path:
    parts = [
        "<!doctype html>",
        # an empty icon: a browser would otherwise ask the server for /favicon.ico, a 404
        '<html><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        "<title>vitkit inspect</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto;padding:1em}"
        "img{max-width:100%}figure{margin:2em 0}figcaption{color:#333}</style></head><body>",
        "<h1>What the Vision Transformer learned</h1>",
        f"<p>{html.escape(heading)}</p>",
    ]
    for s in sections:
        parts.append(f"<figure><h2>{html.escape(s.title)}</h2>")
        if s.png:
            parts.append(f'<img src="{html.escape(s.png)}" alt="{html.escape(s.title)}">')
        parts.append(f"<figcaption>{html.escape(s.caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return atomic_write_text(path, "\n".join(parts) + "\n")


def _savez(path: Path, **arrays: np.ndarray) -> Path:
    """``np.savez`` through ``atomic_write`` (a link at ``path`` replaced, never written
    through)."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would add .npz to the name
            # Any: mypy cannot tell that no key is np.savez's allow_pickle (a bool)
            np.savez(f, **cast(dict[str, Any], arrays))

    atomic_write(path, write)
    return path


def inspect_model(
    model: VisionTransformer,
    images: Tensor,
    out_dir: str | os.PathLike,
    *,
    titles: list[str] | None = None,
    max_maps: int = 16,
    batch_size: int = 64,
    name: str | None = None,
    images_from: str | None = None,
    autocast: torch.dtype | None = None,
) -> dict[str, Path]:
    """Inspect ``model`` on ``images`` (B, C, H, W) in [-1, 1] and write the figures to ``out_dir``.

    Mean attention distance is averaged over all ``images``; attention-rollout maps are drawn for
    the first ``max_maps`` (titled by ``titles``, e.g. class names). ``name`` labels the model in
    ``index.html``, ``images_from`` says where the images came from; ``autocast``: a dtype the
    forward passes compute in (the attention weights are summed in fp32). Returns the written
    files by file name.
    """
    cfg = model.cfg
    if images.ndim != 4 or images.shape[1] != cfg.in_chans or len(images) == 0:
        raise ConfigError(
            f"images must be a non-empty (B, {cfg.in_chans}, H, W) tensor for this model, "
            f"got shape {tuple(images.shape)}"
        )
    if max_maps < 1 or batch_size < 1:
        raise ConfigError(
            f"max_maps={max_maps} and batch_size={batch_size}: expected positive integers"
        )
    num_maps = min(max_maps, len(images))
    if titles is not None and len(titles) < num_maps:
        raise ConfigError(f"{len(titles)} titles for {num_maps} attention maps")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():  # mkdir's FileExistsError was a traceback
        raise UserFileError(f"{out} is a file: expected a folder to write the figures to")
    out.mkdir(parents=True, exist_ok=True)
    distance, rollout = _attention(model, images, num_maps, batch_size, autocast)
    sections = [
        _filters_section(model, out),
        _posemb_section(model, out),
        _distance_section(model, images, distance, out),
        _rollout_section(model, images[:num_maps], rollout, titles, out),
    ]
    h, w = images.shape[-2:]
    source = f"{images_from}: " if images_from else ""
    heading = f"{_describe(model, name)}. Images: {source}{len(images)} at {h}x{w} px."
    heading = _no_absolute_paths(heading)
    written = {path.name: path for s in sections for path in s.files}
    page = _write_html(out / "index.html", heading, sections)
    return {**written, page.name: page}


def _filters_section(model: VisionTransformer, out: Path) -> _Section:
    """Embedding filters (Fig. 7 left): none in a hybrid, whose patches are ResNet features."""
    cfg = model.cfg
    title = "Embedding filters"
    if cfg.resnet is not None:
        log.info("embedding filters skipped: hybrid model")
        return _Section(
            title,
            "Skipped: in this hybrid the patch embedding is a "
            f"{cfg.patch_size}x{cfg.patch_size} projection of ResNet features, not a filter "
            "on pixels.",
        )
    filters = embedding_filters(model)
    k, C, P, _ = filters["components"].shape
    data = _savez(out / "embedding_filters.npz", **{n: t.numpy() for n, t in filters.items()})
    png = plot_filters(
        filters["components"],
        out / "embedding_filters.png",
        explained_variance_ratio=filters["explained_variance_ratio"],
    )
    caption = (
        f"The first {k} principal components of the {cfg.hidden_size} patch-embedding filters "
        f"({C}x{P}x{P} each, centred over the filters), each stretched to [0, 1]; the title is "
        "the share of the filters' variance it explains. Mirrors Figure 7 (left), where "
        "ViT-L/32's components resemble plausible basis functions for the patches."
    )
    return _Section(title, caption, png.name, (data, png))


def _posemb_section(model: VisionTransformer, out: Path) -> _Section:
    """Position-embedding similarity (Fig. 7 centre): none without a position embedding."""
    cfg = model.cfg
    title = "Position embedding similarity"
    if cfg.posemb == "none":
        log.info("position-embedding similarity skipped: posemb='none'")
        return _Section(title, "Skipped: the model has no position embedding.")
    similarity = posemb_similarity(model)
    data = _savez(out / "posemb_similarity.npz", similarity=similarity.numpy())
    png = plot_posemb_similarity(similarity, out / "posemb_similarity.png")
    gh, gw = cfg.grid
    kind = "learned" if cfg.posemb == "learn" else "fixed 2D sine-cosine"
    caption = (
        f"Cosine similarity between the {kind} position embedding of each patch position and "
        f"those of all other positions ({gh}x{gw} grid; tile (row, column) is one position's "
        "map; the class token's embedding is left out). Mirrors Figure 7 (centre): close "
        "patches have similar embeddings, with row and column structure."
    )
    return _Section(title, caption, png.name, (data, png))


def _attention(
    model: VisionTransformer,
    images: Tensor,
    num_maps: int,
    batch_size: int,
    autocast: torch.dtype | None,
) -> tuple[Tensor, Tensor]:
    """Mean attention distance over all ``images`` (L, H) and the rollout of the first
    ``num_maps`` (num_maps, T, T), from one pass over the images."""
    cfg = model.cfg
    grid = model.patch_embed.grid(images.shape[-2], images.shape[-1])
    distance = torch.zeros(cfg.num_layers, cfg.num_heads)
    rollouts: list[Tensor] = []
    # batch by batch, so that only one batch's attention (L x (b, H, T, T)) is held at a time
    for start in range(0, len(images), batch_size):
        batch = images[start : start + batch_size]
        attn = collect_attention(model, batch, batch_size=batch_size, autocast=autocast)
        distance += len(batch) * attention_distance(
            attn, grid=grid, num_prefix=cfg.num_prefix_tokens, pixels_per_patch=cfg.total_stride
        )
        if start < num_maps:
            rollouts.append(attention_rollout([a[: num_maps - start] for a in attn]))
    return distance / len(images), torch.cat(rollouts)  # (L, H), (num_maps, T, T)


def _distance_section(
    model: VisionTransformer, images: Tensor, distance: Tensor, out: Path
) -> _Section:
    """Mean attention distance (Fig. 7 right) of ``distance`` (L, H) over ``images``."""
    cfg = model.cfg
    grid = model.patch_embed.grid(images.shape[-2], images.shape[-1])
    data = {
        "mean_attention_distance_px": distance.tolist(),  # [layer][head]
        "num_images": len(images),
        "image_size": list(images.shape[-2:]),
        "grid": list(grid),
        "pixels_per_patch": cfg.total_stride,
        "class_token": "left out; patch-to-patch weights renormalised to sum to 1",
    }
    json_path = atomic_write_text(
        out / "attention_distance.json", json.dumps(data, indent=1) + "\n"
    )
    png = plot_attention_distance(distance, out / "attention_distance.png")
    caption = (
        f"Mean attention distance of each head (dots) in each layer, in pixels, averaged over "
        f"{len(images)} image(s) and all query patches: the distance between patch centres "
        f"(grid distance x {cfg.total_stride} px) weighted by the attention weight, using "
        "patch-to-patch weights renormalised to sum to 1 (the class token is left out). Mirrors "
        "Figure 7 (right), where some heads of the lowest layers are already global and the "
        "distance grows with depth."
    )
    return _Section("Mean attention distance", caption, png.name, (json_path, png))


def _rollout_section(
    model: VisionTransformer,
    images: Tensor,
    rollout: Tensor,
    titles: list[str] | None,
    out: Path,
) -> _Section:
    """Attention rollout maps (Fig. 6, 14) of ``images`` (n, C, H, W) from ``rollout`` (n, T, T)."""
    cfg = model.cfg
    num_maps = len(images)
    grid = model.patch_embed.grid(images.shape[-2], images.shape[-1])
    raw = rollout_maps(rollout, grid=grid, num_prefix=cfg.num_prefix_tokens, normalize=False)
    maps = raw / raw.amax(dim=(1, 2), keepdim=True).clamp_min(1e-12)  # (n, gh, gw), max 1 each
    data = _savez(out / "attention_rollout.npz", maps=maps.numpy(), raw=raw.numpy())
    png = plot_rollout(
        images, maps, out / "attention_rollout.png", titles=titles[:num_maps] if titles else None
    )
    if cfg.num_prefix_tokens:
        source = "the class token's row"
    elif cfg.classifier == "map":  # the MAP probe's own attention is not in the rollout
        source = "the mean of the patch rows (MAP model: no class token; an approximation of what the attention-pooling head reads)"
    else:
        source = "the mean of the patch rows (GAP model: no class token)"
    caption = (
        f"Attention rollout for the first {num_maps} image(s): attention averaged over heads, the "
        "identity added for the residual path, rows renormalised, multiplied across all "
        f"{cfg.num_layers} layers (Abnar & Zuidema 2020); the map is {source} over the patches, "
        "upsampled to the image and scaled to max 1. Each image is shown beside itself dimmed "
        f"where its map is low (to {DIMMED:.0%} where it is 0), a line where the map is at half "
        f"its maximum, enlarged to at least {DISPLAY_PX} px. Mirrors Figures 6 and 14."
    )
    return _Section("Attention maps (attention rollout)", caption, png.name, (data, png))
