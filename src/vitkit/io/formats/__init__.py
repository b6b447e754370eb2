"""Converters from the formats people already have to vitkit's layout (timm's key names).

One module per format: ``official`` (vit_jax and big_vision ``.npz``), ``timm``, ``hf``. Each
returns ``(ModelConfig, state_dict)``; ``vitkit.io.api`` decides which one a source needs.
``hf`` and ``official`` (vit_jax only) also write, through the same crosswalk.
"""
