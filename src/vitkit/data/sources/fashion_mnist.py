"""Fashion-MNIST (Xiao et al. 2017) from its four IDX files [PAPER.md B1: 28x28 grayscale, 60k/10k, 10 classes].

The IDX format: a big-endian header (two zero bytes, a type code, the number of dimensions, then each
dimension as a uint32), followed by the values in C order. We parse it with numpy directly, and
check every file's SHA-256 against the release. The hashes are of the *decompressed* bytes: Debian's
``dataset-fashion-mnist`` re-compressed the .gz files, so the md5s Zalando publishes for the .gz
files do not match them, while the contents are the same.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from ...config import DataConfig, ModelConfig
from ...errors import ConfigError, DataError, MissingFileError
from ..arrays import ArrayDataset
from ..listing import Listing, held
from .paths import find_files, search_dirs

SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")

CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]

FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

# SHA-256 of each file's decompressed content (`zcat FILE.gz | sha256sum`).
SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}

# IDX type code -> big-endian numpy dtype.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _gunzip(path: Path, limit: int) -> bytes:
    """A gzip file's content, or its first ``limit`` bytes and one more where it holds more:
    never more, whatever the file (a small file may decompress to gigabytes). zlib in one call
    is ~25% faster than ``gzip.decompress``."""
    data = path.read_bytes()
    parts, size = [], 0
    try:
        while data and size <= limit:
            d = zlib.decompressobj(wbits=31)  # 31: gzip header and CRC
            parts.append(d.decompress(data, limit + 1 - size))
            size += len(parts[-1])
            if d.unconsumed_tail:  # stopped at the limit: the caller says what it expected
                break
            if not d.eof:
                raise DataError(f"{path}: gzip stream is truncated (corrupt or partly downloaded)")
            data = d.unused_data.lstrip(b"\0")  # another member may follow; padding may not
    except zlib.error as e:
        raise DataError(f"{path}: not a valid gzip file (corrupt?): {e}") from None
    return b"".join(parts)


_MOST_HEADER = 4 + 4 * 255  # the magic bytes, then at most 255 dimensions of 4 bytes
_MOST_BYTES = 2**30  # EMNIST's largest, 547 MB, fits; Fashion-MNIST's is 47 MB


def _idx_bytes(path: Path) -> bytes:
    """An IDX file's bytes, a ``.gz`` decompressed to no more than its header says it holds
    (and one byte more, which the size check then refuses)."""
    if path.suffix != ".gz":
        return path.read_bytes()
    head = _gunzip(path, _MOST_HEADER)
    if len(head) < 4 or head[2] not in _IDX_DTYPES or len(head) < 4 + 4 * head[3]:
        return head  # read_idx names what is wrong
    dims = struct.unpack(f">{head[3]}I", head[4 : 4 + 4 * head[3]])
    size = math.prod(dims) * np.dtype(_IDX_DTYPES[head[2]]).itemsize
    if size > _MOST_BYTES:
        raise DataError(
            f"{path}: the IDX header says shape {dims} ({size:,} bytes), more than the "
            f"{_MOST_BYTES:,} an IDX file is read up to (corrupt, or not an image set)"
        )
    return _gunzip(path, 4 + 4 * head[3] + size)


def read_idx(path: str | os.PathLike, *, sha256: str | None = None) -> np.ndarray:
    """An IDX file (``.gz`` or not) as a numpy array with the shape its header states.

    Raises ``ValueError`` naming the file for a bad magic number, a size that disagrees with the
    header (truncated or padded), or a SHA-256 of the decompressed bytes other than ``sha256``.
    """
    path = Path(path)
    raw = _idx_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataError(
            f"{path}: not an IDX file: expected magic bytes 00 00 <type in "
            f"{sorted(_IDX_DTYPES)}> <ndim>, found {raw[:4].hex(' ')}"
        )
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header: expected {header} bytes, found {len(raw)}")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        raise DataError(
            f"{path}: the IDX header says shape {dims} ({expected} bytes with the header), "
            f"found {len(raw)} bytes (truncated or corrupt)"
        )
    if sha256 is not None:
        found = hashlib.sha256(raw).hexdigest()
        if found != sha256:
            raise DataError(
                f"{path}: SHA-256 of the decompressed content is {found}, expected {sha256} "
                "(corrupt, or not the Fashion-MNIST release)"
            )
    values = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return values.astype(dtype.newbyteorder("="))  # a writable copy in native byte order


def fashion_mnist(split: str, data_dir: str | os.PathLike | None = None) -> ArrayDataset:
    """Fashion-MNIST ``'train'`` (60,000) or ``'test'`` (10,000): uint8 images (N, 1, 28, 28).

    Looks in ``data_dir`` (and ``data_dir/fashion-mnist``) when given, else in
    ``$VITKIT_DATA/fashion-mnist`` and then ``/usr/share/datasets/fashion-mnist``; each file may be
    gzipped (``.gz``, as released) or not.
    """
    if split not in FILES:
        raise ConfigError(f"split={split!r} is not valid: expected 'train' or 'test'")
    dirs = search_dirs("fashion-mnist", data_dir, SYSTEM_DIR)
    names = FILES[split]
    paths = find_files(dirs, list(names), suffixes=(".gz", ""))
    if paths is None:
        searched = ", ".join(str(d) for d in dirs) or "(no folder: give --data fashion_mnist:DIR)"
        raise MissingFileError(
            f"Fashion-MNIST {split} files {names[0]}.gz and {names[1]}.gz not found in {searched}; "
            "install them with `apt-get install dataset-fashion-mnist`, or download the four IDX "
            ".gz files from https://github.com/zalandoresearch/fashion-mnist into DIR and give "
            "--data fashion_mnist:DIR"
        )
    image_path, label_path = paths
    images = read_idx(image_path, sha256=SHA256[names[0]])  # (N, 28, 28) uint8
    labels = read_idx(label_path, sha256=SHA256[names[1]])  # (N,) uint8
    return ArrayDataset(
        images=torch.from_numpy(images).unsqueeze(1),  # (N, 1, 28, 28)
        labels=torch.from_numpy(labels).long(),
        classes=list(CLASSES),
    )


def listing(cfg: DataConfig, model: ModelConfig | None, seed: int) -> Listing:
    """``fashion_mnist[:DIR]``: grey, 60,000 training images of 10 classes."""
    return held(
        cfg, lambda split: fashion_mnist(split, cfg.source.path), channels=1, size=(60_000, 10)
    )
