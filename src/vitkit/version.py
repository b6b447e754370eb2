"""vitkit's version, written once: the package, the ``User-Agent`` of downloads and the package
metadata (``pyproject.toml`` reads it from here) take it. A leaf: it imports nothing."""

__version__ = "0.1.0"
