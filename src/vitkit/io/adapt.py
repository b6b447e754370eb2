"""Pre-trained weights made ready for another task [P §3.2, App. B.1.1]: the one adaptation that
``create_model(pretrained=)`` and ``vitkit finetune --init-from`` share.

What may change is ``config.FINETUNE_KEYS``: the classes (the whole head, pre-logits included,
replaced by one zero-initialised linear layer), the resolution (the position embeddings
interpolated in 2D to the new patch grid) and the regularisation (dropout, stochastic depth);
everything else is the weights'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config import FINETUNE_KEYS, REGULARISATION, ModelConfig
from ..model import ResNetClassifier, VisionTransformer, build_model
from .checkpoint import load_state_dict_strict


def adapt_pretrained(
    model: VisionTransformer | ResNetClassifier,
    changes: Mapping[str, Any],
    *,
    source: str,
    as_published: bool = False,
) -> VisionTransformer | ResNetClassifier:
    """``model`` (pre-trained, read from ``source``) with ``changes`` (``FINETUNE_KEYS`` only),
    in training mode; ``model`` itself may be changed and returned.

    Fine-tuning (the default) always replaces the whole head and builds the model anew from the
    adapted config (so a run draws the same random numbers after it whatever changed).
    ``as_published``: the model as published wherever ``changes`` leave it (``create_model``):
    the head, pre-logits included, is replaced only for another ``num_classes``, and the model
    rebuilt only for other settings.
    """
    assert set(changes) <= set(FINETUNE_KEYS), changes  # each caller checks what it is given
    target = dataclasses.replace(model.cfg, **changes)  # checks the values
    if isinstance(model, VisionTransformer) and target.image_hw != model.cfg.image_hw:
        model.resize_pos_embed(target.grid)
    if not as_published or target.num_classes != model.cfg.num_classes:
        model.reset_head(target.num_classes)  # zero-initialised, pre-logits dropped
    # image_size: a ResNet's too, which has no position embeddings to resize
    settings = {k: getattr(target, k) for k in ("image_size", *REGULARISATION)}
    cfg: ModelConfig = dataclasses.replace(model.cfg, **settings)
    if not as_published or cfg != model.cfg:  # the same weights in a model that drops out
        fresh = build_model(cfg)
        load_state_dict_strict(fresh, model.state_dict(), source=source)
        model = fresh
    return model.train()
