"""vitkit.data.stream's training path: the inception crop drawn before decoding, as the
random-access containers draw it, so a streamed large JPEG is decoded at a reduced size; row
groups read on the main process's own thread.

The streams are parquet files written with pyarrow and read as ``ParquetStream`` directly (no
config, no ``datasets``), so the tests take well under a second.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitkit.data import codec as dc
from vitkit.data import stream as st
from vitkit.data.loader import Augment, BatchOptions, generator
from vitkit.data.sources.cells import CellReader

pq = pytest.importorskip("pyarrow.parquet")


def _encoded(seed: int, height: int, width: int, fmt: str) -> bytes:
    """A smooth random RGB picture (noise upsampled, so a JPEG of it compresses as a photo)."""
    rng = np.random.default_rng(seed)
    small = Image.fromarray(rng.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8))
    buffer = io.BytesIO()
    small.resize((width, height), Image.BILINEAR).save(buffer, fmt)
    return buffer.getvalue()


def _stream(tmp_path: Path, images: list[bytes]) -> st.ParquetStream:
    """``images`` as one parquet file of row groups of 4 rows, labels alternating 0 and 1."""
    import pyarrow as pa

    path = tmp_path / "train.parquet"
    table = pa.table({"image": images, "label": [k % 2 for k in range(len(images))]})
    pq.write_table(table, path, row_group_size=4)
    return st.ParquetStream([str(path)], name="test stream", classes=["a", "b"],
                            image_column="image", label_column="label", label_names=None,
                            cells=CellReader(None), mode="RGB")  # fmt: skip


def _batches(stream: st.ParquetStream, size: int) -> st.StreamBatches:
    options = BatchOptions(
        batch_size=4,
        train=True,
        seed=3,
        image_size=size,
        inception_crop=True,
        flip=True,
        uint8=True,
    )
    return st.StreamBatches(stream, options)


def test_a_streamed_training_batch_is_decode_then_augment_with_the_same_draws(
    tmp_path: Path,
) -> None:
    """PNGs, which the crop-first path decodes whole: every image of two epochs is what
    ``Augment`` gives for the decoded image with the generator of its position."""
    images = [_encoded(k, 40, 48 + 8 * k, "PNG") for k in range(8)]
    batches = _batches(_stream(tmp_path, images), 16)
    augment = Augment(16, crop_padding=0, flip=True, inception_crop=True)
    for epoch in (0, 1):
        got = torch.cat([x for x, _ in batches.epoch(epoch)])  # (8, 3, 16, 16)
        for position, row in enumerate(batches.order(epoch).tolist()):
            g = generator(3, st._SAMPLE, epoch, position)
            expected = augment(dc.decode(images[row])[None], g)[0]
            assert torch.equal(got[position], expected), (epoch, position)


@pytest.mark.skipif(dc._simplejpeg() is None, reason="simplejpeg is not installed")
def test_a_streamed_large_jpeg_is_decoded_at_a_reduced_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """512 x 512 JPEGs cropped to 24 px: every box is 114 px or more a side, so each decode is
    at 1/4 or 1/8 of the size (decoding first would decode all of it)."""
    scales: list[int] = []
    decode_jpeg = dc._decode_jpeg

    def counted(data: bytes, colourspace: str, mode: str, *, scale: int = 1) -> torch.Tensor:
        scales.append(scale)
        return decode_jpeg(data, colourspace, mode, scale=scale)

    monkeypatch.setattr(dc, "_decode_jpeg", counted)
    images = [_encoded(k, 512, 512, "JPEG") for k in range(4)]
    [(x, _)] = list(_batches(_stream(tmp_path, images), 24).epoch(0))  # one batch of 4
    assert x.shape == (4, 3, 24, 24) and x.dtype == torch.uint8
    assert len(scales) == 4 and min(scales) >= 4, scales


def test_a_stream_reads_its_row_groups_on_the_calling_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The main process reads the row groups while its workers decode: pyarrow's thread pool
    took 58 us of CPU a row from them, against 4 on one thread (benchmarks/RESULTS.md)."""
    threaded: list[bool] = []
    read = pq.ParquetFile.read_row_group

    def spied(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        threaded.append(kwargs.get("use_threads", True))
        return read(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spied)
    images = [_encoded(k, 16, 16, "PNG") for k in range(8)]
    assert sum(len(y) for _, y in _batches(_stream(tmp_path, images), 8).epoch(0)) == 8
    assert threaded == [False, False]  # two row groups of 4 rows


def test_a_stream_refuses_repeated_augmentation(tmp_path: Path) -> None:
    from vitkit.config import ConfigError

    stream = _stream(tmp_path, [_encoded(k, 16, 16, "PNG") for k in range(4)])
    options = BatchOptions(batch_size=4, train=True, image_size=8, aug_repeats=3)
    with pytest.raises(ConfigError, match=r"^aug_repeats=3 is not valid for a stream: expected 1 "):
        st.StreamBatches(stream, options)
