"""Downloads (vitkit.io.download) against a local HTTP server: a download, a cache hit, an
interrupted transfer resumed, corrupted files refused, offline and unreachable, two processes at
once, a full disk, a changed file, a hand-placed file, mirrors, and the Hugging Face Hub through
huggingface_hub pointed at a fake endpoint (HF_ENDPOINT). Nothing leaves 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from http_server import TLS_CERT, FakeHub, FileServer, goog_hash
from vitkit.errors import DownloadError
from vitkit.files import home
from vitkit.io.download import Source, cached_path, fetch, hub_file, verify

# Seeded: the spawned processes import this module too and must see the same bytes.
DATA = random.Random(0).randbytes(300_000)
SHA = hashlib.sha256(DATA).hexdigest()
PATH = "/models/w.npz"
CHANGED = DATA[:-1] + bytes([DATA[-1] ^ 1])  # one bit flipped


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own cache and no offline setting or proxy from the environment."""
    monkeypatch.setenv("VITKIT_HOME", str(tmp_path / "home"))
    for var in ("VITKIT_OFFLINE", "HF_HUB_OFFLINE", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server() -> Any:
    with FileServer({PATH: DATA}) as s:
        yield s


def siblings(dest: Path) -> set[str]:
    """The names of what lies beside ``dest`` in its folder (the lock is empty and stays)."""
    return {p.name for p in dest.parent.iterdir()} - {dest.name + ".lock"}


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line(e: pytest.ExceptionInfo[DownloadError]) -> str:
    message = str(e.value)
    assert "\n" not in message
    return message


# -- the cache ------------------------------------------------------------------------------------


def test_home_is_vitkit_home_else_xdg_cache_else_dot_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert home() == tmp_path / "home"
    monkeypatch.delenv("VITKIT_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert home() == tmp_path / "xdg" / "vitkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert home() == tmp_path / "user" / ".cache" / "vitkit"


def test_cached_path_is_host_and_path_and_never_leaves_the_cache(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cached_path("https://example.org:8443/a/b%20c.npz?sig=1") == (
        home / "weights" / "example.org_8443" / "a" / "b c.npz"
    )
    bad_paths = ("https://example.org/a/../../x", "https://example.org/", "ftp://example.org/x")
    bad_hosts = ("http://../x.npz", "http://./x.npz", "http://@/x.npz", "http://:80/x.npz")
    for bad in (*bad_paths, *bad_hosts, "http://a\\..\\b/x.npz", "http://user@../x.npz"):
        with pytest.raises(DownloadError):
            cached_path(bad)


# -- a download, and the cache afterwards ---------------------------------------------------------


def test_download_checks_and_records_then_a_second_load_makes_no_request(
    server: FileServer, tmp_path: Path
) -> None:
    url = server.url(PATH)
    path = fetch(url, sha256=SHA, size=len(DATA), progress=False)
    assert path == cached_path(url)
    assert path.read_bytes() == DATA
    record = json.loads(path.with_name("w.npz.download.json").read_text())
    assert record["url"] == url and record["size"] == len(DATA) and record["sha256"] == SHA
    assert record["how"] == "downloaded" and record["final_url"] == url
    assert record["validator"] == {"ETag": dict(server.versions(DATA))["ETag"]}
    assert siblings(path) == {"w.npz", "w.npz.download.json"}  # no .part left
    assert len(server.requests) == 1

    assert fetch(url, sha256=SHA, progress=False) == path
    verify(path)
    assert len(server.requests) == 1  # the second load came from the cache


def test_progress_bar_shows_size_rate_and_eta(
    server: FileServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fetch(server.url(PATH), progress=True)
    bar = capsys.readouterr().err
    assert "w.npz: 100%" in bar and "293k/293k" in bar  # 300,000 bytes in KiB
    assert "B/s]" in bar and "<00:00" in bar  # rate, and elapsed<remaining


def test_http_error_is_one_line_with_the_status(server: FileServer) -> None:
    with pytest.raises(DownloadError) as e:
        fetch(server.url("/models/missing.npz"), progress=False)
    assert "HTTP 404" in one_line(e) and "/models/missing.npz" in str(e.value)


# -- interrupted transfers ----------------------------------------------------------------------


def test_interrupted_transfer_resumes_with_a_range_request(server: FileServer) -> None:
    server.cuts[PATH] = [100_000]
    path = fetch(server.url(PATH), sha256=SHA, progress=False)
    assert path.read_bytes() == DATA
    first, second = server.gets(PATH)
    assert "range" not in first.headers
    assert second.headers["range"] == "bytes=100000-"
    assert second.headers["if-range"] == dict(server.versions(DATA))["ETag"]


@pytest.mark.parametrize(
    ("validators", "if_range"),
    [(["etag"], True), (["weak-etag", "last-modified"], True), (["etag"], False)],
    ids=["etag", "last-modified", "if-range-ignored"],
)
def test_a_file_that_changed_between_attempts_is_downloaded_whole_not_spliced(
    server: FileServer, validators: list[str], if_range: bool
) -> None:
    """The mirror's file is replaced by another of the same size between two attempts: the
    resume names the first version (If-Range: its strong ETag, else its Last-Modified, never a
    weak ETag), and the new file arrives whole; a server that ignores If-Range sends the new
    file's range with its new ETag, and the part is started again."""
    server.validators, server.if_range = validators, if_range
    server.cuts[PATH] = [100_000, 0]
    url = server.url(PATH)
    with pytest.raises(DownloadError, match="run again to resume"):
        fetch(url, progress=False)
    new = DATA[::-1]
    server.files[PATH] = new
    path = fetch(url, progress=False)
    assert path.read_bytes() == new
    first_version = [v for _, v in server.versions(DATA) if not v.startswith("W/")]
    assert server.gets(PATH)[2].headers["if-range"] == first_version[0]
    record = json.loads(path.with_name("w.npz.download.json").read_text())
    assert record["sha256"] == hashlib.sha256(new).hexdigest()
    assert siblings(path) == {"w.npz", "w.npz.download.json"}


def test_a_part_without_a_validator_is_started_again_not_resumed(server: FileServer) -> None:
    """A server that names no version of its file (no ETag, no Last-Modified): what an
    interrupted transfer left cannot be told from another version's start, so it is
    downloaded again from byte 0."""
    server.validators = []
    server.cuts[PATH] = [100_000]
    path = fetch(server.url(PATH), progress=False)
    assert path.read_bytes() == DATA
    assert ["range" in r.headers for r in server.gets(PATH)] == [False, False]


def test_a_resume_whose_206_names_no_version_is_started_again_not_spliced(
    server: FileServer,
) -> None:
    """A server that ignores If-Range and names no version in its 206 sends the new file's
    range after the file changed: nothing says it is not the part's file, so the part is
    discarded and the file downloaded from byte 0 (no sha256 is given to catch a splice)."""
    server.cuts[PATH] = [100_000, 0]
    url = server.url(PATH)
    with pytest.raises(DownloadError, match="run again to resume"):
        fetch(url, progress=False)
    new = DATA[::-1]
    server.files[PATH] = new
    server.if_range, server.range_validators = False, False
    path = fetch(url, progress=False)
    assert path.read_bytes() == new
    assert ["range" in r.headers for r in server.gets(PATH)] == [False, True, True, False]
    assert siblings(path) == {"w.npz", "w.npz.download.json"}


@pytest.mark.parametrize("value", ['"abc"\r\nX-Injected: 1', '"\u20ac"', "", 7])
def test_a_saved_validator_that_is_not_printable_ascii_discards_the_part(
    server: FileServer, value: object
) -> None:
    """A ``.part.json`` whose validator could not be sent as an If-Range header (CR LF,
    non-ASCII, empty, not text): the part is deleted and the file downloaded from byte 0."""
    url = server.url(PATH)
    part = cached_path(url).with_name("w.npz.part")
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA[:100_000])
    part.with_name("w.npz.part.json").write_text(json.dumps({"header": "ETag", "value": value}))
    path = fetch(url, sha256=SHA, progress=False)
    assert path.read_bytes() == DATA
    assert ["range" in r.headers for r in server.gets(PATH)] == [False]
    assert siblings(path) == {"w.npz", "w.npz.download.json"}


def test_an_interrupted_download_is_kept_and_the_next_call_resumes_it(server: FileServer) -> None:
    server.cuts[PATH] = [120_000, 0]  # the resume in the same call gets nothing: it gives up
    url = server.url(PATH)
    with pytest.raises(DownloadError) as e:
        fetch(url, sha256=SHA, progress=False)
    part = cached_path(url).with_name("w.npz.part")
    assert "interrupted" in one_line(e) and "run again to resume" in str(e.value)
    assert part.stat().st_size == 120_000
    assert not cached_path(url).exists()

    path = fetch(url, sha256=SHA, progress=False)
    assert path.read_bytes() == DATA and not part.exists()
    assert server.gets(PATH)[-1].headers["range"] == "bytes=120000-"


def test_a_server_that_ignores_range_restarts_from_zero(server: FileServer) -> None:
    server.cuts[PATH] = [50_000]
    server.ranges = False  # answers 200 with the whole file to a Range request
    path = fetch(server.url(PATH), sha256=SHA, progress=False)
    assert path.read_bytes() == DATA  # not the first 50,000 bytes twice


# -- corrupted files --------------------------------------------------------------------------


def test_a_wrong_sha256_is_refused_and_nothing_is_left(server: FileServer) -> None:
    url = server.url(PATH)
    with pytest.raises(DownloadError) as e:
        fetch(url, sha256="0" * 64, progress=False)
    message = one_line(e)
    assert url in message and SHA in message and "0" * 64 in message
    assert siblings(cached_path(url)) == set()


def test_a_truncated_file_is_refused_by_its_expected_size(server: FileServer) -> None:
    server.files[PATH] = DATA[:-10]  # the server is consistent, the file is short
    with pytest.raises(DownloadError) as e:
        fetch(server.url(PATH), size=len(DATA), progress=False)
    assert f"expected {len(DATA)}" in one_line(e)
    assert siblings(cached_path(server.url(PATH))) == set()


def test_the_publishers_md5_is_checked_and_recorded(server: FileServer) -> None:
    server.headers[PATH] = goog_hash(DATA[::-1])
    url = server.url(PATH)
    with pytest.raises(DownloadError) as e:
        fetch(url, progress=False)
    assert "x-goog-hash" in one_line(e)
    assert siblings(cached_path(url)) == set()

    server.headers[PATH] = goog_hash(DATA)
    path = fetch(url, progress=False)
    record = json.loads(path.with_name("w.npz.download.json").read_text())
    assert record["publisher_hash"] == {"md5": hashlib.md5(DATA).hexdigest()}


def test_a_resumed_download_is_checked_whole(server: FileServer) -> None:
    """A ``.part`` of this version of the file (its validator matches) whose bytes rotted on
    disk: the resumed tail is right, the whole is not, and the publisher's md5 of the whole file
    catches it."""
    server.headers[PATH] = goog_hash(DATA)
    url = server.url(PATH)
    part = cached_path(url).with_name("w.npz.part")
    part.parent.mkdir(parents=True)
    part.write_bytes(bytes(100_000))
    etag = dict(server.versions(DATA))["ETag"]
    part.with_name("w.npz.part.json").write_text(json.dumps({"header": "ETag", "value": etag}))
    with pytest.raises(DownloadError) as e:
        fetch(url, progress=False)
    assert "md5" in one_line(e)
    assert server.gets(PATH)[0].headers["range"] == "bytes=100000-"
    assert siblings(cached_path(url)) == set()


def test_a_size_outside_the_listed_range_is_refused_before_the_download(
    server: FileServer,
) -> None:
    url = server.url(PATH)
    with pytest.raises(DownloadError) as e:
        fetch(url, size_range=(len(DATA) - 10, len(DATA) - 1), progress=False)
    message = one_line(e)
    assert f"{len(DATA)} bytes, expected {len(DATA) - 10} to {len(DATA) - 1}" in message
    assert "nothing was downloaded" in message and siblings(cached_path(url)) == set()
    path = fetch(url, size_range=(len(DATA) - 10, len(DATA)), progress=False)
    assert path.read_bytes() == DATA


@pytest.mark.parametrize("bound", ["size", "size_range", "recorded"])
def test_a_body_without_content_length_is_stopped_at_the_size_bound(
    server: FileServer, bound: str
) -> None:
    """A server that sends no Content-Length and more bytes than the file may have (its size,
    its listed range, its first download's size): the transfer stops at the bound, one line,
    nothing kept; the server could not send its whole body."""
    big = DATA * 110  # 33 MB: more than the loopback's socket buffers hold
    url = server.url(PATH)
    if bound == "recorded":
        fetch(url, progress=False).unlink()  # the record of its first download stays
    server.files[PATH], server.lengths = big, False
    limits = {"size": {"size": len(DATA)}, "size_range": {"size_range": (1, len(DATA))}}
    with pytest.raises(DownloadError) as e:
        fetch(url, progress=False, **limits.get(bound, {}))
    message = one_line(e)
    assert f"more than {len(DATA):,} bytes" in message and "no Content-Length" in message
    assert siblings(cached_path(url)) <= {"w.npz.download.json"}
    for _ in range(500):  # the server's write fails once the client has hung up
        if len(server.sent) == len(server.gets(PATH)):
            break
        time.sleep(0.01)
    assert server.sent[-1] < len(big)


def test_a_body_without_content_length_within_the_bound_is_taken(server: FileServer) -> None:
    server.lengths = False
    path = fetch(server.url(PATH), sha256=SHA, size=len(DATA), progress=False)
    assert path.read_bytes() == DATA


def test_a_later_download_must_be_the_file_first_recorded(server: FileServer) -> None:
    """The cached file deleted, the same URL downloaded again: the same bytes are taken; a file
    that changed at its source (same size, or another size, refused before its body is read) is
    refused in one line naming the record to delete to accept it, and is then taken."""
    url = server.url(PATH)
    path = fetch(url, progress=False)
    record_file = path.with_name("w.npz.download.json")
    path.unlink()
    assert fetch(url, progress=False).read_bytes() == DATA  # unchanged at its source

    other = DATA[::-1]
    for new, found, first in [
        (other, f"sha256 {hashlib.sha256(other).hexdigest()}", f"sha256 {SHA}"),
        (DATA + b"!", f"{len(DATA) + 1} bytes", f"{len(DATA)} bytes"),
    ]:
        path.unlink(missing_ok=True)
        server.files[PATH] = new
        with pytest.raises(DownloadError) as e:
            fetch(url, progress=False)
        message = one_line(e)
        assert f"{found}, but its first download (" in message
        assert f") had {first}: the file changed at its source" in message
        assert f"delete {record_file} to accept the new one" in message
        assert siblings(path) == {"w.npz.download.json"}
        assert json.loads(record_file.read_text())["sha256"] == SHA

    record_file.unlink()
    assert fetch(url, progress=False).read_bytes() == DATA + b"!"


# -- offline -------------------------------------------------------------------------------------


def test_unreachable_names_the_url_and_where_a_hand_download_goes() -> None:
    url = f"http://127.0.0.1:{free_port()}/models/w.npz"
    with pytest.raises(DownloadError) as e:
        fetch(url, progress=False)
    message = one_line(e)
    assert url in message and "refused" in message and str(cached_path(url)) in message


@pytest.mark.parametrize("var", ["VITKIT_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_mode_never_touches_the_network(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, var: str
) -> None:
    url = server.url(PATH)
    fetch(url, progress=False)
    monkeypatch.setenv(var, "1")
    assert fetch(url, progress=False).read_bytes() == DATA  # cached: still served
    other = server.url("/models/other.npz")
    with pytest.raises(DownloadError) as e:
        fetch(other, progress=False)
    message = one_line(e)
    assert "offline" in message and other in message and str(cached_path(other)) in message
    assert len(server.requests) == 1


# -- files in the cache: changed, or placed by hand -----------------------------------------------


def test_a_file_changed_after_download_is_refused(server: FileServer) -> None:
    path = fetch(server.url(PATH), progress=False)
    path.write_bytes(CHANGED)
    with pytest.raises(DownloadError) as e:
        verify(path)
    message = one_line(e)
    assert "changed since it was downloaded" in message and "delete it" in message
    with pytest.raises(DownloadError, match="changed since it was downloaded"):
        fetch(server.url(PATH), progress=False)
    assert len(server.requests) == 1  # not downloaded over


def test_a_hand_placed_file_is_picked_up_and_recorded(server: FileServer) -> None:
    url = server.url(PATH)
    dest = cached_path(url)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(DATA)
    assert fetch(url, sha256=SHA, size=len(DATA), progress=False) == dest
    assert server.requests == []
    assert json.loads(dest.with_name("w.npz.download.json").read_text())["how"] == (
        "found in the cache"
    )
    verify(dest)


def test_a_wrong_hand_placed_file_is_refused_not_overwritten(server: FileServer) -> None:
    url = server.url(PATH)
    dest = cached_path(url)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(DATA[::-1])
    with pytest.raises(DownloadError) as e:
        fetch(url, sha256=SHA, progress=False)
    assert f"expected {SHA}" in one_line(e) and "delete it" in str(e.value)
    assert dest.read_bytes() == DATA[::-1] and server.requests == []


@pytest.mark.parametrize("suffix", ["", ".part", ".lock"])
def test_a_link_planted_in_the_cache_is_refused_not_followed(
    server: FileServer, tmp_path: Path, suffix: str
) -> None:
    """A symbolic link at ``F`` (to a file with the right bytes), ``F.part`` (to a file it would
    append to) or ``F.lock`` (to a file it would create) pointing out of the cache: one line
    naming the link, the target as it was, and no request."""
    dest = cached_path(server.url(PATH))
    dest.parent.mkdir(parents=True)
    target = tmp_path / "outside"
    if suffix != ".lock":
        target.write_bytes(DATA if suffix == "" else b"precious")
    link = dest.with_name(dest.name + suffix)
    link.symlink_to(target)
    before = target.read_bytes() if target.exists() else None
    with pytest.raises(DownloadError) as e:
        fetch(server.url(PATH), progress=False)
    assert f"{link} is a symbolic link" in one_line(e)
    assert (target.read_bytes() if target.exists() else None) == before
    assert link.is_symlink() and server.requests == []


# -- sources and mirrors ------------------------------------------------------------------------


def test_a_source_is_cached_by_name_so_a_mirror_keeps_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FileServer({"/vit/w.npz": DATA}) as official, FileServer({"/m/vit/w.npz": DATA}) as mirror:
        source = Source(name="vit_test", url=official.url("/vit"))
        assert source.env_var == "VITKIT_VIT_TEST_URL"
        monkeypatch.setenv(source.env_var, mirror.url("/m/vit/"))
        assert source.file_url("w.npz") == mirror.url("/m/vit/w.npz")
        path = source.fetch("w.npz", sha256=SHA, progress=False)
        assert path == tmp_path / "home" / "weights" / "vit_test" / "w.npz"
        assert official.requests == [] and len(mirror.requests) == 1

        monkeypatch.delenv(source.env_var)
        assert source.fetch("w.npz", sha256=SHA, progress=False) == path
        assert official.requests == []  # the mirror's download serves the official URL too
    with pytest.raises(ValueError, match=r"Source\.name"):
        Source(name="ViT", url="https://example.org")


def test_a_redirect_to_another_host_is_refused_unless_allowed(
    server: FileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within the host of the URL asked for, a redirect is followed (a relative Location too);
    to another host, it is one line naming both hosts and the setting that allows it."""
    with FileServer({PATH: DATA}) as front:
        front.moved["/old/w.npz"] = PATH  # relative: the same host
        path = fetch(front.url("/old/w.npz"), progress=False)
        assert path.read_bytes() == DATA
        record = json.loads(path.with_name("w.npz.download.json").read_text())
        assert (record["url"], record["final_url"]) == (front.url("/old/w.npz"), front.url(PATH))
        front.moved[PATH] = server.url(PATH)
        with pytest.raises(DownloadError) as e:
            fetch(front.url(PATH), progress=False)
        message = one_line(e)
        source, target = front.base_url.split("//")[1], server.base_url.split("//")[1]
        assert f"from {source} to another host, {target}" in message
        assert f"VITKIT_REDIRECT_HOSTS={target}" in message
        assert server.requests == [] and not cached_path(front.url(PATH)).exists()

        monkeypatch.setenv("VITKIT_REDIRECT_HOSTS", f"example.org, {target}")
        assert fetch(front.url(PATH), progress=False).read_bytes() == DATA
        assert len(server.gets(PATH)) == 1


def test_a_redirect_from_https_to_http_is_refused_whatever_is_allowed(
    server: FileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS_CERT))  # trust the test server's certificate
    monkeypatch.setenv("VITKIT_REDIRECT_HOSTS", "*")
    with FileServer({"/models/direct.npz": DATA}, tls=True) as secure:
        assert fetch(secure.url("/models/direct.npz"), progress=False).read_bytes() == DATA
        secure.moved[PATH] = server.url(PATH)
        with pytest.raises(DownloadError) as e:
            fetch(secure.url(PATH), progress=False)
    assert f"from https to http ({secure.url(PATH)} -> {server.url(PATH)})" in one_line(e)
    assert server.requests == []


# -- several processes, a full disk -------------------------------------------------------------


def _fetch_in_child(url: str, barrier: Any, results: Any) -> None:
    barrier.wait()  # both ask at the same moment
    try:
        results.put(str(fetch(url, sha256=SHA, progress=False)))
    except DownloadError as e:  # e.g. two writers of one .part: reported, not a hang
        results.put(str(e))


@pytest.mark.slow
def test_two_processes_at_once_download_once(server: FileServer) -> None:
    server.delay = 0.5  # the first is still downloading when the second asks
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    children = [
        ctx.Process(target=_fetch_in_child, args=(server.url(PATH), barrier, results))
        for _ in range(2)
    ]
    for child in children:
        child.start()
    paths = [results.get(timeout=60) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    assert paths[0] == paths[1] == str(cached_path(server.url(PATH)))
    assert Path(paths[0]).read_bytes() == DATA
    assert len(server.gets(PATH)) == 1


def _fetch_under_file_size_limit(url: str, limit: int) -> str:
    import resource
    import signal

    # Past RLIMIT_FSIZE the kernel sends SIGXFSZ (which kills); ignored, write() fails with EFBIG.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        fetch(url, progress=False)
    except DownloadError as e:
        return str(e)
    return "no error"


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_nothing(server: FileServer) -> None:
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        message = pool.submit(_fetch_under_file_size_limit, server.url(PATH), 64 * 1024).result()
    dest = cached_path(server.url(PATH))
    assert "\n" not in message and "File too large" in message and "VITKIT_HOME" in message
    assert siblings(dest) == set()  # no .part, no file, no record


# -- the Hugging Face Hub, through huggingface_hub pointed at a local endpoint --------------------

# huggingface_hub retries an unreachable Hub with waits of 1, 2, 4, 8 and 8 s: the child skips
# the waits (time.sleep, in a process that does nothing else), not the retries.
_HUB_CALLS = """
import hashlib, json, os, sys, time
time.sleep = lambda seconds: None
from vitkit.errors import DownloadError
from vitkit.io.download import hub_file
for call in json.loads(sys.argv[1]):
    os.environ.update(call.pop("env", {}))
    try:
        path = hub_file(**call)
        print(json.dumps({"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}))
    except DownloadError as e:
        print(json.dumps({"error": str(e)}))
"""


def hub_calls(tmp_path: Path, env: dict[str, str], *calls: dict[str, Any]) -> list[dict[str, str]]:
    """``hub_file(**call)`` for each call, in a fresh Python whose environment is ``env`` (what
    huggingface_hub reads at import: HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE) over a clean one."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "VITKIT_"))}
    src = str(Path(__file__).parents[1] / "src")
    env = {
        **clean,
        "PYTHONPATH": os.pathsep.join([src, clean.get("PYTHONPATH", "")]),
        "HF_HOME": str(tmp_path / "hf"),
        "VITKIT_HOME": str(tmp_path / "home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", _HUB_CALLS, json.dumps(list(calls))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture
def hub() -> Any:
    with FakeHub() as h:
        yield h


def resolves(hub: FakeHub) -> list[str]:
    return [f"{r.method} {r.path}" for r in hub.requests if "/resolve/" in r.path]


@pytest.mark.slow
def test_hub_download_honours_endpoint_home_and_token_then_loads_from_its_cache(
    hub: FakeHub, tmp_path: Path
) -> None:
    sha = hub.add("org/vit", "model.safetensors", DATA)
    hub.add("org/vit", "config.json", b'{"hidden_size": 64}', lfs=False)
    env = {"HF_ENDPOINT": hub.base_url, "HF_TOKEN": "hf_secret"}
    first, again, config = hub_calls(
        tmp_path,
        env,
        {"repo_id": "org/vit", "filename": "model.safetensors"},
        {"repo_id": "org/vit", "filename": "model.safetensors"},
        {"repo_id": "org/vit", "filename": "config.json"},
    )
    assert first["sha256"] == sha and again == first
    assert first["path"].startswith(str(tmp_path / "hf" / "hub" / "models--org--vit" / "snapshots"))
    assert Path(first["path"]).resolve().name == sha  # the blob is named by its LFS ETag
    assert "sha256" in config
    assert len(hub.cdn.gets()) == 1  # the second call was a cache hit (a HEAD, no download)
    heads = [r for r in hub.requests if r.method == "HEAD"]
    assert heads and all(r.headers["authorization"] == "Bearer hf_secret" for r in heads)


@pytest.mark.slow
def test_hub_errors_are_one_line(hub: FakeHub, tmp_path: Path) -> None:
    hub.add("org/vit", "model.safetensors", DATA)
    hub.add("org/gated", "model.safetensors", DATA)
    hub.gated.add("org/gated")
    results = hub_calls(
        tmp_path,
        {"HF_ENDPOINT": hub.base_url},
        {"repo_id": "org/nope", "filename": "model.safetensors"},
        {"repo_id": "org/vit", "filename": "nope.safetensors"},
        {"repo_id": "org/vit", "filename": "model.safetensors", "revision": "v9"},
        {"repo_id": "org/gated", "filename": "model.safetensors"},
        {"repo_id": "org/vit", "filename": "model.safetensors", "env": {"VITKIT_OFFLINE": "1"}},
    )
    messages = [r["error"] for r in results]
    assert all("\n" not in m for m in messages)
    missing_repo, missing_file, missing_revision, gated, offline = messages
    assert "no repository org/nope" in missing_repo and "HF_TOKEN" in missing_repo
    assert "has no file nope.safetensors" in missing_file
    assert "has no revision v9" in missing_revision
    assert "gated" in gated and "HF_TOKEN" in gated
    assert "offline mode is on" in offline and str(tmp_path / "hf" / "hub") in offline
    assert hub.cdn.requests == []


@pytest.mark.slow
def test_hub_offline_uses_the_cache_and_unreachable_is_one_line(
    hub: FakeHub, tmp_path: Path
) -> None:
    sha = hub.add("org/vit", "model.safetensors", DATA)
    (downloaded,) = hub_calls(
        tmp_path,
        {"HF_ENDPOINT": hub.base_url},
        {"repo_id": "org/vit", "filename": "model.safetensors"},
    )
    asked = len(hub.requests)
    cached, missing = hub_calls(
        tmp_path,
        {"HF_ENDPOINT": hub.base_url, "HF_HUB_OFFLINE": "1"},
        {"repo_id": "org/vit", "filename": "model.safetensors"},
        {"repo_id": "org/vit", "filename": "other.safetensors"},
    )
    assert cached == downloaded and cached["sha256"] == sha
    assert "offline mode is on" in missing["error"] and "other.safetensors" in missing["error"]
    assert len(hub.requests) == asked  # offline: not one request

    dead = f"http://127.0.0.1:{free_port()}"
    (unreachable,) = hub_calls(
        tmp_path, {"HF_ENDPOINT": dead}, {"repo_id": "org/vit", "filename": "other.safetensors"}
    )
    message = unreachable["error"]
    assert f"the Hub at {dead} cannot be reached" in message and "refused" in message
    assert "\n" not in message
    assert str(tmp_path / "hf" / "hub") in message


@pytest.mark.slow
def test_hub_files_are_checked_against_their_etag(hub: FakeHub, tmp_path: Path) -> None:
    sha = hub.add("org/vit", "model.safetensors", DATA)
    hub.cdn.files[f"/{sha}"] = DATA[::-1]  # the right size, the wrong bytes
    env = {"HF_ENDPOINT": hub.base_url}
    call = {"repo_id": "org/vit", "filename": "model.safetensors"}
    (corrupted,) = hub_calls(tmp_path, env, call)
    assert "is corrupted" in corrupted["error"] and sha in corrupted["error"]
    assert list((tmp_path / "hf" / "hub" / "models--org--vit" / "blobs").iterdir()) == []

    hub.cdn.files[f"/{sha}"] = DATA
    (good,) = hub_calls(tmp_path, env, call)
    assert good["sha256"] == sha
    blob = Path(good["path"]).resolve()
    blob.write_bytes(CHANGED)
    (changed,) = hub_calls(tmp_path, env, call)
    assert "changed since it was downloaded" in changed["error"] and str(blob) in changed["error"]
    assert blob.exists()  # a file that was in the cache is the user's to delete


def test_hub_file_is_a_vitkit_error_without_huggingface_hub(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(ImportError, match=r"vitkit\[hub\]"):
        hub_file("org/vit", "model.safetensors")
