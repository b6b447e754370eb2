"""vitkit.data.stream's training path: the inception crop drawn before decoding, as the
random-access containers draw it, so a streamed large JPEG is decoded at a reduced size; row
groups read on the main process's own thread.

The streams are parquet files written with pyarrow and read as ``ParquetStream`` directly (no
config, no ``datasets``), so the tests take well under a second.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import logged_metrics, stopped_copy
from photos import CLASSES, pixels, same_weights
from vitkit import fit
from vitkit.config import replace
from vitkit.data import codec as dc
from vitkit.data import stream as st
from vitkit.data.loader import Augment, BatchOptions, generator
from vitkit.data.run_data import batches_of, build_data
from vitkit.data.sources.cells import CellReader
from vitkit.recipes import get_recipe

pq = pytest.importorskip("pyarrow.parquet")
pytestmark = pytest.mark.usefixtures("hf_cache")


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


# --------------------------------------------------- streams read as a run reads them (build_data)


def _stream_cfg(parquet: Path, **keys) -> dict:
    return {"data.dataset": f"hf:{parquet}", "data.streaming": True, "data.shuffle_buffer": 8,
            "model.num_classes": 3, "train.device": "cpu", **keys}  # fmt: skip


def test_a_stream_serves_every_row_once_an_epoch_in_windows_and_resumes_exactly(
    hf_data: dict[str, Path],
) -> None:
    run = replace(get_recipe("smoke"), _stream_cfg(hf_data["parquet"]))
    data = build_data(run.data, run.model, seed=0, in_chans=3)
    stream = data.train
    assert len(stream) == 30 and stream.classes == list(CLASSES)
    assert data.val_name == "val split (9 images)"  # its validation split, not a holdout
    options = BatchOptions(batch_size=6, train=True, seed=5, image_size=16, flip=True)
    batches = batches_of(stream, options)
    assert batches.steps_per_epoch == 5
    orders = [batches.order(e) for e in (0, 1)]
    assert all(sorted(o.tolist()) == list(range(30)) for o in orders)
    assert not torch.equal(orders[0], orders[1])  # a new order every epoch
    # windows of >= 8 rows out of row groups of 5: rows 0-9 of the epoch are two whole groups
    assert sorted(orders[0][:10].tolist()) in (list(range(a, a + 5)) + list(range(b, b + 5))
                                                 for a in range(0, 30, 5) for b in range(0, 30, 5))  # fmt: skip
    uninterrupted = [b for _, b in zip(range(12), batches.stream(0), strict=False)]
    for start in (0, 3, 7):  # mid-epoch and in the second epoch: exactly the same batches
        again = batches_of(stream, options)
        got = [b for _, b in zip(range(12 - start), again.stream(start), strict=False)]
        for (x, y), (ex, ey) in zip(got, uninterrupted[start:], strict=True):
            assert torch.equal(x, ex) and torch.equal(y, ey)
    # two processes keep their halves of every batch; workers decode the same images
    halves = [
        batches_of(stream, dataclasses.replace(options, shard=(r, 2), num_workers=r))
        for r in (0, 1)
    ]
    for b, ((x0, y0), (x1, y1)) in enumerate(zip(*(h.epoch(1) for h in halves), strict=True)):
        x, y = uninterrupted[5 + b]
        assert torch.equal(torch.cat([x0, x1]), x) and torch.equal(torch.cat([y0, y1]), y)


def test_a_bad_row_of_a_stream_counts_once_however_often_it_is_read(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    def png(k: int) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(pixels(k % 2, k).astype(np.uint8)).save(buffer, "PNG")
        return buffer.getvalue()

    images = [png(k) if k != 7 else b"\x89PNG\r\n\x1a\nnot an image" for k in range(20)]
    folder = tmp_path / "data"
    folder.mkdir()
    table = pa.table({"image": images, "label": [k % 2 for k in range(20)]})
    for split in ("train", "test"):
        pq.write_table(table, folder / f"{split}-00000-of-00001.parquet", row_group_size=5)
    keys = {"data.max_bad_fraction": 0.05, "model.num_classes": 2}  # 1 of 20 allowed, not 2
    run = replace(get_recipe("smoke"), _stream_cfg(folder, **keys))
    stream = build_data(run.data, run.model, seed=0, in_chans=3).train
    batches = batches_of(stream, BatchOptions(batch_size=5, train=True, seed=0, image_size=8))
    with pytest.warns(UserWarning, match=r"failed to decode") as caught:
        for epoch in range(3):  # the bad row is read every epoch
            assert sum(len(y) for _, y in batches.epoch(epoch)) == 20
    assert len([w for w in caught if "failed to decode" in str(w.message)]) == 1


def test_an_evaluation_batch_of_one_that_does_not_decode_is_left_out(tmp_path: Path) -> None:
    """Five rows, the last a broken PNG, evaluated in batches of 4: the last batch holds only
    it, with no other image to take its place; it is left out (counted as failed), where the
    run ended with "no image of a batch decodes" although max_bad_fraction allowed it."""
    import pyarrow as pa

    images = [_encoded(k, 16, 16, "PNG") for k in range(4)] + [b"\x89PNG\r\n\x1a\nbroken"]
    path = tmp_path / "test.parquet"
    pq.write_table(pa.table({"image": images, "label": [0, 1, 0, 1, 0]}), path, row_group_size=5)
    stream = st.ParquetStream([str(path)], name="test stream", classes=["a", "b"],
                              image_column="image", label_column="label", label_names=None,
                              cells=CellReader(None), mode="RGB", max_bad_fraction=0.25)  # fmt: skip
    evaluation = st.StreamBatches(stream, BatchOptions(batch_size=4, train=False, image_size=8))
    with pytest.warns(UserWarning, match="failed to decode"):
        sizes = [len(y) for _, y in evaluation.epoch(0)]
    assert sizes == [4, 0]


def test_a_stream_serves_the_rows_in_file_order_for_evaluation(hf_data: dict[str, Path]) -> None:
    run = replace(get_recipe("smoke"), _stream_cfg(hf_data["parquet"]))
    data = build_data(run.data, run.model, seed=0, in_chans=3)
    datasets = pytest.importorskip("datasets")
    saved = datasets.load_from_disk(str(hf_data["saved"]))["test"]
    batches = batches_of(data.test, BatchOptions(batch_size=4, train=False, image_size=(12, 14)))
    got = list(batches.epoch(0))
    assert [len(y) for _, y in got] == [4, 4, 1]
    labels = torch.cat([y for _, y in got])
    assert labels.tolist() == saved["label"]  # the test file was written in folder order
    first = np.array(saved[0]["image"].convert("RGB"))  # (12, 14, 3)
    assert torch.equal(
        ((got[0][0][0] * 127.5) + 127.5).round().byte(), torch.from_numpy(first).permute(2, 0, 1)
    )


def test_a_killed_streaming_run_resumes_as_if_never_stopped(
    hf_data: dict[str, Path], tmp_path: Path
) -> None:
    run = replace(get_recipe("smoke"), _stream_cfg(
        hf_data["parquet"], **{"train.duration": "8st", "train.batch_size": 8,
                               "train.save_every": "2st", "train.keep_last": 4,
                               "train.log_every": "1st", "data.flip": True,
                               "data.num_workers": 1}))  # fmt: skip
    full = tmp_path / "full"
    fit(run, run_dir=full, progress=False)
    # 3 steps an epoch, windows of 10 rows: step 4 starts at row 8 of epoch 1, inside a window
    resumed = stopped_copy(full, tmp_path / "resumed", step=4)
    fit(run, run_dir=resumed, progress=False)
    assert (
        logged_metrics(resumed) == logged_metrics(full)
        and len([r for r in logged_metrics(full) if "lr" in r]) == 8
    )
    same_weights(full / "checkpoints" / "step_00000008", resumed / "checkpoints" / "step_00000008")


def test_a_streamed_batch_with_failing_images_is_the_same_for_any_number_of_processes(
    tmp_path: Path,
) -> None:
    """Rows that fail to decode are replaced by the next image of the whole batch that decodes,
    wherever it is: two processes' parts make up one process's batch. Before, a failure took
    the next image of its own process's part (row 2 below, last of the first half of its batch,
    took row 0 with two processes and row 3 with one)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def png(k: int) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(pixels(k % 3, k)).save(buffer, "PNG")
        return buffer.getvalue()

    bad = {2, 9, 10, 11}  # the last of a half; a whole half (9-11, with 6-row batches)
    images = [b"not an image" if k in bad else png(k) for k in range(20)]
    folder = tmp_path / "data"
    folder.mkdir()
    table = pa.table({"image": images, "label": [k % 3 for k in range(20)]})
    for split in ("train", "test"):
        pq.write_table(table, folder / f"{split}-00000-of-00001.parquet", row_group_size=5)
    keys = {"data.max_bad_fraction": 0.5, "model.num_classes": 3}
    run = replace(get_recipe("smoke"), _stream_cfg(folder, **keys))
    stream = build_data(run.data, run.model, seed=0, in_chans=3).train
    evaluation = BatchOptions(batch_size=6, image_size=8, train=False)
    for options in (
        evaluation,
        BatchOptions(batch_size=6, image_size=8, train=True, seed=3, flip=True),
    ):
        with pytest.warns(UserWarning, match="failed to decode"):
            whole = list(batches_of(stream, options).epoch(0))
            halves = [
                list(batches_of(stream, dataclasses.replace(options, shard=(r, 2))).epoch(0))
                for r in (0, 1)
            ]
        for (x, y), (x0, y0), (x1, y1) in zip(whole, *halves, strict=True):
            assert torch.equal(torch.cat([x0, x1]), x) and torch.equal(torch.cat([y0, y1]), y)
    with pytest.warns(UserWarning, match="failed to decode"):
        first = list(batches_of(stream, evaluation).epoch(0))
    assert torch.equal(first[0][0][2], first[0][0][3])  # row 2 took row 3, of the other half
    assert first[0][1].tolist() == [0, 1, 0, 0, 1, 2]
