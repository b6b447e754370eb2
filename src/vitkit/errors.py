"""vitkit's errors: what a user can get wrong, as one family the command line reports in one line.

Everything a user gives us — a config value, a checkpoint, a data folder, a file path, an optional
extra that is not installed, a disk that fills up — that we cannot use raises a ``VitkitError``
(a ``ValueError``, so ``except ValueError`` in user code keeps working). ``vitkit``'s ``main``
prints it as one line and exits non-zero; any other exception is a bug in vitkit and keeps its
traceback. This module imports nothing, so the CLI can use it before torch is imported.
"""

from __future__ import annotations


class VitkitError(ValueError):
    """Something the user gave cannot be used: the message says what was expected and what was
    found."""


class ConfigError(VitkitError):
    """A configuration value or key a user gave is not valid."""


class CheckpointError(VitkitError):
    """A checkpoint cannot be read, or does not fit the model it is loaded into."""


class DataError(VitkitError):
    """A dataset cannot be read, or is not what the run needs."""


class UserFileError(VitkitError, OSError):
    """A file or folder the user named is unreadable or cannot be written (a full disk, a
    read-only folder); an ``OSError`` too."""


class MissingFileError(UserFileError, FileNotFoundError):
    """A file or folder the user named does not exist; a ``FileNotFoundError`` too."""


class DownloadError(VitkitError, OSError):
    """A file cannot be downloaded or found in the download cache (offline, unreachable, an HTTP
    error, a full disk), or it is not the file it should be (a size or hash mismatch); an
    ``OSError`` too."""


class MissingExtraError(VitkitError, ImportError):
    """An optional dependency is not installed: the message names the extra that brings it."""

    def __init__(self, what: str, extra: str, package: str) -> None:
        super().__init__(f"{what} needs {package}: pip install 'vitkit[{extra}]'")
        self.name = package
