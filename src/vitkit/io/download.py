"""Downloads into vitkit's cache: resumable, verified, atomic, once per machine.

``fetch(url)`` returns a local path: the cached file if it is still the one downloaded, else a
download over HTTPS (``urllib``, with a progress bar), checked (the expected size or size range
and sha256, the publisher's md5 in ``x-goog-hash``, what the first download recorded) and renamed
into place. ``hub_file(repo_id, filename)`` does the same through ``huggingface_hub`` (checking
the sha256 it does not); ``verify(path)`` re-checks a cached file.

The cache (``files.home()``): a named source's file ``F`` is ``weights/<source>/<path>``, a bare
URL's ``weights/<host>/<path>``. Beside it: ``F.download.json`` (URLs, size, sha256, validator;
it outlives ``F``, and a later download must match it), ``F.part`` and ``F.part.json`` (a
transfer cut by the network, resumed with ``Range``/``If-Range``, never spliced across versions),
``F.lock`` (a ``flock``: concurrent processes download once). A file put at ``F`` by hand is used
if it passes the checks; a link at ``F``, ``F.part`` or ``F.lock`` is refused. Environment:
``VITKIT_OFFLINE=1`` (or ``HF_HUB_OFFLINE=1``): the cache only; ``VITKIT_<SOURCE>_URL``: a mirror;
``VITKIT_REDIRECT_HOSTS``: other hosts a redirect may go to (never https to http).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import hashlib
import http.client
import json
import logging
import os
import re
import stat
import time
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import IO, Any, BinaryIO, NoReturn
from urllib.error import HTTPError
from urllib.parse import unquote, urlsplit
from urllib.request import HTTPRedirectHandler, Request, build_opener

from tqdm import tqdm

from ..errors import DownloadError, MissingExtraError
from ..files import DISK_ERRNOS, atomic_write, exclusive, home
from ..version import __version__

log = logging.getLogger(__name__)

RECORD_SUFFIX = ".download.json"
PART_SUFFIX = ".part"
LOCK_SUFFIX = ".lock"
TIMEOUT_S = 60  # per connection attempt and per read: a stalled server fails, a slow one does not
CHUNK = 1 << 20
RETRIES = 3  # resumes within one fetch, each only after a transfer that made progress
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SOURCE_NAME = re.compile(r"[a-z][a-z0-9_]*")
# what a validator may be to be sent back in If-Range: printable ASCII (no CR LF, nothing
# http.client would refuse to put in a header)
_PRINTABLE = re.compile(r"[\x20-\x7e]+")
_TRUE = {"1", "true", "yes", "on"}
REDIRECT_HOSTS_ENV = "VITKIT_REDIRECT_HOSTS"
# POSIX's flag to refuse a link as the last component of a path (ELOOP); Windows has none.
# Links in the cache are refused: whoever can write into the cache must not be able to make vitkit
# load or overwrite a file elsewhere.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def offline() -> bool:
    """Whether the network is off limits: ``VITKIT_OFFLINE`` or ``HF_HUB_OFFLINE`` is set to
    1/true/yes/on."""
    return any(
        os.environ.get(var, "").strip().lower() in _TRUE
        for var in ("VITKIT_OFFLINE", "HF_HUB_OFFLINE")
    )


def _safe_parts(path: str, what: str) -> list[str]:
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
    return home().joinpath("weights", host, *_safe_parts(parts.path, url))


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
        return f"{self.base_url()}/{'/'.join(_safe_parts(path, self.name))}"

    def cached_path(self, path: str) -> Path:
        """``home()/weights/<name>/<path>``, whichever base URL the file comes from."""
        # keyed by name, not host: a mirror keeps the cache, and a file downloaded by hand goes to
        # the same place whichever server it came from
        return home().joinpath("weights", self.name, *_safe_parts(path, self.name))

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


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _link_error(path: Path) -> DownloadError:
    try:
        target = os.readlink(path)
    except OSError:  # gone or replaced since: name it all the same
        target = "?"
    return DownloadError(
        f"{path} is a symbolic link (to {target}); vitkit does not read or write its cache "
        "through links: delete it (a copy of the file may be put there instead)"
    )


def _lstat(path: Path) -> os.stat_result | None:
    """``path``'s own status, None if nothing is there; a ``DownloadError`` if it is a link."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(status.st_mode):
        raise _link_error(path)
    return status


def _digests(path: Path, *, md5: bool = False) -> tuple[str, str | None]:
    """The sha256 (and md5, if asked) of a file, as hex."""
    sha = hashlib.sha256()
    md = hashlib.md5(usedforsecurity=False) if md5 else None
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            sha.update(block)
            if md is not None:
                md.update(block)
    return sha.hexdigest(), (md.hexdigest() if md is not None else None)


def _read_record(path: Path) -> dict[str, Any] | None:
    record = _sibling(path, RECORD_SUFFIX)
    if not record.exists():
        return None
    try:
        data = json.loads(record.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DownloadError(f"cannot read the download record {record}: {e}; delete it") from None
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str):
        raise DownloadError(f"{record}: expected a download record with a sha256; delete it")
    return data


def _write_record(path: Path, record: dict[str, Any]) -> None:
    text = json.dumps(record, indent=2) + "\n"
    atomic_write(_sibling(path, RECORD_SUFFIX), lambda p: p.write_text(text))


def _changed(path: Path, found: str, record: dict[str, Any]) -> DownloadError:
    return DownloadError(
        f"{path} changed since it was downloaded from {record.get('url', '?')}: its sha256 is "
        f"{found}, the download's was {record['sha256']}; delete it and "
        f"{_sibling(path, RECORD_SUFFIX).name} to download it again"
    )


def verify(path: str | os.PathLike) -> None:
    """Check a file in the cache against the sha256 recorded when it was downloaded; raise a
    ``DownloadError`` saying how to fix it if it differs (``fetch`` checks a cached file itself:
    this is for a path kept from an earlier ``fetch``)."""
    path = Path(path)
    record = _read_record(path)
    if record is None:
        raise DownloadError(f"{path} has no download record ({path.name}{RECORD_SUFFIX})")
    status = _lstat(path)
    if status is None or not stat.S_ISREG(status.st_mode):
        raise DownloadError(f"{path} is recorded as downloaded but is missing: fetch it again")
    found, _ = _digests(path)
    if found != record["sha256"]:
        raise _changed(path, found, record)


@dataclass(frozen=True)
class _Expected:
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


def _use_cached(dest: Path, url: str, expected: _Expected) -> bool:
    """Whether ``dest`` holds the file: checked against its record (a download) or the expected
    size and sha256 (a file put there by hand, then recorded). A file that is there but wrong
    is an error, not a reason to download over it: it may be someone's."""
    status = _lstat(dest)
    if status is None or not stat.S_ISREG(status.st_mode):
        return False
    record = _read_record(dest)
    found_size = status.st_size
    if (problem := expected.problem(found_size)) is None:
        found, _ = _digests(dest)
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
            _write_record(dest, _record(url, found_size, found, how="found in the cache"))
        except OSError as e:  # a read-only cache still serves the file; it is just not recorded
            log.warning("cannot record %s: %s", dest, e)
    return True


def _record(
    url: str, size: int, sha256: str, *, how: str, sent: _Sent | None = None
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


def fetch(
    url: str,
    *,
    dest: str | os.PathLike | None = None,
    sha256: str | None = None,
    size: int | None = None,
    size_range: tuple[int, int] | None = None,
    progress: bool = True,
) -> Path:
    """The local path of ``url``'s file: from the cache if it is there (and still what was
    downloaded), else downloaded into ``dest`` (default ``cached_path(url)``).

    ``sha256`` (hex) and ``size`` (bytes), when given, are what the file must be;
    ``size_range`` (low, high: bytes, inclusive) bounds a size known only as a listing's rounded
    figure. Sizes are checked against the server's Content-Length before the download (a body
    without one is stopped at the largest size allowed) and against the file after it. The publisher's md5 is checked too where the response reports one
    (``x-goog-hash``), and a file downloaded before (its record kept) must be the same again. An
    interrupted transfer is resumed from ``dest.part`` (here, up to ``RETRIES`` times while it
    makes progress, and by the next call). ``progress`` shows a progress bar on stderr.

    Raises ``DownloadError`` (one line) when offline or the server cannot be reached (naming the
    path a hand-downloaded copy is read from), on an HTTP error, a redirect refused, a full disk,
    or a file that fails a check (then nothing of it is left in the cache)."""
    dest = Path(dest) if dest is not None else cached_path(url)
    expected = _Expected(sha256=sha256, size=size, size_range=size_range)
    if _use_cached(dest, url, expected):
        return dest
    if offline():
        raise DownloadError(
            f"{url} is not in the cache and offline mode is on (VITKIT_OFFLINE or HF_HUB_OFFLINE); "
            f"a copy downloaded by hand is read from {dest}"
        )
    # lock files stay in place, empty: removing one another process may hold is a race
    lock = _sibling(dest, LOCK_SUFFIX)
    with contextlib.ExitStack() as stack:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(exclusive(lock, f"downloading {dest}"))
        except OSError as e:
            if e.errno == errno.ELOOP and lock.is_symlink():  # exclusive does not follow it
                raise _link_error(lock) from None
            raise DownloadError(
                f"cannot write to the cache folder {dest.parent}: {e.strerror}"
            ) from None
        if _use_cached(dest, url, expected):  # another process downloaded it while we waited
            return dest
        if (record := _read_record(dest)) is not None:  # the file was deleted: it must come back
            expected = dataclasses.replace(
                expected, recorded=(_sibling(dest, RECORD_SUFFIX), record)
            )
        _download(url, dest, expected, progress=progress)
    return dest


@dataclass(frozen=True)
class _Sent:
    """What the server said about the file in the response that completed it."""

    total: int | None  # its size, if the server said
    publisher: dict[str, str]  # the publisher's hashes it reported
    validator: _Validator | None  # the version the part holds (the first response's)
    final_url: str  # where the bytes came from, after redirects


class _InterruptedError(Exception):
    """The transfer stopped early; the ``.part`` holds what arrived."""

    def __init__(self, reason: str, received: int) -> None:
        super().__init__(reason)
        self.received = received


class _RestartError(Exception):
    """The server cannot continue our ``.part`` (416, a range we did not ask for, or a file that
    is no longer the one the part began)."""


# A version of a file as a response names it: (header, value), "ETag" or "Last-Modified".
_Validator = tuple[str, str]


def _validator(headers: Message) -> _Validator | None:
    """What names this version of the file strongly enough for ``If-Range`` (RFC 9110 13.1.5):
    the ``ETag`` unless it is weak (``W/...``), else the ``Last-Modified`` date."""
    etag = (headers.get("ETag") or "").strip()
    if _PRINTABLE.fullmatch(etag) and not etag.startswith("W/"):
        return "ETag", etag
    modified = (headers.get("Last-Modified") or "").strip()
    return ("Last-Modified", modified) if _PRINTABLE.fullmatch(modified) else None


def _validator_file(part: Path) -> Path:
    """``F.part.json``: which version of the file ``F.part`` holds the start of."""
    return _sibling(part, ".json")


def _saved_validator(part: Path) -> _Validator | None:
    """The validator saved beside ``part``; None if there is none, it cannot be read, or it is
    not printable ASCII (it goes back to the server as a header)."""
    try:
        saved = json.loads(_validator_file(part).read_text())
        header, value = saved["header"], saved["value"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    if header not in ("ETag", "Last-Modified") or not isinstance(value, str):
        return None
    return (header, value) if _PRINTABLE.fullmatch(value) else None


def _save_validator(part: Path, validator: _Validator | None) -> None:
    path = _validator_file(part)
    if validator is None:
        path.unlink(missing_ok=True)
        return
    text = json.dumps({"header": validator[0], "value": validator[1]}) + "\n"
    atomic_write(path, lambda p: p.write_text(text))


def _discard(part: Path) -> None:
    """Delete ``part`` and the validator saved beside it."""
    part.unlink(missing_ok=True)
    _validator_file(part).unlink(missing_ok=True)


def _resumable(url: str, part: Path, most: int | None) -> tuple[int, _Validator | None]:
    """Where to continue ``part`` from, and the validator of what it holds: (0, None) to start
    afresh, after deleting a part that cannot be continued safely (``most``: the largest size
    the file may have)."""
    offset = status.st_size if (status := _lstat(part)) else 0
    if not offset:
        return 0, None
    if most is not None and offset > most:  # not a prefix of this file
        _discard(part)
        return 0, None
    validator = _saved_validator(part)
    if validator is None:  # which version it is the start of is unknown: a resume could splice
        log.warning(
            "%s: %s has no ETag or Last-Modified saved (readable, printable ASCII) to resume it "
            "against; downloading the file from the start",
            url,
            part.name,
        )
        _discard(part)
        return 0, None
    return offset, validator


def _download(url: str, dest: Path, expected: _Expected, *, progress: bool) -> None:
    part = _sibling(dest, PART_SUFFIX)
    resumes = restarts = 0
    while True:
        offset, validator = _resumable(url, part, expected.most())
        try:
            sent = _transfer(url, dest, part, offset, validator, expected, progress=progress)
            break
        except _RestartError as e:
            _discard(part)
            restarts += 1
            if restarts > 1:
                raise DownloadError(f"cannot download {url}: {e}") from None
            log.warning("%s: %s; downloading it from the start", url, e)
        except _InterruptedError as e:
            if e.received == 0 or resumes >= RETRIES:
                have = part.stat().st_size if part.exists() else 0
                raise DownloadError(
                    f"the download of {url} was interrupted ({e}) with {have} bytes in {part}; "
                    "run again to resume it"
                ) from None
            resumes += 1
            log.warning("the download of %s was interrupted (%s); resuming", url, e)
    _check_and_place(url, dest, part, expected, sent)


def _unreachable(url: str, dest: Path, reason: object) -> DownloadError:
    return DownloadError(
        f"cannot reach {url} ({reason}); a copy downloaded by hand is read from {dest}"
    )


def _write_failed(part: Path, e: OSError, total: int | None) -> NoReturn:
    """Delete what was written of ``part`` (it is suspect) and raise one line."""
    _discard(part)
    fix = ""
    if e.errno in DISK_ERRNOS:
        need = f" for {total} bytes" if total is not None else ""
        fix = f"; make room{need}, or set VITKIT_HOME to a disk that has it"
    raise DownloadError(f"cannot write {part}: {e.strerror}{fix}") from None


def _transfer(
    url: str,
    dest: Path,
    part: Path,
    offset: int,
    validator: _Validator | None,
    expected: _Expected,
    *,
    progress: bool,
) -> _Sent:
    """One request for ``url`` from byte ``offset`` (of the version ``validator`` names),
    appended to ``part``; returns what the server said about the file. A size that ``expected``
    rules out (the server's Content-Length) is refused before anything is written; a body
    without one is stopped at the largest size ``expected`` allows."""
    headers = {"User-Agent": f"vitkit/{__version__}", "Accept-Encoding": "identity"}
    if offset:
        assert validator is not None, "a part is resumed only against its validator"
        headers["Range"] = f"bytes={offset}-"
        headers["If-Range"] = validator[1]
    opener = build_opener(_CheckedRedirects(url))
    try:
        response = opener.open(Request(url, headers=headers), timeout=TIMEOUT_S)
    except HTTPError as e:
        if e.code == 416 and offset:
            raise _RestartError(f"the server cannot resume from byte {offset} (HTTP 416)") from None
        raise DownloadError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except DownloadError:  # a redirect refused
        raise
    except (OSError, http.client.HTTPException) as e:  # URLError is an OSError
        raise _unreachable(url, dest, getattr(e, "reason", None) or e) from None
    with response:
        total = _int(response.headers.get("Content-Length"))
        if offset and response.status == 206:
            content_range = response.headers.get("Content-Range")
            start, total = _content_range(content_range)
            if start != offset:
                raise _RestartError(
                    f"asked for bytes from {offset}, the server sent Content-Range {content_range!r}"
                )
            _same_version(validator, response.headers)
        elif offset:  # 200: the file changed since (If-Range), or the server does not do Range
            log.warning(
                "%s: the server sent the whole file, not the rest of %s (it changed since, or "
                "the server does not resume); it replaces the part",
                url,
                part.name,
            )
            offset = 0
        if total is not None and (problem := expected.problem(total)) is not None:
            _discard(part)
            raise DownloadError(
                f"{url} is not the file expected: the server sends {problem}; nothing was downloaded"
            )
        sent = _Sent(
            total,
            _publisher_hashes(response.headers),
            _validator(response.headers) if not offset else validator,
            response.geturl(),
        )
        f = _open_part(part, append=bool(offset))
        received, most, over = 0, expected.most(), False
        bar = tqdm(
            total=total,
            initial=offset,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=dest.name,
            disable=not progress,
            dynamic_ncols=True,
        )
        try:
            if not offset:  # what the part now holds the start of, for the next resume
                _save_validator(part, sent.validator)
            while True:
                # one byte past the bound at most: what tells a body too long from one that fits
                room = CHUNK if most is None else min(CHUNK, most - offset - received + 1)
                try:
                    chunk = response.read(room)
                except (OSError, http.client.HTTPException) as e:
                    raise _InterruptedError(str(e) or type(e).__name__, received) from None
                if not chunk:
                    break
                if most is not None and offset + received + len(chunk) > most:
                    over = True
                    break
                f.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
            f.flush()
            os.fsync(f.fileno())
        except OSError as e:  # only the file's: the network's became _InterruptedError
            with contextlib.suppress(OSError):
                f.close()
            _write_failed(part, e, total)
        finally:
            bar.close()
            with contextlib.suppress(OSError):
                f.close()
    if over:
        _discard(part)
        raise DownloadError(
            f"{url} is not the file expected: the server sends more than {most:,} bytes, the "
            "most it may have, with no Content-Length to check first; the download was stopped "
            "there and deleted"
        )
    if total is not None and offset + received < total:  # closed early without an error
        raise _InterruptedError(f"{offset + received} of {total} bytes", received)
    return sent


def _host(url: str) -> str:
    """A URL's ``host[:port]``, in lower case."""
    return urlsplit(url).netloc.rsplit("@", 1)[-1].lower()


def _redirect_refusal(asked: str, old: str, new: str) -> str | None:
    """Why a download of ``asked`` is not redirected from ``old`` to ``new`` (one line), or
    None if it may be: to a host other than ``asked``'s only if ``VITKIT_REDIRECT_HOSTS``
    lists it, and from https to http never."""
    scheme = urlsplit(new).scheme
    if scheme not in ("http", "https"):
        return f"refusing the redirect of {asked} to {new}: expected an http(s) URL"
    if urlsplit(old).scheme == "https" and scheme == "http":
        return (
            f"refusing the redirect of {asked} from https to http ({old} -> {new}): the file would "
            "arrive unprotected; give an http:// URL (e.g. a mirror's) if plain http is meant"
        )
    source, target = _host(asked), _host(new)
    allowed = {h.strip().lower() for h in os.environ.get(REDIRECT_HOSTS_ENV, "").split(",")}
    if target == source or allowed & {"*", target, urlsplit(new).hostname}:
        return None
    return (
        f"refusing the redirect of {asked} from {source} to another host, {target} ({new}): set "
        f"{REDIRECT_HOSTS_ENV}={target} to allow it"
    )


class _CheckedRedirects(HTTPRedirectHandler):
    """urllib's redirects, each one first passed by ``_redirect_refusal``."""

    def __init__(self, asked: str) -> None:
        super().__init__()
        self.asked = asked

    def redirect_request(
        self,
        req: Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> Request | None:
        refusal = _redirect_refusal(self.asked, req.full_url, newurl)
        if refusal is not None:
            fp.close()
            raise DownloadError(refusal)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _same_version(validator: _Validator | None, headers: Message) -> None:
    """A ``_RestartError`` unless a 206 names the part's version: a server that ignores
    ``If-Range`` sends the new file's range, and appending it would splice two files; one that
    names no version may be doing just that."""
    assert validator is not None, "a part is resumed only against its validator"
    header, value = validator
    now = (headers.get(header) or "").strip()
    if not now:
        raise _RestartError(
            f"the server's answer to the resume names no version of the file (no {header}), so "
            "it may be another version's bytes"
        )
    if now != value:
        raise _RestartError(
            f"the file changed since the part was begun ({header} {value} -> {now})"
        )


def _open_part(part: Path, *, append: bool) -> BinaryIO:
    """``part`` opened to append to or to write afresh, never through a link planted there."""
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        return os.fdopen(os.open(part, flags, 0o666), "ab" if append else "wb")
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _link_error(part) from None
        raise DownloadError(f"cannot write {part}: {e.strerror}") from None


def _check_and_place(url: str, dest: Path, part: Path, expected: _Expected, sent: _Sent) -> None:
    """Check the whole of ``part`` (a resumed one too), then record it and rename it to ``dest``;
    a file that fails a check is deleted."""

    def refuse(what: str) -> NoReturn:
        _discard(part)
        raise DownloadError(f"the download of {url} was deleted: {what}")

    found_size = part.stat().st_size
    if sent.total is not None and found_size != sent.total:
        refuse(f"{found_size} bytes, expected {sent.total} (Content-Length)")
    if (problem := expected.problem(found_size)) is not None:
        refuse(problem)
    found, md5 = _digests(part, md5="md5" in sent.publisher)
    if (problem := expected.problem(found_size, found)) is not None:
        refuse(problem)
    if md5 is not None and md5 != sent.publisher["md5"]:
        refuse(f"md5 {md5}, the publisher's (x-goog-hash) is {sent.publisher['md5']}")
    # The record first: a file in place without one would pass for a hand-placed file.
    try:
        _write_record(dest, _record(url, found_size, found, how="downloaded", sent=sent))
        os.replace(part, dest)
    except OSError as e:
        _write_failed(part, e, sent.total)
    with contextlib.suppress(OSError):  # a validator left behind is replaced with the next part
        _validator_file(part).unlink(missing_ok=True)
    log.info("downloaded %s to %s (sha256 %s)", url, dest, found)


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _content_range(text: str | None) -> tuple[int | None, int | None]:
    """``bytes START-END/TOTAL`` -> (START, TOTAL); None for what is missing or ``*``."""
    match = re.fullmatch(r"\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*", text or "")
    if match is None:
        return None, None
    return int(match[1]), _int(match[2])


def _publisher_hashes(headers: Message) -> dict[str, str]:
    """The hashes a publisher reports, as hex: Google Cloud Storage's ``x-goog-hash`` md5 (sent
    as one header per hash or comma-joined, base64 of the digest; for the whole object, also in
    answer to a Range request)."""
    # md5 only: crc32c is not in the standard library; a composite object has no md5, and then
    # only the sha256 recorded or expected applies
    found: dict[str, str] = {}
    for value in headers.get_all("x-goog-hash") or []:
        for item in value.split(","):
            name, _, encoded = item.strip().partition("=")
            if name.lower() == "md5":
                try:
                    found["md5"] = base64.b64decode(encoded, validate=True).hex()
                except ValueError:
                    log.warning("ignoring an unreadable x-goog-hash md5: %r", encoded)
    return found


def hub_file(repo_id: str, filename: str, *, revision: str | None = None) -> Path:
    """A file of a Hugging Face Hub model repository, through ``huggingface_hub.hf_hub_download``
    and its cache (``HF_HOME``, ``HF_TOKEN``, ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` apply as
    there; ``VITKIT_OFFLINE=1`` too).

    The file's sha256 is checked against its LFS ETag (the name of its blob in the cache) at
    every call: a fresh download that does not match is deleted, a cached file that no longer
    matches is an error saying which file to delete. Errors (offline, no such repository,
    revision or file, a gated repository) are one-line ``DownloadError``s."""
    try:
        import huggingface_hub
        from huggingface_hub import constants
        from huggingface_hub import errors as hf
    except ImportError:
        raise MissingExtraError(
            "downloading from the Hugging Face Hub", "hub", "huggingface_hub"
        ) from None
    where = f"{repo_id}/{filename}" + (f"@{revision}" if revision else "")
    no_network = offline()
    try:
        before = huggingface_hub.try_to_load_from_cache(repo_id, filename, revision=revision)
        path = Path(
            huggingface_hub.hf_hub_download(
                repo_id, filename, revision=revision, local_files_only=no_network
            )
        )
    except hf.GatedRepoError:
        raise DownloadError(
            f"{repo_id} is a gated repository: accept its terms at {constants.ENDPOINT}/{repo_id} "
            "with your account and set HF_TOKEN (or run `hf auth login`)"
        ) from None
    except hf.RepositoryNotFoundError:
        raise DownloadError(
            f"no repository {repo_id} on the Hugging Face Hub ({constants.ENDPOINT}), or it is "
            "private: check the name, or set HF_TOKEN"
        ) from None
    except hf.RevisionNotFoundError:
        raise DownloadError(
            f"{repo_id} on the Hugging Face Hub has no revision {revision or 'main'}"
        ) from None
    except hf.LocalEntryNotFoundError as e:
        if no_network or constants.HF_HUB_OFFLINE:
            why = "offline mode is on (VITKIT_OFFLINE or HF_HUB_OFFLINE)"
        else:  # huggingface_hub raises it from what its request met
            cause = f" ({_brief(e.__cause__)})" if e.__cause__ is not None else ""
            why = f"the Hub at {constants.ENDPOINT} cannot be reached{cause}"
        raise DownloadError(
            f"{where} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {why}; "
            f"`hf download {repo_id} {filename}` on a machine that reaches the Hub fills such a "
            "cache: copy it into this one, or point HF_HOME at it"
        ) from None
    except hf.EntryNotFoundError:
        raise DownloadError(
            f"{repo_id} on the Hugging Face Hub has no file {filename}"
            + (f" at revision {revision}" if revision else "")
        ) from None
    except hf.HFValidationError as e:
        raise DownloadError(f"not a Hugging Face Hub file: {where} ({_brief(e)})") from None
    except OSError as e:  # HfHubHTTPError (an HTTP error) included
        raise DownloadError(
            f"downloading {where} from the Hugging Face Hub failed: {_brief(e)}"
        ) from None
    # Fresh: not the file that was in the cache before the call (none, or another revision's).
    fresh = not (isinstance(before, str) and os.path.realpath(before) == os.path.realpath(path))
    _check_hub_file(path, where, fresh=fresh)
    return path


def _brief(e: BaseException) -> str:
    """An error's message in one line: its first two non-empty lines (huggingface_hub's start
    with the status, then what was not found)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(e).__name__


def _check_hub_file(path: Path, where: str, *, fresh: bool) -> None:
    """Check a Hub file against its LFS ETag (its sha256), which names its blob in the cache
    (``snapshots/<commit>/<file>`` links to ``blobs/<etag>``). Files kept in git have a git-sha1
    ETag: nothing to check. Without symlinks (``HF_HUB_DISABLE_SYMLINKS``) the file is the blob,
    its ETag is not on disk, and only the size ``huggingface_hub`` checks applies."""
    if not path.is_symlink():
        return
    blob = path.resolve()
    etag = blob.name
    if not _SHA256.fullmatch(etag):
        return
    found, _ = _digests(blob)
    if found == etag:
        return
    if fresh:
        blob.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        raise DownloadError(
            f"the download of {where} is corrupted: sha256 {found}, the Hub's ETag is {etag}; "
            "it was deleted, run again to download it afresh"
        )
    raise DownloadError(
        f"{path} changed since it was downloaded: its sha256 is {found}, the Hub's ETag is "
        f"{etag}; delete {blob} to download it again"
    )
