"""What every test shares: a cache folder of its own; what tests of image files share: which
files PIL decoded."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import ImageFile


@pytest.fixture(autouse=True)
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$VITKIT_HOME`` for each test (verification findings, downloads), never the
    user's; outside ``tmp_path``, where a folder would read as a class of an ImageFolder.
    Subprocesses inherit it."""
    path = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("VITKIT_HOME", str(path))
    return path


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files PIL decodes pixels of (``ImageFile.load``; ``verify()`` does not call it)."""
    seen: list[str] = []
    load = ImageFile.ImageFile.load

    def counting_load(self: ImageFile.ImageFile) -> object:
        seen.append(Path(str(self.filename)).name)
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counting_load)
    return seen
