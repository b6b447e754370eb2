"""The cache of downloaded files: where a file goes, the record beside it, and the checks a cached file must pass.

A named source's file ``F`` is ``home()/weights/<source>/<path>``, a bare URL's
``weights/<host>/<path>``. Beside it: ``F.download.json`` (URLs, size, sha256, validator; it
outlives ``F``, and a later download must match it), ``F.part`` and ``F.part.json`` (a transfer
cut by the network, see fetch.py), ``F.lock`` (a ``flock``: concurrent processes download
once). A file put at ``F`` by hand is used if it passes the checks; a link at ``F``, ``F.part``
or ``F.lock`` is refused: whoever can write into the cache must not be able to make vitkit load
or overwrite a file elsewhere.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ...errors import DownloadError
from ...files import atomic_write, hex_digests, home

log = logging.getLogger(__name__)

RECORD_SUFFIX = ".download.json"


PART_SUFFIX = ".part"


LOCK_SUFFIX = ".lock"


CHUNK = 1 << 20


_TRUE = {"1", "true", "yes", "on"}


def offline() -> bool:
    """Whether the network is off limits: ``VITKIT_OFFLINE`` or ``HF_HUB_OFFLINE`` is set to
    1/true/yes/on."""
    return any(
        os.environ.get(var, "").strip().lower() in _TRUE
        for var in ("VITKIT_OFFLINE", "HF_HUB_OFFLINE")
    )


def safe_parts(path: str, what: str) -> list[str]:
    """The segments of a relative ``/``-separated path; none may climb out of the cache."""
    parts = [unquote(p) for p in path.split("/") if p]
    if not parts or any(p in (".", "..") or "/" in p or "\\" in p or "\0" in p for p in parts):
        raise DownloadError(f"{what}: expected a path of file names, found {path!r}")
    return parts


def cached_path(url: str) -> Path:
    """Where ``fetch(url)`` keeps a URL's file: ``home()/weights/<host>/<path of the URL>``
    (``<host>`` with ``_`` for a port's ``:``; the query string is not part of it). Files of a
    named source use ``Source.cached_path`` instead, which does not change with a mirror."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1].replace(":", "_")
    # the host is a folder name: "..", "." or a separator would climb out of weights/
    bad_host = not parts.hostname or host in (".", "..") or any(c in host for c in "\\\0")
    if parts.scheme not in ("http", "https") or bad_host:
        raise DownloadError(f"expected an http(s) URL with a host name, found {url!r}")
    return home().joinpath("weights", host, *safe_parts(parts.path, url))


def sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def link_error(path: Path) -> DownloadError:
    try:
        target = os.readlink(path)
    except OSError:  # gone or replaced since: name it all the same
        target = "?"
    return DownloadError(
        f"{path} is a symbolic link (to {target}); vitkit does not read or write its cache "
        "through links: delete it (a copy of the file may be put there instead)"
    )


def lstat_no_link(path: Path) -> os.stat_result | None:
    """``path``'s own status, None if nothing is there; a ``DownloadError`` if it is a link."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(status.st_mode):
        raise link_error(path)
    return status


def digests(path: Path, *, md5: bool = False) -> tuple[str, str | None]:
    """The sha256 (and md5, if asked) of a file, as hex."""
    sha, *md = hex_digests(path, "sha256", *(["md5"] if md5 else []))
    return sha, (md[0] if md else None)


def read_record(path: Path) -> dict[str, Any] | None:
    record = sibling(path, RECORD_SUFFIX)
    if not record.exists():
        return None
    try:
        data = json.loads(record.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DownloadError(f"cannot read the download record {record}: {e}; delete it") from None
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str):
        raise DownloadError(f"{record}: expected a download record with a sha256; delete it")
    return data


def write_record(path: Path, record: dict[str, Any]) -> None:
    text = json.dumps(record, indent=2) + "\n"
    atomic_write(sibling(path, RECORD_SUFFIX), lambda p: p.write_text(text))


def _changed(path: Path, found: str, record: dict[str, Any]) -> DownloadError:
    return DownloadError(
        f"{path} changed since it was downloaded from {record.get('url', '?')}: its sha256 is "
        f"{found}, the download's was {record['sha256']}; delete it and "
        f"{sibling(path, RECORD_SUFFIX).name} to download it again"
    )


def verify(path: str | os.PathLike) -> None:
    """Check a file in the cache against the sha256 recorded when it was downloaded; raise a
    ``DownloadError`` saying how to fix it if it differs (``fetch`` checks a cached file itself:
    this is for a path kept from an earlier ``fetch``)."""
    path = Path(path)
    record = read_record(path)
    if record is None:
        raise DownloadError(f"{path} has no download record ({path.name}{RECORD_SUFFIX})")
    status = lstat_no_link(path)
    if status is None or not stat.S_ISREG(status.st_mode):
        raise DownloadError(f"{path} is recorded as downloaded but is missing: fetch it again")
    found, _ = digests(path)
    if found != record["sha256"]:
        raise _changed(path, found, record)


@dataclass(frozen=True)
class Expected:
    """What a file must be: what the caller gives (its size, or the range of sizes its listing
    allows, and its sha256) and what its first download recorded (``recorded``: the record's
    path and contents, when the file is to be downloaded again)."""

    sha256: str | None = None
    size: int | None = None
    size_range: tuple[int, int] | None = None
    recorded: tuple[Path, dict[str, Any]] | None = None

    def most(self) -> int | None:
        """The largest size the file may have (None: nothing bounds it)."""
        recorded = self.recorded[1].get("size") if self.recorded is not None else None
        bounds = [
            self.size,
            self.size_range[1] if self.size_range is not None else None,
            recorded if isinstance(recorded, int) else None,
        ]
        return min((b for b in bounds if b is not None), default=None)

    def problem(self, size: int, sha256: str | None = None) -> str | None:
        """Why a file of ``size`` bytes (and ``sha256``, once known) is not this one, or None."""
        if self.size is not None and size != self.size:
            return f"{size} bytes, expected {self.size}"
        if self.size_range is not None and not self.size_range[0] <= size <= self.size_range[1]:
            low, high = self.size_range
            return f"{size} bytes, expected {low} to {high} (its listed size)"
        if sha256 is not None and self.sha256 is not None and sha256 != self.sha256.lower():
            return f"sha256 {sha256}, expected {self.sha256.lower()}"
        if self.recorded is None:
            return None
        path, record = self.recorded
        if size != record.get("size", size):
            found, first = f"{size} bytes", f"{record['size']} bytes"
        elif sha256 is not None and sha256 != record["sha256"]:
            found, first = f"sha256 {sha256}", f"sha256 {record['sha256']}"
        else:
            return None
        return (
            f"{found}, but its first download ({record.get('recorded', '?')}) had {first}: the "
            f"file changed at its source (or a mirror serves another); delete {path} to accept "
            "the new one"
        )


def use_cached(dest: Path, url: str, expected: Expected) -> bool:
    """Whether ``dest`` holds the file: checked against its record (a download) or the expected
    size and sha256 (a file put there by hand, then recorded). A file that is there but wrong
    is an error, not a reason to download over it: it may be someone's."""
    status = lstat_no_link(dest)
    if status is None or not stat.S_ISREG(status.st_mode):
        return False
    record = read_record(dest)
    found_size = status.st_size
    if (problem := expected.problem(found_size)) is None:
        found, _ = digests(dest)
        if record is not None and found != record["sha256"]:
            raise _changed(dest, found, record)
        problem = expected.problem(found_size, found)
    if problem is not None:
        raise DownloadError(
            f"{dest} is not {url}'s file: {problem}; delete it to download it again"
        )
    if record is None:
        log.info("using %s, found in the cache (placed by hand); recording its sha256", dest)
        try:
            write_record(dest, new_record(url, found_size, found, how="found in the cache"))
        except OSError as e:  # a read-only cache still serves the file; it is just not recorded
            log.warning("cannot record %s: %s", dest, e)
    return True


def new_record(
    url: str, size: int, sha256: str, *, how: str, sent: Sent | None = None
) -> dict[str, Any]:
    """A download record: ``how`` is "downloaded" (``sent``: what the server said) or "found in
    the cache" (placed by hand)."""
    return {
        "url": url,
        "final_url": sent.final_url if sent else None,
        "size": size,
        "sha256": sha256,
        "validator": dict([sent.validator]) if sent and sent.validator else {},
        "publisher_hash": sent.publisher if sent else {},
        "how": how,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@dataclass(frozen=True)
class Sent:
    """What the server said about the file in the response that completed it."""

    total: int | None  # its size, if the server said
    publisher: dict[str, str]  # the publisher's hashes it reported
    validator: Validator | None  # the version the part holds (the first response's)
    final_url: str  # where the bytes came from, after redirects


# A version of a file as a response names it: (header, value), "ETag" or "Last-Modified".
Validator = tuple[str, str]
