"""``fetch(url)``: a file from the cache, or downloaded over HTTPS (``urllib``, with a progress
bar), checked and renamed into place.

Checked: the expected size or size range and sha256, the publisher's md5 in ``x-goog-hash``, what
the first download recorded. A transfer cut by the network is resumed with ``Range``/``If-Range``
from ``F.part``, never spliced across versions (the validator saved in ``F.part.json``). Redirects
stay on the host asked (``VITKIT_REDIRECT_HOSTS``: others allowed; never https to http).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import http.client
import json
import logging
import os
import re
from email.message import Message
from pathlib import Path
from typing import IO, BinaryIO, NoReturn
from urllib.error import HTTPError
from urllib.parse import urlsplit
from urllib.request import HTTPRedirectHandler, Request, build_opener

from tqdm import tqdm

from ...errors import DownloadError
from ...files import DISK_ERRNOS, atomic_write, exclusive
from ...version import __version__
from .cache import (
    CHUNK,
    LOCK_SUFFIX,
    PART_SUFFIX,
    RECORD_SUFFIX,
    Expected,
    Sent,
    Validator,
    cached_path,
    digests,
    link_error,
    lstat_no_link,
    new_record,
    offline,
    read_record,
    sibling,
    use_cached,
    write_record,
)

log = logging.getLogger(__name__)


TIMEOUT_S = 60  # per connection attempt and per read: a stalled server fails, a slow one does not


RETRIES = 3  # resumes within one fetch, each only after a transfer that made progress


# what a validator may be to be sent back in If-Range: printable ASCII (no CR LF, nothing
# http.client would refuse to put in a header)
_PRINTABLE = re.compile(r"[\x20-\x7e]+")


REDIRECT_HOSTS_ENV = "VITKIT_REDIRECT_HOSTS"


# POSIX's flag to refuse a link as the last component of a path (ELOOP); Windows has none.
# Links in the cache are refused: whoever can write into the cache must not be able to make vitkit
# load or overwrite a file elsewhere.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


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
    expected = Expected(sha256=sha256, size=size, size_range=size_range)
    if use_cached(dest, url, expected):
        return dest
    if offline():
        raise DownloadError(
            f"{url} is not in the cache and offline mode is on (VITKIT_OFFLINE or HF_HUB_OFFLINE); "
            f"a copy downloaded by hand is read from {dest}"
        )
    # lock files stay in place, empty: removing one another process may hold is a race
    lock = sibling(dest, LOCK_SUFFIX)
    with contextlib.ExitStack() as stack:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(exclusive(lock, f"downloading {dest}"))
        except OSError as e:
            if e.errno == errno.ELOOP and lock.is_symlink():  # exclusive does not follow it
                raise link_error(lock) from None
            raise DownloadError(
                f"cannot write to the cache folder {dest.parent}: {e.strerror}"
            ) from None
        if use_cached(dest, url, expected):  # another process downloaded it while we waited
            return dest
        if (record := read_record(dest)) is not None:  # the file was deleted: it must come back
            expected = dataclasses.replace(
                expected, recorded=(sibling(dest, RECORD_SUFFIX), record)
            )
        _download(url, dest, expected, progress=progress)
    return dest


class _InterruptedError(Exception):
    """The transfer stopped early; the ``.part`` holds what arrived."""

    def __init__(self, reason: str, received: int) -> None:
        super().__init__(reason)
        self.received = received


class _RestartError(Exception):
    """The server cannot continue our ``.part`` (416, a range we did not ask for, or a file that
    is no longer the one the part began)."""


def _validator(headers: Message) -> Validator | None:
    """What names this version of the file strongly enough for ``If-Range`` (RFC 9110 13.1.5):
    the ``ETag`` unless it is weak (``W/...``), else the ``Last-Modified`` date."""
    etag = (headers.get("ETag") or "").strip()
    if _PRINTABLE.fullmatch(etag) and not etag.startswith("W/"):
        return "ETag", etag
    modified = (headers.get("Last-Modified") or "").strip()
    return ("Last-Modified", modified) if _PRINTABLE.fullmatch(modified) else None


def _validator_file(part: Path) -> Path:
    """``F.part.json``: which version of the file ``F.part`` holds the start of."""
    return sibling(part, ".json")


def _saved_validator(part: Path) -> Validator | None:
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


def _save_validator(part: Path, validator: Validator | None) -> None:
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


def _resumable(url: str, part: Path, most: int | None) -> tuple[int, Validator | None]:
    """Where to continue ``part`` from, and the validator of what it holds: (0, None) to start
    afresh, after deleting a part that cannot be continued safely (``most``: the largest size
    the file may have)."""
    offset = status.st_size if (status := lstat_no_link(part)) else 0
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


def _download(url: str, dest: Path, expected: Expected, *, progress: bool) -> None:
    part = sibling(dest, PART_SUFFIX)
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
    validator: Validator | None,
    expected: Expected,
    *,
    progress: bool,
) -> Sent:
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
        sent = Sent(
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


def _same_version(validator: Validator | None, headers: Message) -> None:
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
            raise link_error(part) from None
        raise DownloadError(f"cannot write {part}: {e.strerror}") from None


def _check_and_place(url: str, dest: Path, part: Path, expected: Expected, sent: Sent) -> None:
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
    found, md5 = digests(part, md5="md5" in sent.publisher)
    if (problem := expected.problem(found_size, found)) is not None:
        refuse(problem)
    if md5 is not None and md5 != sent.publisher["md5"]:
        refuse(f"md5 {md5}, the publisher's (x-goog-hash) is {sent.publisher['md5']}")
    # The record first: a file in place without one would pass for a hand-placed file.
    try:
        write_record(dest, new_record(url, found_size, found, how="downloaded", sent=sent))
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
