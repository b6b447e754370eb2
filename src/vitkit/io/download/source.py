"""A publisher of files under one base URL, and its mirror (``VITKIT_<SOURCE>_URL``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ...files import home
from .cache import safe_parts
from .fetch import fetch

_SOURCE_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, kw_only=True)
class Source:
    """A publisher of files under one base URL (e.g. the official checkpoints' bucket).

    ``name`` (lower case, digits, ``_``) names the cache folder ``home()/weights/<name>`` and the
    environment variable ``VITKIT_<NAME>_URL`` that replaces ``url``, the default base URL, with a
    mirror's."""

    name: str
    url: str

    def __post_init__(self) -> None:
        if not _SOURCE_NAME.fullmatch(self.name):
            raise ValueError(f"Source.name: expected [a-z][a-z0-9_]*, found {self.name!r}")

    @property
    def env_var(self) -> str:
        return f"VITKIT_{self.name.upper()}_URL"

    def base_url(self) -> str:
        """The base URL in use: ``$VITKIT_<NAME>_URL`` if set, else ``url``."""
        return (os.environ.get(self.env_var) or self.url).rstrip("/")

    def file_url(self, path: str) -> str:
        return f"{self.base_url()}/{'/'.join(safe_parts(path, self.name))}"

    def cached_path(self, path: str) -> Path:
        """``home()/weights/<name>/<path>``, whichever base URL the file comes from."""
        # keyed by name, not host: a mirror keeps the cache, and a file downloaded by hand goes to
        # the same place whichever server it came from
        return home().joinpath("weights", self.name, *safe_parts(path, self.name))

    def fetch(
        self,
        path: str,
        *,
        sha256: str | None = None,
        size: int | None = None,
        size_range: tuple[int, int] | None = None,
        progress: bool = True,
    ) -> Path:
        """``fetch`` of ``path`` under the base URL in use, into ``cached_path(path)``."""
        return fetch(
            self.file_url(path),
            dest=self.cached_path(path),
            sha256=sha256,
            size=size,
            size_range=size_range,
            progress=progress,
        )
