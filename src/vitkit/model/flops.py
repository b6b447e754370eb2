"""Analytic FLOP count of a forward pass: 2 x multiply-accumulates of every matmul and conv
(attention's q kᵀ and weights x v included; norms, softmax and activations left out), the
convention under which ViT-B/16 at 224 is 35.1 GFLOPs."""

from __future__ import annotations

import math

from ..config import ModelConfig, image_size_of, size_hw


def _resnet_macs(cfg: ModelConfig, h: int, w: int) -> tuple[int, int, int]:
    """MACs of the BiT backbone and its output (height, width)."""
    assert cfg.resnet is not None
    width = cfg.resnet.width
    h, w = math.ceil(h / 2), math.ceil(w / 2)  # root conv 7x7/2
    macs = h * w * 49 * cfg.in_chans * width
    h, w = math.ceil(h / 2), math.ceil(w / 2)  # max-pool 3x3/2
    cin = width
    for i, depth in enumerate(cfg.resnet.num_layers):
        mid = width * 2**i
        for u in range(depth):
            stride = 2 if (i > 0 and u == 0) else 1
            oh, ow = math.ceil(h / stride), math.ceil(w / stride)
            macs += h * w * cin * mid  # conv1 1x1
            macs += oh * ow * 9 * mid * mid  # conv2 3x3, strided
            macs += oh * ow * mid * 4 * mid  # conv3 1x1
            if cin != 4 * mid or stride != 1:
                macs += oh * ow * cin * 4 * mid  # projection shortcut
            h, w, cin = oh, ow, 4 * mid
    return macs, h, w


def count_flops(cfg: ModelConfig, image_size: int | tuple[int, int] | None = None) -> int:
    """FLOPs of one image's forward pass at ``image_size``, an int or (height, width) (default:
    the config's)."""
    h, w = size_hw(image_size_of(image_size or cfg.image_size))
    macs = 0
    cin = cfg.in_chans
    if cfg.resnet is not None:
        backbone, h, w = _resnet_macs(cfg, h, w)
        macs += backbone
        cin = cfg.resnet.out_channels
        if cfg.arch == "resnet":  # the CNN baseline: pooled features into one linear head
            return 2 * (macs + cin * cfg.num_classes)
    P, D, M = cfg.patch_size, cfg.hidden_size, cfg.mlp_dim
    n = (h // P) * (w // P)  # gh * gw patches
    t = n + cfg.num_prefix_tokens
    macs += n * P * P * cin * D  # patch embedding
    per_block = t * D * 3 * D + 2 * t * t * D + t * D * D + 2 * t * D * M
    macs += cfg.num_layers * per_block
    if cfg.classifier == "map":  # one probe: q, k/v of every token, scores and sum, out, MLP
        macs += D * D + t * D * 2 * D + 2 * t * D + D * D + 2 * D * M
    rep = cfg.representation_size
    if rep:
        macs += D * rep
    macs += (rep or D) * cfg.num_classes
    return 2 * macs
