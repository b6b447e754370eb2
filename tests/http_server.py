"""A local HTTP server for tests that download: files the test makes, served on 127.0.0.1.

``FileServer`` serves a dict of path -> bytes with what downloads meet in the wild: Range requests
(206 + Content-Range, 416 past the end) and the validators that make them safe (ETag,
Last-Modified, If-Range), redirects, extra headers per path (a publisher's ``x-goog-hash``),
responses cut after N bytes (an interrupted transfer), bodies without a Content-Length (ended by
closing the connection), a delay before each body (so that processes overlap), a log of every
request and of how much of each body went out, and HTTPS (``tls=True``, with a certificate that a
client trusts through ``SSL_CERT_FILE=TLS_CERT``). ``FakeHub`` adds the Hugging Face Hub's
``/{repo_id}/resolve/{revision}/{filename}`` for ``HF_ENDPOINT``. Nothing leaves the machine::

    with FileServer({"/models/w.npz": data}) as server:
        path = fetch(server.url("/models/w.npz"))
        assert [r.method for r in server.requests] == ["GET"]
"""

from __future__ import annotations

import base64
import hashlib
import re
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

Headers = list[tuple[str, str]]
# A self-signed certificate for 127.0.0.1 and its key, for tests only (valid until 2126); made by
# openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500
#   -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1, the key appended to the certificate.
TLS_CERT = Path(__file__).parent / "data" / "tls" / "127.0.0.1.pem"
_PIECE = 1 << 16  # a body is written in pieces, counted as they go out (FileServer.sent)


@dataclass(frozen=True)
class Seen:
    """A request as the server saw it (header names in lower case)."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Reply:
    status: int
    headers: Headers = field(default_factory=list)
    body: bytes = b""


def goog_hash(data: bytes) -> Headers:
    """The ``x-goog-hash`` headers Google Cloud Storage sends for ``data``: one per hash, base64
    of the digest. The crc32c is a placeholder (the standard library has no crc32c, and vitkit
    reads only the md5)."""
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    return [("x-goog-hash", "crc32c=AAAAAA=="), ("x-goog-hash", f"md5={md5}")]


class FileServer:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 (a free port) serving ``files`` (path -> bytes),
    started at construction, in a daemon thread, until ``close()``.

    Attributes tests change as they go: ``files``; ``headers`` (path -> extra headers);
    ``cuts`` (path -> for each of the next GETs of it, how many body bytes to send before
    hanging up); ``ranges`` (False: ignore Range and answer 200); ``validators`` (what each
    response names its file's version with, as Google Cloud Storage does: ``"etag"``, a strong
    ``ETag`` of the bytes; ``"weak-etag"``, a weak one, ``W/"..."``; ``"last-modified"``, a date
    that changes with the bytes); ``if_range`` (False: ignore If-Range, answer a Range request
    with the current file's range even when its validator no longer matches);
    ``range_validators`` (False: a 206 names no version, neither ETag nor Last-Modified);
    ``lengths`` (False: no Content-Length, the body ends when the connection closes, as HTTP/1.0
    allows); ``moved`` (path -> URL: answer 302 to it); ``delay`` (seconds to wait before each
    body); ``requests`` (every request, in order); ``sent`` (the body bytes each GET's response
    put on the wire before it ended or the client hung up, in the order they ended)."""

    def __init__(self, files: Mapping[str, bytes] | None = None, *, tls: bool = False) -> None:
        self.files: dict[str, bytes] = dict(files or {})
        self.headers: dict[str, Headers] = {}
        self.cuts: dict[str, list[int]] = {}
        self.ranges = True
        self.validators = ["etag", "last-modified"]
        self.if_range = True
        self.range_validators = True
        self.lengths = True
        self.moved: dict[str, str] = {}
        self.delay = 0.0
        self.requests: list[Seen] = []
        self.sent: list[int] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.scheme = "https" if tls else "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(TLS_CERT)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        # a short poll: close() waits for it
        serve = lambda: self._httpd.serve_forever(poll_interval=0.02)  # noqa: E731
        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{self.scheme}://{host!s}:{port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def versions(self, data: bytes) -> Headers:
        """The validators of ``data`` that ``validators`` asks for."""
        md5 = hashlib.md5(data).hexdigest()
        named = {
            "etag": ("ETag", f'"{md5}"'),
            "weak-etag": ("ETag", f'W/"{md5}"'),
            # a date derived from the bytes: another file is another date
            "last-modified": ("Last-Modified", formatdate(1.6e9 + int(md5[:6], 16), usegmt=True)),
        }
        return [named[v] for v in self.validators]

    def gets(self, path: str | None = None) -> list[Seen]:
        """The GET requests (of ``path``, if given)."""
        return [r for r in self.requests if r.method == "GET" and path in (None, r.path)]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reply(self, method: str, path: str, headers: Mapping[str, str]) -> Reply:
        """The answer to a request: the file at ``path``, whole or the range asked for (whole
        if an If-Range names another version of it)."""
        if path in self.moved:
            return Reply(302, [("Location", self.moved[path])])
        data = self.files.get(path)
        if data is None:
            return Reply(404, body=b"not found")
        version = self.versions(data)
        extra = [*self.headers.get(path, []), *version]
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", headers.get("range", ""))
        # If-Range compares strongly: only a strong ETag or a date that is this version's matches
        strong = [value for name, value in version if not value.startswith("W/")]
        asked = headers.get("if-range")
        changed = self.if_range and asked is not None and asked not in strong
        if match is None or not self.ranges or changed:
            return Reply(200, [*extra, ("Accept-Ranges", "bytes")], data)
        start = int(match[1])
        end = min(int(match[2]) if match[2] else len(data) - 1, len(data) - 1)
        if start >= len(data):
            return Reply(416, [("Content-Range", f"bytes */{len(data)}")])
        content_range = ("Content-Range", f"bytes {start}-{end}/{len(data)}")
        if not self.range_validators:
            extra = [(name, value) for name, value in extra if (name, value) not in version]
        return Reply(206, [*extra, content_range], data[start : end + 1])


def _handler(server: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(head=False)

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def _answer(self, *, head: bool) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.requests.append(Seen(self.command, self.path, headers))
            reply = server.reply(self.command, unquote(self.path), headers)
            body = reply.body
            with server._lock:  # one response consumes one cut
                cuts = server.cuts.get(unquote(self.path))
                cut = cuts.pop(0) if cuts and not head else None
            self.send_response(reply.status)
            for name, value in reply.headers:
                self.send_header(name, value)
            if server.lengths:
                self.send_header("Content-Length", str(len(body)))  # a cut body sends less
            self.end_headers()
            if head:
                return
            if server.delay:
                time.sleep(server.delay)
            self.close_connection = True
            sent, end = 0, len(body) if cut is None else min(cut, len(body))
            try:
                for start in range(0, end, _PIECE):
                    piece = body[start : min(start + _PIECE, end)]
                    self.wfile.write(piece)
                    sent += len(piece)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client hung up
                pass
            with server._lock:
                server.sent.append(sent)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read .requests
            pass

    return Handler


class FakeHub(FileServer):
    """A Hugging Face Hub endpoint for ``HF_ENDPOINT``, answering
    ``HEAD``/``GET /{repo_id}/resolve/{revision}/{filename}`` as ``huggingface_hub``'s
    ``get_hf_file_metadata`` and ``http_get`` read it (its file_download.py):

    - an LFS file: 302 to ``cdn`` (a second server, so another origin, which the client does not
      follow for the HEAD: the metadata is on the redirect) with ``X-Repo-Commit``,
      ``X-Linked-Etag: "<sha256>"``, ``X-Linked-Size`` and ``Location``; the GET goes to ``cdn``;
    - a file kept in git: 200 with ``X-Repo-Commit``, ``ETag: "<git sha1>"`` and the body;
    - errors with the Hub's ``X-Error-Code``: ``RepoNotFound`` (401, as the Hub answers an
      anonymous client), ``GatedRepo`` (403, repositories in ``gated``), ``RevisionNotFound``
      and ``EntryNotFound`` (404).

    ``add`` puts a file in a repository at a revision; ``revision`` may also be the commit hash
    that revision resolves to."""

    def __init__(self) -> None:
        super().__init__()
        self.cdn = FileServer()
        self.repos: dict[str, dict[str, dict[str, tuple[bytes, bool]]]] = {}
        self.gated: set[str] = set()

    def close(self) -> None:
        self.cdn.close()
        super().close()

    @staticmethod
    def commit(repo_id: str, revision: str) -> str:
        return hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()

    def add(
        self, repo_id: str, filename: str, data: bytes, *, revision: str = "main", lfs: bool = True
    ) -> str:
        """Put ``data`` at ``repo_id/filename`` on ``revision``; returns its sha256."""
        sha256 = hashlib.sha256(data).hexdigest()
        self.repos.setdefault(repo_id, {}).setdefault(revision, {})[filename] = (data, lfs)
        if lfs:
            self.cdn.files[f"/{sha256}"] = data
        return sha256

    def reply(self, method: str, path: str, headers: Mapping[str, str]) -> Reply:
        match = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path)
        if match is None:
            return Reply(404, body=b"not a resolve URL")
        repo_id, revision, filename = match.groups()
        if repo_id not in self.repos:
            return Reply(401, [("X-Error-Code", "RepoNotFound")])
        if repo_id in self.gated and "authorization" not in headers:
            return Reply(403, [("X-Error-Code", "GatedRepo")])
        by_commit = {self.commit(repo_id, r): r for r in self.repos[repo_id]}
        revision = by_commit.get(revision, revision)
        if revision not in self.repos[repo_id]:
            return Reply(404, [("X-Error-Code", "RevisionNotFound")])
        commit = ("X-Repo-Commit", self.commit(repo_id, revision))
        if filename not in self.repos[repo_id][revision]:
            return Reply(404, [("X-Error-Code", "EntryNotFound"), commit])
        data, lfs = self.repos[repo_id][revision][filename]
        if not lfs:
            git_sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            return Reply(200, [commit, ("ETag", f'"{git_sha1}"')], data)
        sha256 = hashlib.sha256(data).hexdigest()
        linked = [
            commit,
            ("X-Linked-Etag", f'"{sha256}"'),
            ("X-Linked-Size", str(len(data))),
            ("Location", self.cdn.url(f"/{sha256}")),
        ]
        return Reply(302, linked)
