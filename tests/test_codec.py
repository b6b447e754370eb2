"""vitkit.data.codec and the fast path through the loader: PIL's pixels from the JPEG decoder,
the crop-first path equal to decode-then-crop where it does not reduce and close to it where it
does (the bound and why), the generator left as inception_crop leaves it, and batches that are
the same twice and across worker counts.

The images are pink noise (amplitude 1/f, the spectrum of natural images) saved as JPEG, so the
reduced decodes are compared on content with photographs' statistics, not on flat noise.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps
from torch.utils.data import Subset
from torchvision.transforms.v2 import functional as TF

from helpers import claimed_png, exif_photo
from vitkit.data import Batches, BatchOptions, ImageFolderDataset, UnreadableImageWarning
from vitkit.data import codec as dc
from vitkit.data.codec import DECODE_ERRORS
from vitkit.data.transforms import (
    crop_box,
    inception_crop,
    pil_to_tensor,
    random_crop_flip,
    resize,
    resized_crop,
)

fast = pytest.mark.skipif(dc._simplejpeg() is None, reason="simplejpeg is not installed")


@pytest.fixture(params=["simplejpeg", "pil"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test once with simplejpeg (when installed) and once with PIL for every file."""
    if request.param == "pil":
        monkeypatch.setattr(dc, "_simplejpeg", lambda: None)
    elif dc._simplejpeg() is None:
        pytest.skip("simplejpeg is not installed")
    return request.param


def pink(seed: int, height: int, width: int) -> Image.Image:
    """An RGB image of pink noise: random phases, amplitude 1/f, channels correlated."""
    rng = np.random.default_rng(seed)
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    amplitude = 1 / np.maximum(np.hypot(fy, fx), 1 / max(height, width))
    base = rng.normal(size=(height, width // 2 + 1)) + 1j * rng.normal(
        size=(height, width // 2 + 1)
    )
    planes = []
    for _ in range(3):  # mostly shared structure, some per channel: colour, not grey
        own = rng.normal(size=base.shape) + 1j * rng.normal(size=base.shape)
        field = np.fft.irfft2((base + 0.4 * own) * amplitude, s=(height, width))
        planes.append((field - field.mean()) / field.std())
    pixels = np.stack(planes, -1) * 40 + 128
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


def _jpeg(path: Path, image: Image.Image, **kwargs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, "JPEG", **kwargs)
    return path


# ---------------------------------------------------------------- decode


def test_decode_gives_pils_pixels_for_every_kind_of_file(tmp_path: Path, decoder: str) -> None:
    image = pink(0, 45, 61)
    files = {
        f"s{s}{'p' if p else ''}.jpg": dict(quality=85, subsampling=s, progressive=p)
        for s in (0, 1, 2)
        for p in (False, True)
    }
    paths = [_jpeg(tmp_path / name, image, **kw) for name, kw in files.items()]
    paths.append(_jpeg(tmp_path / "grey.jpg", image.convert("L")))
    paths.append(_jpeg(tmp_path / "cmyk.jpg", image.convert("CMYK")))  # PIL decodes it: exact
    image.save(tmp_path / "x.png")
    paths.append(tmp_path / "x.png")
    for path in paths:
        for mode in ("RGB", "L"):
            with Image.open(path) as pil:
                expected = pil_to_tensor(pil, mode)
            got = dc.decode(path.read_bytes(), mode)
            assert got.dtype == torch.uint8 and got.shape == expected.shape, (path.name, mode)
            assert torch.equal(got, expected), (path.name, mode, decoder)


def test_a_truncated_or_garbage_jpeg_raises_a_decode_error(tmp_path: Path, decoder: str) -> None:
    data = _jpeg(tmp_path / "a.jpg", pink(1, 40, 40)).read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: data.index(b"\xff\xda") + 40])
    (tmp_path / "junk.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    for name in ("cut.jpg", "junk.jpg"):
        with pytest.raises(DECODE_ERRORS):
            dc.decode((tmp_path / name).read_bytes())


def test_a_float_or_32_bit_tiff_is_an_image_that_does_not_decode_not_a_clipped_one(
    tmp_path: Path,
) -> None:
    """A 32-bit float TIFF (PIL mode F, a microscope's [0, 1]) was clipped to 0..255 by PIL's
    conversion, a black image that verification called grey: both refuse it now, as a file
    that fails to decode (skipped, and counted against data.max_bad_fraction)."""
    from vitkit.data.verify import verified_mode

    path = tmp_path / "float.tif"
    Image.fromarray(np.linspace(0, 1, 16, dtype=np.float32).reshape(4, 4)).save(path)
    data = path.read_bytes()
    for mode in ("RGB", "L"):
        with pytest.raises(DECODE_ERRORS, match=r"32-bit float pixels \(PIL mode F\)"):
            dc.decode(data, mode)
    with pytest.raises(DECODE_ERRORS, match="float pixels"):
        verified_mode(data)
    sixteen = tmp_path / "sixteen.png"
    Image.fromarray(np.full((4, 4), 65535, dtype=np.uint16)).save(sixteen)
    assert dc.decode(sixteen.read_bytes(), "L").unique().tolist() == [255]  # 16 bits still read
    # 32-bit integers (mode I) beyond 16 bits were clipped at 65,535: 93% of this one white
    wide = tmp_path / "int32.tif"
    Image.fromarray((np.arange(256).reshape(16, 16) * 4000).astype(np.int32), "I").save(wide)
    with pytest.raises(DECODE_ERRORS, match=r"32-bit integer pixels from 0 to 1020000 \(PIL"):
        dc.decode(wide.read_bytes(), "L")
    within = tmp_path / "int32-16.tif"  # mode I of 16-bit values: read as 16 bits
    Image.fromarray(np.full((4, 4), 65535, dtype=np.int32), "I").save(within)
    assert dc.decode(within.read_bytes(), "L").unique().tolist() == [255]


def test_an_image_of_more_pixels_than_the_bound_is_refused_before_decoding(
    tmp_path: Path, decoder: str
) -> None:
    """``data.max_image_pixels`` (default 134 MP): an image whose header claims more is refused
    from the header by every decoding path (a real 0.5 MB PNG of 13,000 x 13,000 cost 2.9 GB to
    decode), with PIL's own error for it, one of ``DECODE_ERRORS``; a JPEG (simplejpeg's header or
    PIL's) and a PNG alike, under a bound of one's own."""
    generator = torch.Generator()

    def ways(data: bytes, **bound: int) -> list[Callable[[], object]]:
        return [
            lambda: dc.decode(data, **bound),
            lambda: dc.rgb_array(data, **bound),
            lambda: dc.upright_size(data, **bound),
            lambda: dc.decode_crop(data, "RGB", 8, generator=generator, **bound),
        ]

    assert issubclass(Image.DecompressionBombError, DECODE_ERRORS)
    pink(3, 20, 30).save(tmp_path / "a.png")
    jpeg = _jpeg(tmp_path / "a.jpg", pink(3, 20, 30)).read_bytes()
    for data in (jpeg, (tmp_path / "a.png").read_bytes()):
        assert [way() is not None for way in ways(data, max_pixels=600)] == [True] * 4  # 30 x 20
        for way in ways(data, max_pixels=599):
            with pytest.raises(
                Image.DecompressionBombError,
                match=r"^30 x 20 pixels, more than data.max_image_pixels=599 allows$",
            ):
                way()
    why = r"^13,000 x 13,000 pixels, more than data.max_image_pixels=134,217,728 allows$"
    for way in ways(claimed_png(13000, 13000)):
        with pytest.raises(Image.DecompressionBombError, match=why):
            way()
    # a 108 MP phone photo's size is within the default: its header is read, not refused
    assert dc.upright_size(claimed_png(12000, 9000)) == (9000, 12000)


@fast
def test_the_dataset_decodes_jpegs_with_simplejpeg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _jpeg(tmp_path / "a/0.jpg", pink(2, 30, 40))
    calls: list[int] = []
    codec = dc._simplejpeg()
    assert codec is not None
    decode = codec.decode_jpeg
    monkeypatch.setattr(codec, "decode_jpeg", lambda *a, **k: calls.append(1) or decode(*a, **k))
    image, _ = ImageFolderDataset(tmp_path, None)[0]
    assert calls == [1] and image.shape == (3, 30, 40)
    assert image.stride() == (1, 40 * 3, 3)  # a (C, H, W) view of channels-last memory


# ---------------------------------------------------------------- decode_crop


def test_crop_first_equals_decode_then_crop_where_it_does_not_reduce(
    tmp_path: Path, decoder: str
) -> None:
    path = _jpeg(tmp_path / "a.jpg", pink(3, 120, 160), quality=90)
    png = tmp_path / "a.png"
    pink(3, 120, 160).save(png)
    for file in (path, png):
        for seed in range(20):
            for size in (64, (70, 50)):  # larger than half the image: never reduced
                g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
                expected = inception_crop(dc.decode(file.read_bytes()), size, generator=g1)
                got = dc.decode_crop(file.read_bytes(), "RGB", size, generator=g2)
                assert torch.equal(got, expected), (file.name, seed, size)
                assert got.is_contiguous() and got.dtype == torch.uint8
                assert torch.equal(g1.get_state(), g2.get_state())  # the same draws


@fast
@pytest.mark.parametrize("size", [64, 112])
def test_a_reduced_decode_is_close_to_the_full_one(tmp_path: Path, size: int) -> None:
    # Both paths low-pass the crop below the output's Nyquist frequency and sample it; they differ
    # in the filter (the DCT's low frequencies then bilinear, against bilinear alone), so they
    # differ most where an image has most energy near that frequency. Measured on photographs
    # (retina, Hubble, astronaut, coffee, motorcycle at ~1000 px, 60 crops each, outputs 64-224):
    # mean |difference| 0.5-1.1 levels by scale, at most 3 for one crop, single pixels up to
    # 30-50 (isolated bright points). Pink noise keeps more energy near Nyquist than photographs
    # do: 1.2-2.0 by scale, at most 3.0 for one crop, single pixels up to 19. The bounds below
    # hold that with room; the same box moved by one reduced pixel (s pixels) fails them.
    path = _jpeg(tmp_path / "big.jpg", pink(4, 720, 960), quality=90)
    full = dc.decode(path.read_bytes())
    reduced: dict[int, list[float]] = {}
    for seed in range(40):
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        expected = inception_crop(full, size, generator=g1).float()
        got = dc.decode_crop(path.read_bytes(), "RGB", size, generator=g2).float()
        assert torch.equal(g1.get_state(), g2.get_state())
        top, left, h, w = box = crop_box(
            720,
            960,
            area=(0.05, 1.0),
            ratio=(3 / 4, 4 / 3),
            generator=torch.Generator().manual_seed(seed),
        )
        s = dc.reduction((h, w), (size, size))
        diff = (got - expected).abs()
        if s == 1:
            assert diff.max() == 0
            continue
        reduced.setdefault(s, []).append(diff.mean().item())
        assert diff.mean() < 3.5 and diff.max() < 32, (seed, s, diff.mean(), diff.max())
        if top + h + s <= 720 and left + w + s <= 960:  # one reduced pixel down and right
            moved = resized_crop(full, (top + s, left + s, h, w), size).float()
            assert diff.mean() < (moved - expected).abs().mean(), (seed, box)
    assert set(reduced) >= {2, 4}, reduced  # both scales were exercised
    assert max(np.mean(v) for v in reduced.values()) < 2.5


@fast
def test_a_resized_decode_reduces_a_large_jpeg_and_stays_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``decode_resized`` (what a folder kept in memory is made of): a 720x960 JPEG resized to
    64x64 is decoded at 1/8, to 200x100 at 1/2 (rows and columns apart), turned upright first
    as EXIF says, and is as close to resizing the full decode as a reduced crop is (the bounds
    of the test above); where nothing reduces, and for a PNG, the same pixels."""
    scales: list[int] = []
    decode_jpeg = dc._decode_jpeg

    def recording(*args, scale: int = 1, **kwargs):
        scales.append(scale)
        return decode_jpeg(*args, scale=scale, **kwargs)

    monkeypatch.setattr(dc, "_decode_jpeg", recording)
    path = _jpeg(tmp_path / "big.jpg", pink(5, 720, 960), quality=90)
    full = dc.decode(path.read_bytes())
    for size, scale in (((64, 64), 8), ((200, 100), 2), ((400, 480), 1)):
        scales.clear()
        got = dc.decode_resized(path.read_bytes(), "RGB", size)
        assert scales == [scale] and got.shape == (3, *size) and got.is_contiguous()
        diff = (got.float() - resize(full, size).float()).abs()
        if scale == 1:
            assert diff.max() == 0
        else:
            assert diff.mean() < 2.5 and diff.max() < 32, (size, diff.mean(), diff.max())
    turned = exif_photo(tmp_path / "turned.jpg", pink(6, 720, 960), orientation=6)
    upright = dc.decode(turned.read_bytes())  # stored 960 high, 720 wide: EXIF turns it back
    assert upright.shape == (3, 720, 960)
    got = dc.decode_resized(turned.read_bytes(), "RGB", (60, 80))
    assert (got.float() - resize(upright, (60, 80)).float()).abs().mean() < 2.5
    png = tmp_path / "big.png"
    pink(5, 720, 960).save(png)
    whole = dc.decode(png.read_bytes())
    assert torch.equal(
        dc.decode_resized(png.read_bytes(), "RGB", (64, 64)), resize(whole, (64, 64))
    )


def test_reduction_picks_the_largest_scale_that_keeps_the_output_size() -> None:
    assert dc.reduction((448, 460), (224, 224)) == 2
    assert dc.reduction((447, 900), (224, 224)) == 1
    assert dc.reduction((900, 1800), (224, 224)) == 4
    assert dc.reduction((1800, 1800), (224, 224)) == 8
    assert dc.reduction((4000, 4000), (224, 224)) == 8
    assert dc.reduction((100, 400), (24, 48)) == 4  # (height, width) apart


def test_the_dataset_crop_replaces_a_bad_image_as_indexing_does(
    tmp_path: Path, decoder: str
) -> None:
    for k in range(3):
        _jpeg(tmp_path / f"a/{k}.jpg", pink(k, 50 + 10 * k, 60))
    data = (tmp_path / "a/1.jpg").read_bytes()
    (tmp_path / "a/1.jpg").write_bytes(data[: data.index(b"\xff\xda") + 40])
    ds = ImageFolderDataset(tmp_path, None, max_bad_fraction=0.5)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableImageWarning)
        image, label = ds[1]  # the replacement, 2.jpg
        expected = inception_crop(image, 32, generator=g1)
        got, got_label = ds.inception_crop(1, 32, generator=g2)
    assert label == got_label and torch.equal(got, expected)
    assert torch.equal(g1.get_state(), g2.get_state())


# ---------------------------------------------------------------- the transforms it relies on


def test_the_crop_first_paths_take_inception_crops_defaults() -> None:
    """The box's area and aspect ratio are written once, so decode-then-crop and crop-first
    draw the same boxes when left to their defaults."""
    import inspect

    from vitkit.data.decoded import DecodedImages
    from vitkit.data.transforms import INCEPTION_AREA, INCEPTION_RATIO

    assert INCEPTION_AREA == (0.05, 1.0) and INCEPTION_RATIO == (3 / 4, 4 / 3)  # [VJ]
    for crop in (inception_crop, dc.decode_crop, DecodedImages.inception_crop):
        params = inspect.signature(crop).parameters
        assert params["area"].default is INCEPTION_AREA, crop
        assert params["ratio"].default is INCEPTION_RATIO, crop


def test_a_channels_last_crop_resizes_to_the_same_pixels() -> None:
    hwc = torch.randint(
        0, 256, (37, 53, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    view = hwc.permute(2, 0, 1)  # (3, 37, 53), channels last
    chw = view.contiguous()
    for box in [(0, 0, 37, 53), (3, 5, 20, 31), (10, 2, 9, 50)]:
        for size in (16, (24, 40), (9, 9)):
            expected = TF.resized_crop(chw, *box, list(np.broadcast_to(size, 2)), antialias=True)
            got = resized_crop(view, box, size)
            assert torch.equal(got, expected) and got.is_contiguous()
    assert torch.equal(resize(view, 20), TF.resize(chw, [20, 20], antialias=True))
    assert resize(view, (37, 53)).is_contiguous()  # even when nothing is resized


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float16, torch.int16])
@pytest.mark.parametrize("antialias", [True, False])
def test_resize_gives_torchvisions_pixels(
    interpolation: str, dtype: torch.dtype, antialias: bool
) -> None:
    """vitkit's resize is torchvision's (not imported, for start-up), in every layout it meets:
    an image, a channels-last view, a batch, an empty batch; shrinking and enlarging."""
    g = torch.Generator().manual_seed(0)
    hwc = torch.randint(0, 256, (37, 53, 3), generator=g).to(dtype)
    batch = torch.randint(0, 256, (4, 3, 37, 53), generator=g).to(dtype)
    mode = getattr(TF.InterpolationMode, interpolation.upper())
    for images in (hwc.permute(2, 0, 1), hwc.permute(2, 0, 1).contiguous(), batch, batch[:0]):
        for size in ((20, 20), (24, 80), (9, 64)):
            got = resize(images, size, interpolation=interpolation, antialias=antialias)
            expected = TF.resize(images, list(size), interpolation=mode, antialias=antialias)
            assert got.dtype == dtype and got.shape == expected.shape
            assert torch.equal(got, expected), (images.shape, size)


def test_a_flip_without_padding_is_the_gathers_flip() -> None:
    images = torch.randint(0, 256, (9, 2, 4, 5), dtype=torch.uint8)
    for flip in (True, False):
        g = torch.Generator().manual_seed(3)
        out = random_crop_flip(images, padding=0, flip=flip, generator=g)
        g = torch.Generator().manual_seed(3)
        torch.randint(0, 1, (9,), generator=g), torch.randint(0, 1, (9,), generator=g)
        flipped = torch.rand(9, generator=g) < 0.5
        expected = torch.where(flipped[:, None, None, None] & flip, images.flip(-1), images)
        assert torch.equal(out, expected) and 0 < int(flipped.sum()) < 9


# ---------------------------------------------------------------- through the loader


def test_folder_batches_are_the_same_twice_and_for_any_worker_count(
    tmp_path: Path, decoder: str
) -> None:
    for k in range(12):
        _jpeg(tmp_path / f"c{k % 3}/{k}.jpg", pink(k, 40 + 3 * k, 70 - 2 * k), quality=90)
    (tmp_path / "c1/x.png").write_bytes(b"garbage")  # skipped by verification
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableImageWarning)
        ds = ImageFolderDataset(tmp_path, None, max_bad_fraction=0.2)

    def epoch(workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        batches = Batches(
            ds,
            BatchOptions(
                batch_size=4,
                train=True,
                seed=5,
                image_size=(24, 32),
                inception_crop=True,
                flip=True,
                num_workers=workers,
            ),
        )
        return list(batches.epoch(1))

    first = epoch(0)
    assert [(x.shape, x.dtype, y.shape) for x, y in first] == [
        ((4, 3, 24, 32), torch.float32, (4,))
    ] * 3
    for other in (epoch(0), epoch(2)):
        assert all(
            torch.equal(a, c) and torch.equal(b, d)
            for (a, b), (c, d) in zip(first, other, strict=True)
        )


def test_batches_draw_the_inception_crop_before_decoding(
    tmp_path: Path, decoder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader crops through ``ImageFolderDataset.inception_crop``: the batches of a folder
    whose boxes never allow a reduced decode are those of decoding first, pixel for pixel; a
    large JPEG's are close to them (the bound of ``decode_crop``)."""
    for k in range(6):
        _jpeg(tmp_path / f"small/c{k % 2}/{k}.jpg", pink(k, 40, 48), quality=90)
    _jpeg(tmp_path / "big/c0/0.jpg", pink(9, 480, 640), quality=90)
    _jpeg(tmp_path / "big/c1/1.jpg", pink(10, 512, 512), quality=90)
    calls: list[int] = []
    crop = ImageFolderDataset.inception_crop

    def counted(self: ImageFolderDataset, index: int, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(index)
        return crop(self, index, *args, **kwargs)

    monkeypatch.setattr(ImageFolderDataset, "inception_crop", counted)

    def epoch(dataset: object, size: int) -> torch.Tensor:
        options = BatchOptions(batch_size=2, train=True, seed=1, image_size=size,
                               inception_crop=True, flip=True, uint8=True)  # fmt: skip
        batches = Batches(dataset, options)
        return torch.cat([x for e in range(4) for x, _ in batches.epoch(e)]).float()

    for folder, size in (("small", 32), ("big", 24)):
        ds = ImageFolderDataset(tmp_path / folder, None)
        decoded_first = Subset(ds, range(len(ds)))  # not DecodedImages: decoded, then cropped
        calls.clear()
        got, expected = epoch(ds, size), epoch(decoded_first, size)
        assert len(calls) == len(got)  # every image went through the crop-first path
        if folder == "small" or decoder == "pil":  # boxes <= 40 x 48 px for 32; PIL: no scaling
            assert torch.equal(got, expected)
        else:  # boxes of 24-640 px for 24: mostly decoded reduced
            diff = (got - expected).abs().mean(dim=(1, 2, 3))  # per image
            assert diff.max() < 3.5 and not torch.equal(got, expected), diff


# ---------------------------------------------------------------- orientation (EXIF)


def _pil_upright(data: bytes, mode: str = "RGB") -> torch.Tensor:
    with Image.open(io.BytesIO(data)) as image:
        return pil_to_tensor(ImageOps.exif_transpose(image), mode)


def _tiff(order: bytes, entries: list[tuple[int, int, int, bytes]]) -> bytes:
    """An EXIF segment's TIFF body: one directory of (tag, type, count, value) entries."""
    end = "little" if order == b"II" else "big"
    body = order + (42).to_bytes(2, end) + (8).to_bytes(4, end) + len(entries).to_bytes(2, end)
    for tag, kind, count, value in entries:
        body += tag.to_bytes(2, end) + kind.to_bytes(2, end) + count.to_bytes(4, end)
        body += value.ljust(4, b"\0")
    return body + (0).to_bytes(4, end)


def _with_exif(jpeg: bytes, tiff: bytes) -> bytes:
    segment = b"Exif\0\0" + tiff
    return jpeg[:2] + b"\xff\xe1" + (len(segment) + 2).to_bytes(2, "big") + segment + jpeg[2:]


def test_the_orientation_read_from_a_jpeg_is_pils() -> None:
    buffer = io.BytesIO()
    pink(0, 16, 24).save(buffer, "JPEG")
    plain = buffer.getvalue()
    cases = {"no exif": plain}
    for o in range(1, 9):
        for order in (b"II", b"MM"):
            end = "little" if order == b"II" else "big"
            tiff = _tiff(order, [(0x010F, 2, 4, b"cam\0"), (0x0112, 3, 1, o.to_bytes(2, end))])
            cases[f"{o} {order!r}"] = _with_exif(plain, tiff)
    cases["no tag"] = _with_exif(plain, _tiff(b"II", [(0x010F, 2, 4, b"cam\0")]))
    cases["out of range"] = _with_exif(plain, _tiff(b"II", [(0x0112, 3, 1, b"\x09\0")]))
    cases["a LONG"] = _with_exif(plain, _tiff(b"II", [(0x0112, 4, 1, b"\x06\0\0\0")]))
    cases["cut short"] = _with_exif(plain, _tiff(b"II", [(0x0112, 3, 1, b"\x06\0")])[:16])
    for name, data in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PIL's "Corrupt EXIF data" of the cut one
            with Image.open(io.BytesIO(data)) as image:
                expected = image.getexif().get(0x0112, 1)
        assert dc._orientation_of_jpeg(data) == expected, name
    # the fast parser answers the plain cases itself, and leaves the unusual ones to PIL
    assert dc.jpeg_orientation(cases["6 b'MM'"]) == 6 and dc.jpeg_orientation(plain) == 1
    assert dc.jpeg_orientation(cases["a LONG"]) is None
    assert dc.jpeg_orientation(cases["cut short"]) is None


@pytest.mark.parametrize("orientation", range(1, 9))
def test_decode_turns_an_image_upright_as_exif_transpose_does(
    tmp_path: Path, decoder: str, orientation: int
) -> None:
    picture = pink(5, 40, 56)
    for fmt, name in (("JPEG", "photo.jpg"), ("PNG", "photo.png")):
        data = exif_photo(tmp_path / name, picture, orientation, fmt).read_bytes()
        for mode in ("RGB", "L"):
            got = dc.decode(data, mode)
            assert got.shape[-2:] == (40, 56), (fmt, mode)
            assert torch.equal(got, _pil_upright(data, mode)), (fmt, mode)


def test_the_upright_size_is_read_from_the_header(tmp_path: Path, decoder: str) -> None:
    picture = pink(6, 40, 56)
    for orientation in range(1, 9):
        for fmt, name in (("JPEG", "photo.jpg"), ("PNG", "photo.png")):
            data = exif_photo(tmp_path / name, picture, orientation, fmt).read_bytes()
            assert dc.upright_size(data) == (40, 56), (orientation, fmt)
            with Image.open(io.BytesIO(data)) as stored:
                turned = stored.size[::-1] if orientation > 4 else stored.size  # (W, H) stored
                assert turned == (56, 40)  # what the header alone says once turned


@pytest.mark.parametrize("orientation", range(1, 9))
def test_the_crop_is_drawn_on_the_upright_image(
    tmp_path: Path, decoder: str, orientation: int
) -> None:
    """Where the box allows no reduced decode, the crop is the upright image's, pixel for pixel.
    A reduced decode turns the reduced image and moves a reversed axis's box by the part of a
    pixel its rounding up adds: it equals cropping the stored image at the box the turn maps
    there, then turning the crop, to a grey level (the resize commutes with flips and
    transposes but for rounding)."""
    small = exif_photo(tmp_path / "small.jpg", pink(6, 60, 90), orientation).read_bytes()
    upright_small = dc.decode(small)
    for seed in range(6):
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        expected = inception_crop(upright_small, 48, generator=g1)
        assert torch.equal(dc.decode_crop(small, "RGB", 48, generator=g2), expected), seed
    if decoder == "pil":
        return
    # 203 x 330, not multiples of 8: the reduced axes round up
    large = exif_photo(tmp_path / "large.jpg", pink(7, 203, 330), orientation).read_bytes()
    stored_hw = (330, 203) if orientation >= 5 else (203, 330)
    where = dc.upright(torch.arange(stored_hw[0] * stored_hw[1]).view(1, *stored_hw), orientation)
    scales = set()
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        top, left, h, w = crop_box(203, 330, area=(0.2, 1.0), ratio=(3 / 4, 4 / 3), generator=g)
        s = dc.reduction((h, w), (40, 40))
        scales.add(s)
        got = dc.decode_crop(
            large, "RGB", 40, area=(0.2, 1.0), generator=torch.Generator().manual_seed(seed)
        )
        cells = where[0, top : top + h, left : left + w]  # stored index of each upright pixel
        rows, cols = cells // stored_hw[1], cells % stored_hw[1]
        reduced = dc._decode_jpeg(large, "YCbCr", "RGB", scale=s)  # as stored, (C, H', W')
        pil = Image.fromarray(reduced.permute(1, 2, 0).contiguous().numpy())
        region = (cols.min() / s, rows.min() / s, (cols.max() + 1) / s, (rows.max() + 1) / s)
        out = pil.resize((40, 40), Image.Resampling.BILINEAR, box=[float(v) for v in region])
        expected = dc.upright(pil_to_tensor(out), orientation)
        assert (got.int() - expected.int()).abs().max() <= 1, (seed, s)
    assert scales >= {2, 4}, scales
