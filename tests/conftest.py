"""What every test shares: a cache folder of its own and a CPU counted as without native bf16;
what tests of image files share: which files verification decoded."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$VITKIT_HOME`` for each test (verification findings, downloads), never the
    user's; outside ``tmp_path``, where a folder would read as a class of an ImageFolder.
    Subprocesses inherit it."""
    path = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("VITKIT_HOME", str(path))
    return path


@pytest.fixture(autouse=True)
def cpu_without_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` precision decides as on a CPU without native bf16 (``runtime.arithmetic``), in
    this process and its subprocesses: the figures tests assert are fp32's on every machine. A
    test of the decision sets ``VITKIT_CPU_BF16`` itself, or removes it to read the machine."""
    monkeypatch.setenv("VITKIT_CPU_BF16", "none")


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The image files under ``tmp_path`` whose pixels verification decodes to tell grey from
    colour (``verify.grey_kind`` of a mode that is not one-channel; ``verify()`` decodes
    nothing), by name (the file holding the same bytes), in order. The pass must run in this
    process (fewer than ``PARALLEL_MIN_FILES``)."""
    from PIL import ImageMode

    from vitkit.data import verify

    seen: list[str] = []
    grey_kind = verify.grey_kind

    def counting(source: bytes, mode: str, **bounds: int) -> str | None:
        if ImageMode.getmode(mode).basemode != "L":
            named = [p.name for p in sorted(tmp_path.rglob("*")) if p.is_file()
                     and p.read_bytes() == source]  # fmt: skip
            seen.append(named[0] if named else "<bytes of no file>")
        return grey_kind(source, mode, **bounds)

    monkeypatch.setattr(verify, "grey_kind", counting)
    return seen
