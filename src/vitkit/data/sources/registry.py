"""Every kind of data a spec names (``config.DataSource.kind``) and the module that lists it
(``listing(cfg, model, seed) -> data.listing.Listing``): the one place a run's data is looked up
by its kind, as timm's ``create_dataset`` is."""

from __future__ import annotations

from ...config import DataConfig, ModelConfig
from ..listing import Lister, Listing
from . import cifar, fashion_mnist, folder, hf, lists, shards, synthetic

KINDS: dict[str, Lister] = {
    "folder": folder.listing,
    "wds": shards.listing,
    "hf": hf.listing,
    "vtab": lists.listing,  # the final run's lists: train800val200, test
    "vtab800": lists.listing,  # the sweep's: train800, val200
    "fashion_mnist": fashion_mnist.listing,
    "cifar10": cifar.listing,
    "cifar100": cifar.listing,
    "synthetic": synthetic.listing,
}


def listing(cfg: DataConfig, model: ModelConfig | None = None, *, seed: int = 0) -> Listing:
    """What ``cfg``'s data holds, listed, not read; ``model`` and ``seed`` make synthetic images
    (None: only their names are wanted)."""
    return KINDS[cfg.source.kind](cfg, model, seed)
