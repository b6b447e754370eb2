"""Our format, timm files, and every kind of bad checkpoint: one clear error, nothing run."""

from __future__ import annotations

import argparse
import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file

import vitkit
from helpers import file_size_limit, randomize, tiny
from vitkit.config import ConfigError, ModelConfig
from vitkit.errors import VitkitError
from vitkit.io.api import read
from vitkit.io.checkpoint import CheckpointError
from vitkit.model import VisionTransformer


def randomized(cfg: ModelConfig, std: float = 0.2) -> VisionTransformer:
    return randomize(VisionTransformer(cfg), std)


@pytest.mark.parametrize(
    "cfg",
    [
        tiny(),
        tiny(classifier="gap", representation_size=32, act="gelu_tanh"),
        tiny(posemb="sincos2d", classifier="gap", num_classes=0),
        tiny(
            image_size=64, patch_size=1, resnet=vitkit.ResNetConfig(num_layers=(1,)), num_layers=1
        ),
        tiny(classifier="map", representation_size=32),
    ],
    ids=["token", "gap-rep-tanh", "sincos-headless", "hybrid", "map-rep"],
)
def test_our_format_round_trip(tmp_path, cfg: ModelConfig) -> None:
    model = randomized(cfg, std=0.05)
    names = [f"class {i}" for i in range(cfg.num_classes)]  # one per class; none if headless
    out = vitkit.save(model, tmp_path / "ckpt", class_names=names)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["format"] == "vitkit" and meta["model"]["hidden_size"] == 64
    assert meta.get("class_names") == (names or None)
    loaded = vitkit.load(out)
    assert loaded.cfg == cfg
    x = torch.randn(2, 3, cfg.image_size, cfg.image_size)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_our_weights_file_reads_as_our_directory(tmp_path) -> None:
    """Our model.safetensors named alone reads the config.json beside it: what a timm-style state
    dict cannot say (pooling, eps, a non-square grid) and the class names."""
    cfg = tiny(classifier="gap", layer_norm_eps=1e-5, image_size=(32, 48))
    model = randomized(cfg, std=0.05)
    out = vitkit.save(model, tmp_path / "ckpt", class_names=[f"c{i}" for i in range(10)])
    weights = out / "model.safetensors"
    read_cfg, _, meta = read(weights)
    assert read_cfg == cfg and meta.to_dict() == {"class_names": [f"c{i}" for i in range(10)]}
    loaded = vitkit.load(str(weights))
    assert loaded.cfg == cfg
    x = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    (out / "config.json").write_text('{"model_type": "vit"}')  # not ours: a plain state dict
    with pytest.raises(CheckpointError, match="num_heads"):
        vitkit.load(weights)


def test_save_leaves_no_temporary_files(tmp_path) -> None:
    vitkit.save(randomized(tiny()), tmp_path)
    vitkit.save(randomized(tiny()), tmp_path)  # overwrite in place
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]


def test_written_files_take_the_umask(tmp_path) -> None:
    """A checkpoint's files get ``0o666`` less the umask, as ``open`` gives; they were ``0o600``
    whatever the umask (mkstemp's), so a teammate or a shared cache could not read them."""
    model = randomized(tiny(hidden_size=16, mlp_dim=32, num_layers=1))
    for umask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        previous = os.umask(umask)
        try:
            out = vitkit.save(model, tmp_path / f"umask{umask:o}")
        finally:
            os.umask(previous)
        for name in ("config.json", "model.safetensors"):
            assert stat.S_IMODE((out / name).stat().st_mode) == mode, (name, oct(umask))


# vitkit.save of a model whose weights (59 KiB) do not fit under a file size limit of 4 KiB.
_SAVE_PAST_THE_LIMIT = """
import sys
import vitkit
from vitkit.config import ModelConfig
cfg = ModelConfig(image_size=16, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
                  mlp_dim=64, num_classes=2)
try:
    vitkit.save(vitkit.create_model(cfg), sys.argv[1])
except OSError as e:
    print(type(e).__name__, e.errno, e.filename)
"""


def test_a_full_disk_is_the_os_error_naming_the_file(tmp_path) -> None:
    """Weights written past a file size limit (EFBIG; a full disk's ENOSPC alike): an ``OSError``
    with its errno, naming the file, which the command line reports in one line, and nothing left
    behind. It was safetensors' ``SafetensorError``, a traceback with the errno in its text only.
    (torch's ``RuntimeError`` for the training state: test_train.py.)"""
    proc = subprocess.run(
        [sys.executable, "-c", _SAVE_PAST_THE_LIMIT, str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, preexec_fn=file_size_limit(4096),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"OSError {errno.EFBIG} {tmp_path / 'out' / 'model.safetensors'}\n"
    assert os.listdir(tmp_path / "out") == []


def test_a_text_file_replaces_a_link_and_a_folder_is_refused(tmp_path) -> None:
    """``atomic_write_text`` (``fewshot --json``, inspect's pages) writes beside the name and
    renames: a link there is replaced, its target untouched; a folder there is one line."""
    from vitkit.errors import UserFileError
    from vitkit.files import atomic_write_text

    target, link = tmp_path / "target", tmp_path / "results.json"
    target.write_text("keep")
    link.symlink_to(target)
    assert atomic_write_text(link, "{}\n") == link
    assert (link.read_text(), link.is_symlink(), target.read_text()) == ("{}\n", False, "keep")
    with pytest.raises(UserFileError, match=rf"^{tmp_path} is a folder: expected the name of a "):
        atomic_write_text(tmp_path, "{}")


def test_atomic_directory_replaces_whole_or_not_at_all(tmp_path, monkeypatch) -> None:
    from vitkit.files import atomic_directory

    target = tmp_path / "out"
    for version in ("one", "two"):  # a new directory, then one that replaces it
        with atomic_directory(target) as tmp:
            assert tmp.parent == tmp_path and tmp.name.startswith(".tmp-")
            assert not target.exists() or (target / "v").read_text() != version  # not yet
            (tmp / "v").write_text(version)
        assert os.listdir(tmp_path) == ["out"] and os.listdir(target) == ["v"]
        assert (target / "v").read_text() == version
    with pytest.raises(RuntimeError, match="killed"), atomic_directory(target) as tmp:
        (tmp / "v").write_text("three")
        raise RuntimeError("killed mid-write")
    assert os.listdir(tmp_path) == ["out"] and (target / "v").read_text() == "two"
    real_replace, calls = os.replace, []

    def second_rename_fails(src, dst) -> None:
        calls.append(dst)
        if len(calls) == 2:  # the old one is aside, the new one cannot take its place
            raise OSError("disk gone")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_rename_fails)
    with pytest.raises(OSError, match="disk gone"), atomic_directory(target) as tmp:
        (tmp / "v").write_text("three")
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["out"] and (target / "v").read_text() == "two"
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"), atomic_directory(tmp_path / "file"):
        pass
    assert sorted(os.listdir(tmp_path)) == ["file", "out"]


def test_a_kill_between_the_two_renames_of_a_directory_loses_neither(tmp_path) -> None:
    """Killed between moving the old directory aside and renaming the new one into place: no
    ``out``, the old one and the new one whole beside it. The next start used to delete both
    (best/, or a re-saved checkpoint, gone for good); it puts the new one in place, or the old
    one where the new one is gone, then deletes the leftovers."""
    from vitkit.files import remove_partial_directories

    for kept, present in [("new", ("", "-old")), ("old", ("-old",))]:
        parent = tmp_path / kept
        for suffix in present:
            (parent / f".tmp-out-deadbeef{suffix}").mkdir(parents=True)
            (parent / f".tmp-out-deadbeef{suffix}" / "v").write_text("old" if suffix else "new")
        (parent / ".tmp-best-0123abcd").mkdir()  # killed mid-write: deleted
        remove_partial_directories(parent)
        assert os.listdir(parent) == ["out"] and (parent / "out" / "v").read_text() == kept


def test_our_keys_load_into_timm(tmp_path) -> None:
    model = randomized(tiny())
    peer = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=10
    ).eval()
    peer.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (peer(x) - model(x)).abs().max() <= 1e-5


@pytest.mark.parametrize("suffix", [".pth", ".safetensors", ".bin"])
def test_timm_state_dict_files(tmp_path, suffix: str) -> None:
    peer = timm.models.vision_transformer.VisionTransformer(
        img_size=32,
        patch_size=8,
        embed_dim=192,
        depth=12,
        num_heads=3,
        mlp_ratio=4.0,
        num_classes=3,
    )
    randomize(peer, std=0.05, seed=1)
    path = tmp_path / f"timm{suffix}"
    if suffix == ".safetensors":
        save_file({k: v.contiguous() for k, v in peer.state_dict().items()}, str(path))
    else:
        torch.save(peer.state_dict(), path)
    model = vitkit.load(path)  # heads from the Ti preset
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (model(x) - peer(x)).abs().max() <= 1e-5


def test_heads_or_posemb_the_checkpoint_records_otherwise_are_refused(tmp_path) -> None:
    """``num_heads`` and ``posemb`` are for checkpoints that lack them: one that records another
    value is refused in one line, not silently kept (before: ignored, exit 0)."""
    model = randomized(tiny())  # 4 heads, learned position embeddings
    vitkit.save(model, tmp_path / "m")
    assert vitkit.load(tmp_path / "m", num_heads=4, posemb="learn").cfg == model.cfg
    with pytest.raises(ConfigError, match="num_heads=2 but the checkpoint records 4 heads"):
        vitkit.load(tmp_path / "m", num_heads=2)
    with pytest.raises(ConfigError, match="posemb='sincos2d' but the checkpoint"):
        vitkit.load(tmp_path / "m", posemb="sincos2d")
    with pytest.raises(ConfigError, match="posemb='bogus': expected one of learn, sincos2d"):
        vitkit.load(tmp_path / "m", posemb="bogus")  # type: ignore[arg-type]
    for heads in (0, 2.0, True):
        with pytest.raises(ConfigError, match="expected a positive whole number"):
            vitkit.load(tmp_path / "m", num_heads=heads)  # type: ignore[arg-type]


def test_save_and_read_image_name_a_wrong_argument(tmp_path) -> None:
    """``save(model, None)`` and ``read_image(path, None)`` were a TypeError from pathlib and an
    AttributeError from inside; ``read_image`` of a folder named a file descriptor."""
    model = randomized(tiny())
    with pytest.raises(ConfigError, match=r"save\(model, NoneType\): expected a path to write"):
        vitkit.save(model, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"read_image\(path, str\): expected the model"):
        vitkit.read_image(tmp_path / "x.png", "ViT-Ti/16")  # type: ignore[arg-type]
    (tmp_path / "folder.png").mkdir()  # was "[Errno 21] Is a directory: 3", a descriptor
    with pytest.raises(VitkitError, match=r"folder\.png is not a regular file$"):
        vitkit.read_image(tmp_path / "folder.png", model)


def test_load_at_another_image_size(tmp_path) -> None:
    model = randomized(tiny())
    vitkit.save(model, tmp_path)
    bigger = vitkit.load(tmp_path, image_size=48)
    assert bigger.cfg.image_size == 48 and bigger.pos_embed.shape == (1, 1 + 36, 64)
    model.resize_pos_embed(6)
    torch.testing.assert_close(bigger.pos_embed, model.pos_embed)
    with pytest.raises(ValueError, match="not a multiple"):
        vitkit.load(tmp_path, image_size=50)


def test_a_loaded_model_fine_tuned_and_saved_keeps_what_its_checkpoint_records(
    tmp_path, capsys
) -> None:
    """Issue 46: ``vitkit.load`` dropped the class names and preprocessing, so ``vitkit.save`` of
    a loaded and fine-tuned model wrote a checkpoint that ``vitkit predict`` showed as class
    indices (``1 0.267 3 0.250 ...``). Now save writes what the checkpoint records, as far as it
    is still true of the model: the names go with the head (``reset_head`` drops them), the
    preprocessing follows the model's image size."""
    from PIL import Image

    from vitkit.cli import main
    from vitkit.data import Preprocess
    from vitkit.data.image_file import read_image

    names = ["cat", "dog", "ship"]
    preprocess = Preprocess(image_size=32, resize="bicubic")
    checkpoint = vitkit.save(
        randomized(tiny(num_classes=3)),
        tmp_path / "first",
        class_names=names,
        pretrained="ViT-Ti/16@augreg-in21k",
        preprocess=preprocess,
    )
    model = vitkit.load(checkpoint).train()
    g = torch.Generator().manual_seed(0)
    images, labels = torch.randn(4, 3, 32, 32, generator=g), torch.tensor([0, 1, 2, 0])
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):  # fine-tuning: two steps
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    tuned = vitkit.save(model.eval(), tmp_path / "tuned")

    photo = tmp_path / "photo.png"
    Image.fromarray(torch.randint(0, 256, (40, 56, 3), generator=g).byte().numpy()).save(photo)
    with torch.no_grad():
        top = int(model(read_image(photo, preprocess)).argmax())
    assert main(["predict", str(tuned), str(photo), "--json", "--device", "cpu"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["top"][0]["label"] == names[top]
    assert {t["label"] for t in entry["top"]} == set(names)
    _, _, meta = read(tuned)
    assert (meta.class_names, meta.pretrained, meta.preprocess) == (
        tuple(names),
        "ViT-Ti/16@augreg-in21k",
        preprocess,
    )
    # given ones win; an empty list writes none
    _, _, meta = read(vitkit.save(model, tmp_path / "renamed", class_names=["a", "b", "c"]))
    assert meta.class_names == ("a", "b", "c") and meta.preprocess == preprocess
    _, _, meta = read(vitkit.save(model, tmp_path / "nameless", class_names=[]))
    assert meta.class_names is None and meta.preprocess == preprocess

    model.resize_pos_embed(6)  # 48 px: the preprocessing's size follows the model's
    model.reset_head(3)  # a new head for other classes, though as many: the names are not its
    _, _, meta = read(vitkit.save(model, tmp_path / "new-head"))
    assert meta.class_names is None and meta.pretrained == "ViT-Ti/16@augreg-in21k"
    assert meta.preprocess == Preprocess(image_size=48, resize="bicubic")
    # a model load did not build records nothing it was not given
    _, _, meta = read(vitkit.save(randomized(tiny(num_classes=3)), tmp_path / "fresh"))
    assert (meta.class_names, meta.pretrained, meta.preprocess) == (None, None, None)


def test_read_image_preprocesses_as_the_loaded_checkpoint_records(tmp_path) -> None:
    """``vitkit.read_image(path, model)``: the checkpoint's recorded preprocessing (here bicubic,
    not the official bilinear), at the model's size now; the official one for a model ``load``
    did not build; a photo stored turned comes out upright (EXIF); a broken file is one line."""
    from PIL import Image

    from helpers import exif_photo
    from vitkit.data import Preprocess
    from vitkit.data.image_file import read_image
    from vitkit.errors import VitkitError

    g = torch.Generator().manual_seed(0)
    upright = Image.fromarray(torch.randint(0, 256, (40, 56, 3), generator=g).byte().numpy())
    photo = exif_photo(tmp_path / "turned.png", upright, 6, fmt="PNG")  # stored turned
    bicubic = Preprocess(image_size=32, resize="bicubic")
    model = vitkit.load(vitkit.save(randomized(tiny()), tmp_path / "ckpt", preprocess=bicubic))
    image = vitkit.read_image(photo, model)
    assert image.shape == (1, 3, 32, 32)
    assert torch.equal(image, read_image(photo, bicubic))
    assert not torch.equal(image, read_image(photo, Preprocess(image_size=32)))
    assert torch.equal(vitkit.read_image(photo, bicubic), image)
    fresh = randomized(tiny())  # not loaded: the official preprocessing at its resolution
    assert torch.equal(
        vitkit.read_image(photo, fresh), read_image(photo, Preprocess(image_size=32))
    )
    as_taken = exif_photo(tmp_path / "upright.png", upright, 1, fmt="PNG")
    assert torch.equal(image, vitkit.read_image(as_taken, model))
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 not a JPEG")
    with pytest.raises(VitkitError, match=r"cannot read image .*broken\.jpg"):
        vitkit.read_image(tmp_path / "broken.jpg", model)


def test_load_at_a_non_square_image_size(tmp_path) -> None:
    model = randomized(tiny())  # 32x32 images, 8 px patches: a 4x4 grid
    vitkit.save(model, tmp_path)
    wide = vitkit.load(tmp_path, image_size=(24, 48))
    assert wide.cfg.image_size == (24, 48) and wide.pos_embed.shape == (1, 1 + 3 * 6, 64)
    model.resize_pos_embed((3, 6))  # the same resize, by hand
    assert wide.cfg == model.cfg
    x = torch.randn(2, 3, 24, 48, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(wide(x), model(x))
    assert vitkit.load(tmp_path, image_size=(40, 40)).cfg.image_size == 40  # a square pair
    with pytest.raises(ConfigError, match=r"image_size=\(24, 50\) is not a multiple .* 8"):
        vitkit.load(tmp_path, image_size=(24, 50))
    with pytest.raises(ConfigError, match=r"image_size=\(24, 48, 8\) is not valid"):
        vitkit.load(tmp_path, image_size=(24, 48, 8))


def test_mismatched_checkpoint_lists_everything(tmp_path) -> None:
    state = randomized(tiny()).state_dict()
    state.pop("norm.bias")
    state["extra.weight"] = torch.zeros(3)
    state["blocks.0.mlp.fc1.bias"] = torch.zeros(7)
    model = VisionTransformer(tiny())
    from vitkit.io.checkpoint import load_state_dict_strict

    with pytest.raises(CheckpointError) as err:
        load_state_dict_strict(model, state)
    msg = str(err.value)
    assert "norm.bias" in msg and "extra.weight" in msg
    assert "blocks.0.mlp.fc1.bias: model (128,) vs checkpoint (7,)" in msg


def test_mismatch_lists_ten_names_of_each_kind_and_counts_the_rest() -> None:
    from vitkit.io.checkpoint import check_state_dict

    expected = {f"model.{i}": torch.zeros(1) for i in range(25)}
    expected |= {f"both.{i}": torch.zeros(2) for i in range(12)}
    found = {f"file.{i}": torch.zeros(1) for i in range(11)}
    found |= {f"both.{i}": torch.zeros(3) for i in range(12)}
    with pytest.raises(CheckpointError) as err:
        check_state_dict(expected, found)
    missing, unexpected, mismatched = str(err.value).split(" | ")
    assert missing.endswith(
        "missing from the checkpoint (25): "
        + ", ".join(f"model.{i}" for i in range(10))
        + ", ... and 15 more"
    )
    assert unexpected == (
        "not in the model (11): " + ", ".join(f"file.{i}" for i in range(10)) + ", ... and 1 more"
    )
    assert mismatched.startswith("shape mismatch (12): both.0: model (2,) vs checkpoint (3,); ")
    assert mismatched.endswith("both.9: model (2,) vs checkpoint (3,); ... and 2 more")


NARROW = {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "mlp_dim": 32}


@pytest.mark.parametrize(
    ("cfg", "claims", "match"),
    [
        (tiny(**NARROW), {"num_layers": 20000}, "num_layers=20000, the weights hold 1 layer "),
        (
            tiny(**NARROW),
            {"mlp_dim": 2**30},  # within the bound of 10^11 weights
            r"blocks\.0\.mlp\.fc1\.weight: model \(1073741824, 16\) vs \S+ \(32, 16\)",
        ),
        (
            tiny(
                **NARROW,
                image_size=64,
                patch_size=1,
                resnet=vitkit.ResNetConfig(num_layers=(1,), width_factor=0.5),
            ),
            {"resnet": {"num_layers": [2000], "width_factor": 0.5}},
            r"resnet\.num_layers\[0\]=2000, the weights hold 1 layer ",
        ),
    ],
    ids=["20000-layers", "mlp-2^30", "2000-resnet-units"],
)
def test_config_that_claims_more_than_its_weights_is_refused_before_building(
    tmp_path, cfg: ModelConfig, claims: dict, match: str
) -> None:
    """A config.json whose model is larger than its weights is refused from the weights' names
    and shapes, before the model is built. An MLP of 2**30 units (and 2**50 before the bound of
    10^11 weights) cannot be allocated here: built first, it was a DefaultCPUAllocator traceback. The issue's config (hidden 8192,
    mlp 32768, 4 layers: 12.9 GB) beside a 16-wide model's weights, `vitkit summary` under an 8 GB
    address-space cap: that traceback after 7 s at 4.0 GB resident; now the one-line mismatch in
    8 ms, the process at 0.77 GB (importing vitkit). 20,000 blocks 16 wide took 21 s to build
    and listed 240,000 missing names."""
    vitkit.save(VisionTransformer(cfg), tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["model"] |= claims
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=match):
        vitkit.load(tmp_path)


def test_class_names_as_one_string_are_refused_not_read_a_character_each(tmp_path) -> None:
    model = VisionTransformer(tiny(num_layers=1, num_classes=4))
    with pytest.raises(ConfigError, match=r"^class_names='abcd': expected a list of names"):
        vitkit.save(model, tmp_path, class_names="abcd")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("names", "match"),
    [
        (7, r"class_names: expected a list of 10 strings \(one per class\), found 7$"),
        (["cat", "dog"], "2 class_names for a model with num_classes=10: expected one name per"),
        (list(range(10)), r"class_names: expected a list of 10 strings .*found \[0, 1, 2, 3, 4, 5"),
        (["cat"] * 10, r"class_names must be distinct, found \['cat'\]"),
        (  # a name of megabytes reached the terminal as one line
            [f"{k}" for k in range(9)] + ["x" * 1001],
            r"class_names: class 9's name has 1,001 characters \('x{20}'...\(961 characters\)"
            r"...'x{20}'\): expected at most 1,000$",
        ),
    ],
    ids=["number", "short", "numbers", "repeated", "long"],
)
def test_recorded_class_names_are_checked_on_reading(tmp_path, names, match: str) -> None:
    vitkit.save(VisionTransformer(tiny(num_layers=1)), tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**meta, "class_names": names}))
    with pytest.raises(CheckpointError, match=match) as err:
        read(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'config.json'}: ")


@pytest.mark.parametrize(
    ("image_size", "match"),
    [
        (
            10**6,
            r"expected each side a multiple of the patch stride 8, at most 4 times the model's "
            r"\(128 x 128\)$",
        ),
        (36, "a multiple of the patch stride 8"),
        ([32, 136], r"image_size=\(32, 136\)"),
        ("big", "image_size='big' is not valid"),
    ],
    ids=["terabytes", "stride", "one-side", "not-a-size"],
)
def test_a_recorded_preprocessing_size_is_checked_on_reading(tmp_path, image_size, match) -> None:
    """A checkpoint's ``preprocess.image_size`` of 10^6 made ``predict`` allocate 3 TB, and 6,000
    hung on one 32-pixel image: it is checked against the model when the checkpoint is read
    (each side a multiple of the patch stride, at most 4 times the model's own), in one line
    naming the checkpoint; writing one is refused the same way."""
    from vitkit.data import Preprocess
    from vitkit.io.api import load_with_meta

    model = VisionTransformer(tiny(num_layers=1))
    vitkit.save(model, tmp_path, preprocess=Preprocess(image_size=(32, 128)))  # 4 times: allowed
    assert load_with_meta(tmp_path)[1].to_dict()["preprocess"]["image_size"] == [32, 128]
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["preprocess"]["image_size"] = image_size
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=match) as err:
        load_with_meta(tmp_path)
    assert str(err.value).startswith(f"{tmp_path}: preprocess") and "\n" not in str(err.value)
    if isinstance(image_size, int):
        with pytest.raises(ConfigError, match=match):
            vitkit.save(model, tmp_path / "again", preprocess=Preprocess(image_size=image_size))


@pytest.mark.parametrize(
    ("posemb", "image_size", "why"),
    [
        ("sincos2d", 10**6, "expected at most 4096 pixels a side"),
        ("none", 2056, "expected at most 65,536 tokens, found 257 x 257 patches of 8 pixels"),
    ],
)
def test_a_checkpoints_image_size_is_bounded_where_no_weight_ties_it(
    tmp_path, posemb: str, image_size: int, why: str
) -> None:
    """No weight of a sin-cos (or no) posemb model ties its image size, so config.json alone
    set it: 10^6 made ``predict`` allocate 21.8 GB, and 6,000 hung on one 20-pixel image. It
    is refused in one line naming the checkpoint; a training run reads its own checkpoints as
    its config.json recorded them (a run begun before the bound resumes)."""
    from vitkit.io.checkpoint import read_our_config

    vitkit.save(VisionTransformer(tiny(posemb=posemb, classifier="gap", num_layers=1)), tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["model"]["image_size"] = image_size
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as err:
        vitkit.load(tmp_path)
    assert str(err.value) == (
        f"{tmp_path / 'config.json'}: model.image_size={image_size} is not valid: {why}"
    )
    assert read_our_config(tmp_path, own_run=True)[0].image_size == image_size


def test_a_checkpoints_model_size_is_bounded_before_anything_is_built(tmp_path) -> None:
    """hidden_size=10^9 in config.json overflowed torch's size arithmetic building even the
    shape-only model: a traceback in predict and summary. It is one line naming the file."""
    vitkit.save(VisionTransformer(tiny(num_layers=1)), tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["model"]["hidden_size"] = 10**9
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as err:
        vitkit.load(tmp_path)
    assert str(err.value).startswith(
        f"{tmp_path / 'config.json'}: model.hidden_size=1000000000 is not valid: expected a "
        "model of at most 100,000,000,000 parameters"
    )


def test_missing_file_and_unknown_type(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        vitkit.load(tmp_path / "nope.npz")
    (tmp_path / "weights.h5").write_bytes(b"x")
    with pytest.raises(CheckpointError, match=r"unknown checkpoint type '\.h5'"):
        vitkit.load(tmp_path / "weights.h5")
    (tmp_path / "d").mkdir()
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        vitkit.load(tmp_path / "d")


@pytest.mark.parametrize("suffix", [".safetensors", ".pth", ".npz"])
def test_truncated_files(tmp_path, suffix: str) -> None:
    model = randomized(tiny())
    path = tmp_path / f"w{suffix}"
    if suffix == ".safetensors":
        save_file(model.state_dict(), str(path))
    elif suffix == ".pth":
        torch.save(model.state_dict(), path)
    else:
        import numpy as np

        np.savez(path, **{"embedding/kernel": np.zeros((8, 8, 3, 64), np.float32)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        vitkit.load(path)


def test_pickle_with_objects_is_refused(tmp_path) -> None:
    path = tmp_path / "evil.pth"
    torch.save({"args": argparse.Namespace(lr=1), "w": torch.zeros(1)}, path)
    with pytest.raises(CheckpointError, match="refusing to load"):
        vitkit.load(path)


def test_state_dict_of_unknown_layout(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="unrecognised state dict"):
        vitkit.load({"fc.weight": torch.zeros(2, 2)})


def test_our_config_with_unknown_key(tmp_path) -> None:
    vitkit.save(randomized(tiny()), tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["model"]["hiden_size"] = meta["model"].pop("hidden_size")
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="did you mean 'hidden_size'"):
        vitkit.load(tmp_path)


def test_resized_non_square_model_saves_loads_and_fine_tunes(tmp_path) -> None:
    model = randomized(tiny())
    model.resize_pos_embed((3, 6))  # 32x32 -> 24x48 images
    assert model.cfg.image_size == (24, 48) and model.pos_embed.shape == (1, 1 + 18, 64)
    vitkit.save(model, tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    assert meta["model"]["image_size"] == [24, 48]  # JSON has no tuples
    loaded = vitkit.load(tmp_path)
    assert loaded.cfg == model.cfg
    x = torch.randn(2, 3, 24, 48, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    # one fine-tuning step at 24x48 reaches the resized position embeddings
    loaded.train()
    optimizer = torch.optim.SGD(loaded.parameters(), lr=0.1)
    loss = torch.nn.functional.cross_entropy(loaded(x), torch.tensor([1, 2]))
    loss.backward()
    assert loaded.pos_embed.grad.shape == (1, 19, 64) and loaded.pos_embed.grad.abs().sum() > 0
    optimizer.step()
    with torch.no_grad():
        assert torch.nn.functional.cross_entropy(loaded(x), torch.tensor([1, 2])) < loss


# A config.json as vitkit wrote it before ResNet widths could be fractional (an integer factor).
OLD_HYBRID_CONFIG = """{
  "format": "vitkit",
  "version": 1,
  "model": {
    "image_size": 32, "patch_size": 1, "hidden_size": 32, "num_layers": 1, "num_heads": 2,
    "mlp_dim": 64, "num_classes": 10, "in_chans": 3, "classifier": "token",
    "representation_size": null, "dropout_rate": 0.0, "attention_dropout_rate": 0.0,
    "drop_path_rate": 0.0, "posemb": "learn", "act": "gelu", "layer_norm_eps": 1e-06,
    "head_bias_init": 0.0, "resnet": {"num_layers": [1], "width_factor": 1}, "arch": "vit"
  }
}"""


def test_old_config_with_integer_width_factor_loads(tmp_path) -> None:
    cfg = tiny(
        image_size=32,
        patch_size=1,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        mlp_dim=64,
        resnet=vitkit.ResNetConfig(num_layers=(1,)),
    )
    model = randomized(cfg, std=0.05)
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "model.safetensors"
    )
    (tmp_path / "config.json").write_text(OLD_HYBRID_CONFIG)
    loaded = vitkit.load(tmp_path)
    assert loaded.cfg == cfg and loaded.cfg.resnet.width == 64
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_timm_hybrid_width_is_inferred() -> None:
    # timm's ResNetV2 at width_factor 0.5 has the official 32-channel root (same key layout).
    from functools import partial

    from timm.layers import StdConv2dSame
    from timm.models.resnetv2 import ResNetV2
    from timm.models.vision_transformer_hybrid import HybridEmbed

    backbone = ResNetV2(
        layers=(1, 1),
        num_classes=0,
        global_pool="",
        preact=False,
        stem_type="same",
        conv_layer=StdConv2dSame,
        width_factor=0.5,
    )
    peer = timm.models.vision_transformer.VisionTransformer(
        img_size=32,
        patch_size=1,
        embed_dim=32,
        depth=1,
        num_heads=2,
        num_classes=3,
        embed_layer=partial(HybridEmbed, backbone=backbone),
    )
    model = vitkit.load(peer)
    assert model.cfg.resnet == vitkit.ResNetConfig(num_layers=(1, 1), width_factor=0.5)
    ours = model.state_dict()
    assert all(torch.equal(ours[k], v) for k, v in peer.state_dict().items())


EARLIER = Path(__file__).parent / "data" / "folder_v1" / "run" / "checkpoints" / "step_00000002"


def test_an_earlier_checkpoints_metadata_reads_by_attribute() -> None:
    """What travels with the weights of a checkpoint an earlier vitkit wrote (its run before data
    specs: ``data.data_dir``) reads as one typed ``WeightsMeta``, its run a ``RunConfig``; written
    back, its entries are the file's, the run in today's form."""
    from vitkit.config import RunConfig
    from vitkit.data import Preprocess
    from vitkit.io.metadata import WeightsMeta

    recorded = json.loads((EARLIER / "config.json").read_text())
    cfg, _, meta = read(EARLIER)
    assert meta == WeightsMeta.from_dict(recorded, cfg, source="s", file="f")
    assert meta.class_names == ("circle", "stripe") and meta.wnids is meta.pretrained is None
    assert meta.preprocess == Preprocess(image_size=16)
    assert meta.run == RunConfig.from_dict(recorded["run"]) and meta.trained_on == "images"
    kept = {key: recorded[key] for key in ("class_names", "preprocess")}
    assert meta.to_dict() == {**kept, "run": meta.run.to_dict()}


def test_what_travels_with_weights_round_trips_through_config_json(tmp_path: Path) -> None:
    """Every entry of ``WeightsMeta`` is written beside ``format``, ``version`` and ``model`` under
    its own name, as JSON, and reads back equal; an empty one writes nothing."""
    from vitkit.data import Preprocess
    from vitkit.files import sha256_of
    from vitkit.io.checkpoint import write_ours
    from vitkit.io.metadata import WeightsMeta
    from vitkit.recipes import get_recipe

    run = get_recipe("smoke")
    meta = WeightsMeta(
        class_names=("a", "b", "c", "d"),
        wnids=("n00000000", "n00000001", "n00000002", "n00000003"),
        pretrained="ViT-mu/16@test",
        preprocess=Preprocess(image_size=(16, 32), resize="bicubic"),
        run=run,
    )
    write_ours(run.model, VisionTransformer(run.model).state_dict(), tmp_path, meta)
    written = json.loads((tmp_path / "config.json").read_text())
    entries = json.loads(json.dumps(meta.to_dict()))
    digests = {"model.safetensors": sha256_of(tmp_path / "model.safetensors")}
    assert written == {
        "format": "vitkit",
        "version": 1,
        "model": written["model"],
        **entries,
        "sha256": digests,
    }
    assert set(entries) == {"class_names", "wnids", "pretrained", "preprocess", "run"}
    assert read(tmp_path)[2] == meta
    assert WeightsMeta.from_dict(entries, run.model, source="s", file="f") == meta
    assert (
        WeightsMeta().to_dict() == {}
        and read(vitkit.save(VisionTransformer(tiny()), tmp_path / "bare"))[2] == WeightsMeta()
    )


@pytest.mark.parametrize(
    ("entry", "value", "said"),
    [
        ("class_names", ["a", "b"], "{file}: 2 class_names for a model with num_classes=4: "),
        ("wnids", "n00000000", "{file}: wnids: expected a list of 4 strings (one per class), "),
        ("pretrained", 7, "{file}: pretrained: expected the registry name of the weights' "),
        ("preprocess", {"image_size": 10**6}, "{ckpt}: preprocess image_size=1000000 for a "),
        ("run", "smoke", "{file}: run: RunConfig: expected a mapping, found str"),
        ("run", {"optimizer": {}}, "{file}: run: unknown config key 'optimizer' (did you mean"),
    ],
    ids=["class_names", "wnids", "pretrained", "preprocess", "run", "run-key"],
)
def test_a_bad_entry_beside_the_weights_is_refused_in_one_line(
    tmp_path: Path, entry: str, value: object, said: str
) -> None:
    """Each entry is checked when the checkpoint is read, in one line naming the file (the
    preprocessing: the checkpoint); a run that is not a run config is refused there too, not
    where a verb first reads it."""
    from vitkit.io.checkpoint import write_ours
    from vitkit.io.metadata import WeightsMeta
    from vitkit.recipes import get_recipe

    run = get_recipe("smoke")
    ckpt = tmp_path / "ckpt"
    write_ours(run.model, VisionTransformer(run.model).state_dict(), ckpt, WeightsMeta(run=run))
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**config, entry: value}))
    with pytest.raises(CheckpointError) as err:
        read(ckpt)
    assert str(err.value).startswith(said.format(file=ckpt / "config.json", ckpt=ckpt))
    assert "\n" not in str(err.value)
