"""Inspecting a trained ViT [P §4.5, Fig. 6, 7, 14]: embedding filters, position-embedding
similarity, mean attention distance and attention rollout. Functions return data; ``figures``
draws it; ``inspect_model`` writes everything with an ``index.html``; ``sample_images`` draws
the images it is shown.
"""

from .attention import attention_distance, attention_rollout, collect_attention, rollout_maps
from .figures import plot_attention_distance, plot_filters, plot_posemb_similarity, plot_rollout
from .filters import embedding_filters
from .posemb import posemb_similarity
from .report import inspect_model, sample_images

__all__ = [
    "attention_distance",
    "attention_rollout",
    "collect_attention",
    "embedding_filters",
    "inspect_model",
    "plot_attention_distance",
    "plot_filters",
    "plot_posemb_similarity",
    "plot_rollout",
    "posemb_similarity",
    "rollout_maps",
    "sample_images",
]
