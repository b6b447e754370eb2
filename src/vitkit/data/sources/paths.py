"""Where datasets live on disk: an explicit ``data_dir``, else ``$VITKIT_DATA/<name>``, else a system
directory a distribution package installs (Debian's ``dataset-fashion-mnist``)."""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "VITKIT_DATA"


def search_dirs(
    name: str, data_dir: str | os.PathLike | None, system: Path | None = None
) -> list[Path]:
    """The directories to look in, in order.

    An explicit ``data_dir`` is searched alone (itself, then ``data_dir/name``): a user who names a
    directory never silently gets files from somewhere else.
    """
    if data_dir is not None:
        return [Path(data_dir), Path(data_dir) / name]
    dirs = []
    env = os.environ.get(DATA_ENV)
    if env:
        dirs.append(Path(env) / name)
    if system is not None:
        dirs.append(system)
    return dirs


def find_files(
    dirs: list[Path], names: list[str], *, suffixes: tuple[str, ...] = ("",)
) -> list[Path] | None:
    """The files ``names`` from the first directory holding all of them, or None.

    Each name may carry any of ``suffixes`` (tried in order), e.g. ``(".gz", "")`` accepts a
    gzipped or an already decompressed copy.
    """
    for d in dirs:
        found = []
        for name in names:
            path = next((d / (name + s) for s in suffixes if (d / (name + s)).is_file()), None)
            if path is None:
                break
            found.append(path)
        else:
            return found
    return None
