"""Checking a source's images once: the pass, split across processes, and its cache.

A pass (``decoded.DecodedImages`` decides what to make of it): ``level='full'`` opens every image
with PIL (as one of ``codec.FORMATS``), runs ``verify()``, and to decide the channels decodes
images in order until the first colour one (``grey_kind``); ``'header'`` decides them from PIL's
modes alone; ``'none'`` is no pass (a bad image is replaced when it is read). A source of
``PARALLEL_MIN_FILES`` images or more is checked in contiguous chunks by worker processes;
``summarise`` replays their reports so that the kept and skipped images and the decision are the
serial pass's, index for index (the loader's determinism needs the indices).

The cache: ``home()/verified/<name>-<hash of identity>-<level>.json``, written atomically, read as
JSON, keyed by the source's ``SourceState`` (a folder's: the sha256 of every file's relative path,
size and mtime in ns, ``listing_key``, a rewrite keeping both not seen; and the bytes an image may
hold), the record count, the level, the pixels an image may have (``max_pixels``), Pillow's
version and the format's; an entry naming a file that could not be read (a permission, a
dangling link: what the key does not see) is used only while it still cannot be read
(``_readable_again``). A pass runs under a ``flock`` on ``<entry>.lock``:
processes that ask at once (torchrun ranks) wait, then read the first one's entry. Where
``home()`` cannot be written, the pass runs uncached, with a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import multiprocessing
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, get_args

import PIL
from PIL import ImageMode

from ..config.data import Verify
from ..files import atomic_write, exclusive, home
from ..runtime.cores import usable_cores
from .codec import DECODE_ERRORS, MAX_IMAGE_PIXELS, open_image, rgb_array
from .contract import ImageSource, SourceState
from .transforms import refuse_float_pixels

log = logging.getLogger(__name__)

Level = Verify  # data.verify's levels, declared once in the config
LEVELS: tuple[Level, ...] = get_args(Verify)
PARALLEL_MIN_FILES = 2000  # below this a pool costs more than it saves
_CHUNKS_PER_WORKER = 8  # small enough chunks that a slow one does not hold the pool up
_FORMAT = 5  # of the cache entries: a change of what they hold or mean increments it (2: only
# codec.FORMATS are opened; 3: any source, findings by record; 4: under the byte and pixel bounds;
# 5: a file that could not be read is the stage "read", tried again at each cache hit)


class Seen(NamedTuple):
    """What checking one file found."""

    mode: str = ""  # its PIL mode, when open + verify() passed
    failed: str = ""  # why open + verify() failed
    looked: bool = False  # whether its pixels were decoded to tell grey from colour
    grey: str = ""  # how it is grey ('L', 'RGB with R = G = B'), '' for colour
    decode_failed: str = ""  # why decoding failed, when it was looked at
    unread: bool = False  # ``failed`` because its bytes could not be read (not what they hold)


def _why(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def verified_mode(source: bytes | str | Path, *, max_pixels: int = MAX_IMAGE_PIXELS) -> str:
    """The PIL mode of an image (its encoded bytes or its file's path) of at most ``max_pixels``
    pixels once ``verify()`` passes (raises PIL's errors when it does not, and a ``ValueError``
    for float pixels, which decoding refuses: ``transforms.refuse_float_pixels``)."""
    with open_image(source, max_pixels) as image:
        mode = image.mode
        image.verify()
    refuse_float_pixels(mode)
    return mode


def grey_kind(data: bytes, mode: str, *, max_pixels: int = MAX_IMAGE_PIXELS) -> str | None:
    """How an image (its encoded bytes ``data``; PIL mode ``mode``) is greyscale, or None when it
    is in colour.

    One-channel modes (1, L, LA, I, I;16...) are grey by their mode, without decoding; any other
    (RGB, RGBA, CMYK, P, PA) is decoded to RGB and is grey when R = G = B at every pixel (for P, at
    the palette entries the pixels use). Raises PIL's errors for a file that fails to decode or
    has more than ``max_pixels`` pixels.
    """
    if ImageMode.getmode(mode).basemode == "L":
        return mode
    rgb = rgb_array(data, max_pixels=max_pixels)  # (H, W, 3), by the decoder training uses
    # Exact equality, also for JPEG: libjpeg's fixed-point Cb and Cr weights sum to exactly zero,
    # so a grey pixel encodes to Cb = Cr = 128, every chroma coefficient is 0, and decoding gives
    # R = G = B again. Measured (Pillow 13, libjpeg-turbo 3): grey images saved as RGB JPEG decode
    # with max |R - G|, |G - B| = 0 over 288 images (8x8 to 256x256; noise, gradients, edges;
    # quality 1 to 100; 4:4:4, 4:2:2, 4:2:0) and over torchvision's encoder. A tolerance would buy
    # nothing and would call colour images grey: a tint of 2 or 3 levels decodes as 1 or 2.
    grey = bool((rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all())
    return f"{mode} with R = G = B" if grey else None


def check_records(
    source: ImageSource,
    records: Sequence[int],
    look: bool,
    *,
    max_pixels: int = MAX_IMAGE_PIXELS,
) -> list[Seen]:
    """Check ``records`` of ``source`` in order: ``verify()`` each (an image of more than
    ``max_pixels`` pixels fails) and, if ``look``, decode each until the first colour image to
    tell grey from colour. Runs in the pool's workers too (PIL and numpy only)."""
    seen: list[Seen] = []
    colour = False
    for data in source.read_all(records):
        try:
            if isinstance(data, OSError):  # permissions, a dangling link: may change, unlike bytes
                seen.append(Seen(failed=_why(data), unread=True))
                continue
            mode = verified_mode(data, max_pixels=max_pixels)
        except DECODE_ERRORS as e:
            seen.append(Seen(failed=_why(e)))
            continue
        if not look or colour:
            seen.append(Seen(mode=mode))
            continue
        try:
            kind = grey_kind(data, mode, max_pixels=max_pixels)
        except DECODE_ERRORS as e:
            seen.append(Seen(mode=mode, looked=True, decode_failed=_why(e)))
            continue
        colour = kind is None
        seen.append(Seen(mode=mode, looked=True, grey=kind or ""))
    return seen


_SOURCE: ImageSource | None = None  # a pool worker's source, set once when it starts


def _set_source(source: ImageSource) -> None:
    global _SOURCE
    _SOURCE = source


def _check_chunk(records: Sequence[int], look: bool, max_pixels: int) -> list[Seen]:
    assert _SOURCE is not None, "the pool's initializer sets the source"
    return check_records(_SOURCE, records, look, max_pixels=max_pixels)


@dataclass
class Findings:
    """What a pass over a source found, by record."""

    level: Level
    decided: bool  # whether grey and colour were looked for (the channels are to be decided)
    skipped: list[tuple[int, str, str]] = field(default_factory=list)  # (record, stage, why)
    colour: tuple[int, str] | None = None  # the first colour image: (record, PIL mode)
    grey: dict[str, int] = field(default_factory=dict)  # how many are grey, by kind
    cache: Path | None = None  # the entry it was read from, or written to
    hit: bool = False  # whether it was read from the cache

    def without_decision(self) -> Findings:
        """The findings of the same pass had it not decided the channels: what decoding alone
        found is dropped."""
        skipped = [s for s in self.skipped if s[1] in ("read", "verify")]
        return Findings(self.level, False, skipped, cache=self.cache, hit=self.hit)


def summarise(seen: Sequence[Seen], *, level: Level, decide: bool) -> Findings:
    """Replay the serial pass over per-image reports in the records' order.

    Each chunk decodes for the channel decision until its own first colour image, so every image
    before the source's first colour image was decoded in its chunk too: the replay sees what a
    serial pass sees. A decode failure after that image, seen only by a later chunk, is ignored,
    as the serial pass never sees it."""
    found = Findings(level, decide)
    grey: Counter[str] = Counter()
    for i, s in enumerate(seen):
        if s.failed:
            found.skipped.append((i, "read" if s.unread else "verify", s.failed))
            continue
        if not decide or found.colour is not None:
            continue
        if level == "header":
            if ImageMode.getmode(s.mode).basemode == "L":
                grey[s.mode] += 1
            else:
                found.colour = (i, s.mode)
            continue
        # Every image before the source's first colour image was decoded, in whatever chunk.
        assert s.looked, f"record {i} was not decoded before the first colour image"
        if s.decode_failed:
            found.skipped.append((i, "decode", s.decode_failed))
        elif s.grey:
            grey[s.grey] += 1
        else:
            found.colour = (i, s.mode)
    found.grey = dict(sorted(grey.items()))
    return found


def run_pass(
    source: ImageSource,
    *,
    level: Level,
    decide: bool,
    workers: int | None = None,
    max_pixels: int = MAX_IMAGE_PIXELS,
) -> Findings:
    """Check every record of ``source`` (of at most ``max_pixels`` pixels each), serially or
    split across ``workers`` processes (None: ``usable_cores()`` when there are
    ``PARALLEL_MIN_FILES`` or more; 0 or 1: serially); the findings are the serial pass's either
    way."""
    assert level != "none"
    look = decide and level == "full"
    records = range(len(source.labels))
    n = usable_cores() if workers is None and len(records) >= PARALLEL_MIN_FILES else workers or 1
    n = min(n, len(records))
    # a daemonic process (a DataLoader worker) cannot have children
    if n <= 1 or multiprocessing.current_process().daemon:
        found = check_records(source, records, look, max_pixels=max_pixels)
        return summarise(found, level=level, decide=decide)
    size = -(-len(records) // (n * _CHUNKS_PER_WORKER))  # ceil
    chunks = [records[k : k + size] for k in range(0, len(records), size)]
    # Forked on Linux: a worker starts at once with PIL, numpy and the source in memory, where a
    # spawned one imports torch again and re-runs the caller's unguarded ``__main__``. Forking a
    # threaded process (OpenMP, CUDA) is safe here: the workers run PIL and numpy only, never
    # torch, as torch's DataLoader forks its own. macOS's system libraries are not fork-safe.
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    log.info(
        "verifying %d images of %s with %d %s processes", len(records), source.where, n, method
    )
    # An executor, not multiprocessing.Pool: a worker killed by the OS (out of memory, a crash in
    # a decoder) is an error here, where a Pool waits forever for its lost chunk. The source is
    # handed to each worker once (forked: inherited), not with every chunk.
    with ProcessPoolExecutor(
        n,
        mp_context=multiprocessing.get_context(method),
        initializer=_set_source,
        initargs=(source,),
    ) as pool:
        every = len(chunks)  # the chunks' parts come back in records' order
        parts = list(pool.map(_check_chunk, chunks, [look] * every, [max_pixels] * every))
    return summarise([s for part in parts for s in part], level=level, decide=decide)


# ---------------------------------------------------------------------------------- the cache


def cache_path(state: SourceState, level: str) -> Path:
    """Where the findings of the source in ``state`` at ``level`` are kept (or what else is
    kept of it, under another name than a level's)."""
    digest = hashlib.sha256(state.identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    name = re.sub(r"[^\w.-]+", "_", state.name)[:64] or "images"  # any bytes a name holds
    return home() / "verified" / f"{name}-{digest}-{level}.json"


def listing_key(folder: Path, files: Sequence[str]) -> str:
    """sha256 over (relative path, size, mtime in ns) of ``files`` (relative to ``folder``), in
    order: one ``stat`` per file (the error's name for one that cannot be stat'ed: a broken link
    is skipped by the pass and named, and the key changes once it is mended)."""
    h = hashlib.sha256()
    base = str(folder)
    for rel in files:
        try:
            st = os.stat(os.path.join(base, rel))  # strings, not Paths: a million of them add up
            state = f"{st.st_size}\0{st.st_mtime_ns}"
        except OSError as e:  # a broken link, a file gone since the listing: the pass skips it
            state = type(e).__name__
        h.update(os.fsencode(rel) + f"\0{state}\n".encode())
    return h.hexdigest()


def _key(state: SourceState, records: int, level: Level, max_pixels: int) -> dict[str, Any]:
    return {
        "format": _FORMAT,
        "source": state.identity,
        "level": level,
        "max_pixels": max_pixels,  # what is readable: the bytes are the source's (its digest)
        "pillow": PIL.__version__,  # what verify() accepts can change with it
        "records": records,
        "digest": state.digest,
    }


def _to_json(findings: Findings, key: dict[str, Any]) -> dict[str, Any]:
    return {
        **key,
        "decided": findings.decided,
        "skipped": [list(skipped) for skipped in findings.skipped],
        "colour": None if findings.colour is None else list(findings.colour),
        "grey": findings.grey,
    }


def _from_json(entry: Any, key: dict[str, Any], level: Level) -> Findings:
    """The findings an entry holds; raises ``ValueError`` (or ``KeyError``, ``TypeError``) for an
    entry that is malformed or not of this key."""
    if not isinstance(entry, dict) or any(entry.get(k) != v for k, v in key.items()):
        raise ValueError("another key")
    records = key["records"]

    def record(value: Any) -> int:
        if type(value) is not int or not 0 <= value < records:
            raise ValueError("not a record")
        return value

    skipped = [(record(r), str(stage), str(why)) for r, stage, why in entry["skipped"]]
    if any(stage not in ("read", "verify", "decode") for _, stage, _ in skipped):
        raise ValueError("unknown stage")
    colour = entry["colour"]
    grey = entry["grey"]
    if not isinstance(grey, dict) or not isinstance(entry["decided"], bool):
        raise TypeError("malformed")
    return Findings(
        level,
        entry["decided"],
        skipped,
        None if colour is None else (record(colour[0]), str(colour[1])),
        {str(k): int(v) for k, v in grey.items()},
    )


def _read(path: Path, key: dict[str, Any], level: Level) -> Findings | None:
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("ignoring the unreadable verification cache %s (%s)", path, e)
        return None
    try:
        return _from_json(entry, key, level)
    except (ValueError, KeyError, TypeError, IndexError):
        return None  # another state of the source, or malformed: verified again and replaced


def verify_source(
    source: ImageSource,
    state: SourceState | None,
    *,
    level: Level,
    decide: bool,
    workers: int | None = None,
    max_pixels: int = MAX_IMAGE_PIXELS,
) -> Findings:
    """The findings of a pass at ``level`` over every record of ``source`` (images of more than
    ``max_pixels`` pixels unreadable): from the cache when it holds those of ``state``
    (``source.state()``; None: no cache), else from a pass (in parallel for a large source), then
    cached. Processes that ask at once wait for the first."""

    def run() -> Findings:
        return run_pass(source, level=level, decide=decide, workers=workers, max_pixels=max_pixels)

    if state is None:
        return run()
    key = _key(state, len(source.labels), level, max_pixels)
    entry = cache_path(state, level)

    def cached() -> Findings | None:
        found = _read(entry, key, level)
        if found is None or (decide and not found.decided) or _readable_again(source, found):
            return None
        found.cache, found.hit = entry, True
        return found if decide else found.without_decision()

    found = cached()
    if found is not None:
        return found
    with contextlib.ExitStack() as stack:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            # no collective runs meanwhile: ranks that joined a group wait on this lock, not on
            # NCCL's timeout; across machines only where $VITKIT_HOME is shared and honours flock
            stack.enter_context(
                exclusive(entry.with_suffix(".lock"), f"verifying the images of {source.where}")
            )
        except OSError as e:
            log.warning(
                "cannot cache the verification of %s in %s (%s)", source.where, entry.parent, e
            )
            return run()
        found = cached()  # another process may have written it while this one waited
        if found is not None:
            return found
        found = run()
        if _write(entry, _to_json(found, key)):
            found.cache = entry
        return found


def _readable_again(source: ImageSource, found: Findings) -> bool:
    """Whether a file the pass could not read can be read now: the key (sizes and times) does not
    see a permission restored (``chmod``) or a link's target put back, and the entry would keep
    naming the file as unreadable, and skipping it, after the fix."""
    unread = [record for record, stage, _ in found.skipped if stage == "read"]
    return any(not isinstance(data, OSError) for data in source.read_all(unread))


def _write(entry: Path, record: dict[str, Any]) -> bool:
    """Write an entry atomically; whether it was written (a failure is a warning)."""
    text = json.dumps(record)  # ASCII: names that are not UTF-8 survive (surrogate escapes)
    try:
        atomic_write(entry, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as e:
        log.warning("cannot write the verification cache %s (%s)", entry, e)
        return False
    return True
