"""The registry of pretrained weights: names, what each entry says, and the one-line paths to
them (``create_model(pretrained=)``, ``load("PRESET@TAG")``, ``vitkit pretrained``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from vitkit.config import ConfigError
from vitkit.io.pretrained import (
    DEFAULT_TAG,
    I1K,
    I21K,
    REGISTRY,
    Pretrained,
    find,
    for_preset,
    imagenet21k_classes,
    list_pretrained,
    listed_range,
)
from vitkit.presets import get_config

if TYPE_CHECKING:
    from http_server import FileServer
    from vitkit.model import VisionTransformer


def test_every_entry_names_a_preset_a_file_and_its_source() -> None:
    assert len(REGISTRY) == 39
    for name, entry in REGISTRY.items():
        assert name == f"{entry.preset}@{entry.tag}"
        cfg = get_config(entry.preset)  # the architecture preset exists
        assert entry.image_size % cfg.total_stride == 0
        assert entry.path.endswith(".npz") and entry.source
        # the classes follow from the data it was trained on last, and its head has as many
        assert {"ImageNet-1k": 1000, "ImageNet-21k": 21843}[entry.classes] == entry.num_classes
        assert (entry.fine_tuned_on is None) == (entry.num_classes != 1000 or "sam" in entry.tag)
        assert entry.top1 is None or 0.7 < entry.top1 < 0.9
        # a listed size bounds the file, within its rounding; only the AugReg fine-tunes have none
        assert (entry.size_range is None) == (entry.tag == "augreg-in21k-in1k-384")
    # the paper's models pre-trained on ImageNet-21k and their ImageNet fine-tunes
    for preset in ("ViT-B/16", "ViT-B/32", "ViT-L/16", "ViT-L/32", "ViT-H/14", "R50+ViT-B/16"):
        assert f"{preset}@in21k" in REGISTRY
    for name in ("ViT-B/16", "ViT-B/32", "ViT-L/16", "ViT-L/32", "R50+ViT-B/16"):
        assert REGISTRY[f"{name}@in21k-in1k-384"].image_size == 384
    assert REGISTRY["ViT-B/16@in21k-in1k-224"].top1 == 0.812  # the README's changelog


def test_a_listed_size_allows_one_unit_of_its_last_digit_either_side() -> None:
    mib, gib = 1 << 20, 1 << 30
    for listed, value, unit in [("393.69 MiB", "393.69", mib), ("331.4 MiB", "331.4", mib),
                                ("1.22 GiB", "1.22", gib), ("1243 MiB", "1243", mib)]:  # fmt: skip
        low, high = listed_range(listed)
        step = 10 ** -len(value.partition(".")[2])
        assert low <= float(value) * unit <= high
        assert not low <= (float(value) - 1.01 * step) * unit <= high
        assert not low <= (float(value) + 1.01 * step) * unit <= high
    assert listed_range("") is None
    with pytest.raises(ValueError, match=r"found '393\.69 MB'"):
        listed_range("393.69 MB")


def test_urls_follow_the_base_url(monkeypatch) -> None:
    entry = find("ViT-B/16@in21k")
    assert entry.url == "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz"
    monkeypatch.setenv("VITKIT_VIT_MODELS_URL", "http://mirror.local/vit/")
    assert entry.url == "http://mirror.local/vit/imagenet21k/ViT-B_16.npz"


def test_names_take_aliases_and_suggest_the_closest() -> None:
    assert find("vit_base_patch16_224@in21k") is REGISTRY["ViT-B/16@in21k"]
    assert find("ViT-B_16@in21k-in1k-384").image_size == 384
    with pytest.raises(ConfigError, match=r"no pretrained weights named 'ViT-B/16@in21" + "'"):
        find("ViT-B/16@in21")
    with pytest.raises(ConfigError, match="did you mean 'ViT-B/16@in21k'"):
        find("ViT-B/16@in21")
    assert for_preset("ViT-B/16", True).tag == "in21k"
    assert for_preset("vit_tiny_patch16_224", True).name == "ViT-Ti/16@augreg-in21k"
    assert all(f"{preset}@{tag}" in REGISTRY for preset, tag in DEFAULT_TAG.items())
    assert [p.name for p in list_pretrained("*@sam-in1k")][:2] == [
        "ViT-B/16@sam-in1k",
        "ViT-B/32@sam-in1k",
    ]


def test_imagenet21k_classes_are_timms_synsets_and_lemmas() -> None:
    """The shipped file is timm's two files joined: the 21,843 wnids in Google's order, each with
    its lemmas; a name is its lemmas, followed by its wnid where they name several synsets."""
    import gzip
    from importlib.resources import files

    from vitkit.io.pretrained import IMAGENET21K_FILE

    timm_data = pytest.importorskip("timm.data")
    info = Path(timm_data.__file__).parent / "_info"
    wnids = (info / "imagenet21k_goog_synsets.txt").read_text().split()
    lines = (info / "imagenet_synset_to_lemma.txt").read_text().splitlines()
    lemmas = dict(line.split("\t", 1) for line in lines)
    packed = (files("vitkit.io") / "classes" / IMAGENET21K_FILE).read_bytes()
    assert gzip.decompress(packed).decode() == "".join(f"{w}\t{lemmas[w]}\n" for w in wnids)
    names, ours = imagenet21k_classes()
    assert ours == wnids and len(set(wnids)) == 21843
    assert len(set(names)) == 21843 and names[0] == "organism, being"
    plain = [name == lemmas[w] for name, w in zip(names, wnids, strict=True)]
    assert plain.count(False) == 1128  # the synsets of the 525 lemmas that name several
    assert all(
        name == f"{lemmas[w]} ({w})"
        for name, w, is_plain in zip(names, wnids, plain, strict=True)
        if not is_plain
    )
    assert names[wnids.index("n02012849")] == "crane (n02012849)"  # the bird, not the machine


def test_every_file_the_package_reads_is_in_its_wheel() -> None:
    """Every file of the package that is not Python is named by pyproject's package-data, so a
    wheel holds it (setuptools takes only Python files otherwise)."""
    import fnmatch

    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parent.parent
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["vitkit"]
    package = root / "src" / "vitkit"
    files = [
        path.relative_to(package).as_posix()
        for path in package.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc")
    ]
    assert {"io/classes/imagenet21k.tsv.gz", "eval/imagenet_real_labels.json.gz"} <= set(files)
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []


# --- the paths to the weights, end to end, against a server on 127.0.0.1 ----------------------


def _official_file(num_classes: int) -> tuple[VisionTransformer, bytes]:
    """A ViT-mu/16 at 32 px with ``num_classes`` classes, random weights, and its official
    ``.npz``."""
    import dataclasses
    import io

    import numpy as np

    import vitkit
    from helpers import randomize
    from vitkit.io.formats.official import to_official

    cfg = dataclasses.replace(
        get_config("ViT-mu/16"), image_size=32, act="gelu_tanh", num_classes=num_classes
    )
    model = randomize(vitkit.create_model(cfg))
    buffer = io.BytesIO()
    np.savez(buffer, **to_official(model))
    return model, buffer.getvalue()


@contextlib.contextmanager
def _serving(entry: Pretrained, data: bytes, monkeypatch) -> Iterator[FileServer]:
    """``entry`` in the registry, its file ``data`` served by a local stand-in for the official
    bucket."""
    from http_server import FileServer
    from vitkit.io import pretrained

    monkeypatch.setitem(pretrained.REGISTRY, entry.name, entry)
    with FileServer({f"/vit/{entry.path}": data}) as server:
        monkeypatch.setenv("VITKIT_VIT_MODELS_URL", server.url("/vit"))
        yield server


def _listed(data: bytes) -> str:
    return f"{len(data) / 1024:.2f} KiB"  # as gsutil ls -lh lists it


@pytest.fixture()
def served(tmp_path, monkeypatch):
    """A registry entry ``ViT-mu/16@test`` (random weights written in the official layout, 1,000
    classes at 32 px) served by a local stand-in for the official bucket, an empty cache."""
    model, data = _official_file(1000)
    entry = Pretrained(
        "ViT-mu/16", "test", "test/mu.npz", 32, I21K, I1K, 1000, _listed(data), "test"
    )
    monkeypatch.setenv("VITKIT_HOME", str(tmp_path / "home"))
    with _serving(entry, data, monkeypatch) as server:
        yield model, server, tmp_path


@pytest.fixture()
def served_in21k(tmp_path, monkeypatch):
    """A registry entry ``ViT-mu/16@test-in21k``, an ImageNet-21k head (21,843 classes at 32 px,
    random weights, official layout), served as ``served``'s; and the same file's bytes."""
    model, data = _official_file(21843)
    entry = Pretrained(
        "ViT-mu/16", "test-in21k", "test/in21k.npz", 32, I21K, None, 21843, _listed(data), "test"
    )
    with _serving(entry, data, monkeypatch):
        yield model, data


def test_load_by_name_downloads_once_with_class_names_and_preprocessing(served) -> None:
    import torch

    import vitkit
    from vitkit.io.api import read

    model, server, tmp_path = served
    loaded = vitkit.load("ViT-mu/16@test")
    x = torch.rand(2, 3, 32, 32) * 2 - 1  # (B, C, H, W)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    _, _, meta = read("vit_mu16@test")  # an alias: the same entry, from the cache
    assert len(server.gets("/vit/test/mu.npz")) == 1
    assert meta.class_names is not None and len(meta.class_names) == 1000
    assert meta.class_names[:2] == ("tench", "goldfish")
    assert meta.preprocess is not None and meta.preprocess.image_size == 32
    assert meta.pretrained == "ViT-mu/16@test"
    assert (tmp_path / "home" / "weights" / "vit_models" / "test" / "mu.npz").is_file()


def test_create_model_with_pretrained_replaces_the_head_and_resizes_posemb(served) -> None:
    import torch

    import vitkit
    from vitkit.model.posemb import resize_grid

    model, _, _ = served
    same = vitkit.create_model("ViT-mu/16", pretrained="test")
    assert torch.equal(same.head.weight, model.head.weight)
    tuned = vitkit.create_model(
        "ViT-mu/16", pretrained="test", num_classes=5, image_size=64, dropout_rate=0.1
    )
    assert tuned.cfg.num_classes == 5 and tuned.cfg.dropout_rate == 0.1 and tuned.training
    assert torch.count_nonzero(tuned.head.weight) == 0  # zero-initialised, as fine-tuning
    expected = resize_grid(model.pos_embed[:, 1:].detach(), (2, 2), (4, 4))
    torch.testing.assert_close(tuned.pos_embed[:, 1:], expected)
    torch.testing.assert_close(tuned.blocks[0].attn.qkv.weight, model.blocks[0].attn.qkv.weight)
    with pytest.raises(ConfigError, match="pretrained weights fix the architecture"):
        vitkit.create_model("ViT-mu/16", pretrained="test", patch_size=8)


def test_the_command_line_takes_names_and_lists_the_cache(served, capsys) -> None:
    from PIL import Image

    from vitkit.cli import main

    _, server, tmp_path = served
    assert main(["pretrained", "ViT-mu/16@*"]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.startswith("ViT-mu/16@test") and not row.endswith("cached")
    assert main(["pretrained", "--download", "ViT-mu/16@test", "--no-progress"]) == 0
    assert main(["pretrained", "ViT-mu/16@*"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("cached")
    Image.new("RGB", (40, 30), (200, 30, 30)).save(tmp_path / "red.png")
    assert main(["predict", "ViT-mu/16@test", str(tmp_path / "red.png"), "--top", "1"]) == 0
    label = capsys.readouterr().out.split(":", 1)[1].split()[0]
    assert not label.isdigit()  # an ImageNet class name, not an index
    assert main(["summary", "ViT-mu/16@test"]) == 0
    assert "forward      (1, 3, 32, 32) -> (1, 1000)" in capsys.readouterr().out
    assert len(server.gets()) == 1  # one download for all of it
    assert main(["pretrained", "--download", "ViT-mu/16@tset"]) == 2
    assert "did you mean 'ViT-mu/16@test'" in capsys.readouterr().err


def test_offline_without_the_file_is_one_line_naming_where_to_put_it(
    served, monkeypatch, capsys
) -> None:
    from vitkit.cli import main

    _, server, tmp_path = served
    monkeypatch.setenv("VITKIT_OFFLINE", "1")
    assert main(["summary", "ViT-mu/16@test"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and server.url("/vit/test/mu.npz") in err
    assert str(tmp_path / "home" / "weights" / "vit_models" / "test" / "mu.npz") in err
    assert server.gets() == []


def test_a_file_its_listed_size_rules_out_is_not_downloaded(served, monkeypatch) -> None:
    import dataclasses

    import vitkit
    from vitkit.errors import DownloadError
    from vitkit.io import pretrained

    _, _, tmp_path = served
    entry = dataclasses.replace(pretrained.REGISTRY["ViT-mu/16@test"], size="1 KiB")
    monkeypatch.setitem(pretrained.REGISTRY, entry.name, entry)
    with pytest.raises(DownloadError, match=r"expected 0 to 2048 \(its listed size\)"):
        vitkit.load("ViT-mu/16@test")
    folder = tmp_path / "home" / "weights" / "vit_models" / "test"
    assert [p.name for p in folder.iterdir()] == ["mu.npz.lock"]  # no file, part or record


def test_an_imagenet21k_head_predicts_its_synsets_names(served_in21k, tmp_path, capsys) -> None:
    """An ImageNet-21k entry loads with its synsets' names and wnids, and predict prints the name
    of the model's top class; the same file read from a path, which records no source, predicts
    indices, though its head has 21,843 classes too."""
    import json

    import torch
    from PIL import Image

    from vitkit.cli import main
    from vitkit.data import Preprocess
    from vitkit.data.image_file import read_image
    from vitkit.io.api import read

    model, data = served_in21k
    names, wnids = imagenet21k_classes()
    _, _, meta = read("ViT-mu/16@test-in21k")
    assert meta.class_names == tuple(names) and meta.wnids == tuple(wnids)
    assert meta.pretrained == "ViT-mu/16@test-in21k"
    image = tmp_path / "red.png"
    Image.new("RGB", (40, 30), (200, 30, 30)).save(image)
    with torch.no_grad():
        top = int(model(read_image(image, Preprocess(image_size=32))).argmax())

    def predicted(checkpoint: str) -> str:
        capsys.readouterr()  # the download's log line, where an earlier verb sent the log to stdout
        assert main(["predict", checkpoint, str(image), "--top", "1", "--json"]) == 0
        return json.loads(capsys.readouterr().out)[0]["top"][0]["label"]

    assert predicted("ViT-mu/16@test-in21k") == names[top]
    (tmp_path / "in21k.npz").write_bytes(data)
    assert predicted(str(tmp_path / "in21k.npz")) == str(top)


def test_what_is_converted_from_an_imagenet21k_head_keeps_names_wnids_and_source(
    served_in21k, tmp_path, capsys
) -> None:
    """``vitkit convert`` of an ImageNet-21k entry records its names, wnids and name; what is
    converted and exported from that names its classes by their lemmas (predict, the Hugging Face
    config's ``id2label``, the ONNX metadata), with the wnids beside them; a 21,843-class file of
    no recorded source gets none of them."""
    import json

    import torch
    from PIL import Image

    from vitkit.cli import main
    from vitkit.data import Preprocess
    from vitkit.data.image_file import read_image

    transformers = pytest.importorskip("transformers")
    onnx = pytest.importorskip("onnx")
    model, data = served_in21k
    names, wnids = imagenet21k_classes()
    source = "ViT-mu/16@test-in21k"
    ours, hf = tmp_path / "ours", tmp_path / "hf"
    assert main(["convert", source, str(ours)]) == 0
    config = json.loads((ours / "config.json").read_text())
    assert (config["class_names"], config["wnids"], config["pretrained"]) == (names, wnids, source)
    assert main(["convert", str(ours), str(hf), "--format", "hf"]) == 0
    hf_config = transformers.AutoConfig.from_pretrained(hf)
    assert [hf_config.id2label[i] for i in range(21843)] == names
    assert hf_config.wnids == wnids and hf_config.pretrained == source
    assert main(["export", str(hf), "--onnx", str(tmp_path / "m.onnx")]) == 0
    graph = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    props = {p.key: p.value for p in graph.metadata_props}
    assert json.loads(props["class_names"]) == names and json.loads(props["wnids"]) == wnids
    assert props["pretrained"] == source
    image = tmp_path / "red.png"
    Image.new("RGB", (40, 30), (200, 30, 30)).save(image)
    with torch.no_grad():
        top = int(model(read_image(image, Preprocess(image_size=32))).argmax())
    capsys.readouterr()
    assert main(["predict", str(hf), str(image), "--top", "1", "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)[0]["top"][0]
    assert (predicted["label"], predicted["wnid"]) == (names[top], wnids[top])
    (tmp_path / "in21k.npz").write_bytes(data)
    assert main(["convert", str(tmp_path / "in21k.npz"), str(tmp_path / "other")]) == 0
    config = json.loads((tmp_path / "other" / "config.json").read_text())
    assert not {"class_names", "wnids", "pretrained"} & set(config)


def test_an_existing_path_wins_over_a_name(served, tmp_path, monkeypatch) -> None:
    import dataclasses

    import vitkit

    monkeypatch.chdir(tmp_path)
    mine = vitkit.create_model(
        dataclasses.replace(get_config("ViT-mu/16"), image_size=32, num_classes=3)
    )
    vitkit.save(mine, tmp_path / "ViT-mu" / "16@test")  # a folder spelled as the name
    assert vitkit.load("ViT-mu/16@test").cfg.num_classes == 3


@pytest.mark.slow
def test_a_hub_counterpart_through_huggingface_hub(tmp_path) -> None:
    """VITKIT_PRETRAINED_SOURCE=hub fetches the timm Hub repository that holds the official
    file's tensors, through huggingface_hub (its endpoint and cache: HF_ENDPOINT, HF_HOME), at the
    commit the entry names (another, newer file on main), and keeps the official numerics (tanh
    GELU)."""
    import os
    import subprocess
    import sys

    import torch
    from safetensors.torch import save

    import vitkit
    from helpers import randomize
    from http_server import FakeHub

    model = randomize(
        vitkit.create_model("ViT-Ti/16", num_classes=21843, act="gelu_tanh"), std=0.05
    )
    x = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        expected = model(x)
    torch.save(x, tmp_path / "x.pt")
    repo = "timm/vit_tiny_patch16_224.augreg_in21k"
    code = (  # the entry as if it named the commit of v1 (none can be read here)
        "import dataclasses, sys, torch, vitkit\n"
        "from vitkit.io import pretrained\n"
        "entry = pretrained.REGISTRY[sys.argv[1]]\n"
        "pin = dataclasses.replace(entry, timm_revision=sys.argv[4])\n"
        "pretrained.REGISTRY[sys.argv[1]] = pin\n"
        "m = vitkit.load(sys.argv[1])\n"
        "assert m.cfg.act == 'gelu_tanh', m.cfg.act\n"
        "torch.save(m(torch.load(sys.argv[2])).detach(), sys.argv[3])\n"
    )
    with FakeHub() as hub:
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        hub.add(repo, "model.safetensors", save(state), revision="v1")
        newer = {k: v + 1 for k, v in state.items()}
        hub.add(repo, "model.safetensors", save(newer))
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.base_url,
            "HF_HOME": str(tmp_path / "hf"),
            "VITKIT_HOME": str(tmp_path / "vitkit"),
            "VITKIT_PRETRAINED_SOURCE": "hub",
        }
        args = [str(tmp_path / "x.pt"), str(tmp_path / "y.pt"), hub.commit(repo, "v1")]
        run = [sys.executable, "-c", code, "ViT-Ti/16@augreg-in21k", *args]
        proc = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert torch.equal(torch.load(tmp_path / "y.pt"), expected)
        # an entry whose tensors are on no Hub repository: one line
        run = [sys.executable, "-m", "vitkit", "summary", "ViT-L/16@augreg-in21k"]
        proc = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1
        assert "has no Hub repository with its tensors" in proc.stderr


def test_create_model_and_finetune_take_the_same_keys(served) -> None:
    """Both paths to pre-trained weights change the same model keys: the head, the resolution,
    the regularisation; neither changes the architecture, representation_size included (the
    pre-logits go with the whole head when fine-tuning [P App. B.1.1])."""
    import vitkit
    from vitkit.compose import Request, compose

    checkpoint = vitkit.load("ViT-mu/16@test").cfg
    adaptable = dict(
        num_classes=5,
        image_size=64,
        dropout_rate=0.1,
        attention_dropout_rate=0.1,
        drop_path_rate=0.1,
    )
    fixed = dict(representation_size=16, patch_size=8, classifier="gap")
    for key, value in {**adaptable, **fixed}.items():
        request = Request(
            init_from="ViT-mu/16@test", data="synthetic", sets=(f"model.{key}={value}",)
        )
        if key in adaptable:
            composed = compose(request, checkpoint=checkpoint).run.model
            created = vitkit.create_model("ViT-mu/16", pretrained="test", **{key: value})
            assert getattr(composed, key) == getattr(created.cfg, key) == value, key
            continue
        kept = "replaces the checkpoint's head" if key == "representation_size" else "keeps"
        with pytest.raises(ConfigError, match=f"fine-tuning {kept}"):
            compose(request, checkpoint=checkpoint)
        with pytest.raises(ConfigError, match="pretrained weights fix the architecture"):
            vitkit.create_model("ViT-mu/16", pretrained="test", **{key: value})


def test_create_model_and_finetune_adapt_weights_identically(served) -> None:
    """The same checkpoint and the same changes give bit-identical weights and the same config
    through ``create_model(pretrained=)`` and ``finetune --init-from``."""
    import torch

    import vitkit
    from vitkit.compose import Request, compose
    from vitkit.train.parts import init_from_pretrained

    changes = dict(
        num_classes=5,
        image_size=(48, 64),
        dropout_rate=0.1,
        attention_dropout_rate=0.05,
        drop_path_rate=0.2,
    )
    created = vitkit.create_model("ViT-mu/16", pretrained="test", **changes)
    sets = tuple(f"model.{k}={v}" for k, v in changes.items())
    request = Request(init_from="ViT-mu/16@test", data="synthetic", sets=sets)
    run = compose(request, checkpoint=vitkit.load("ViT-mu/16@test").cfg).run
    tuned = init_from_pretrained(run)
    assert created.cfg == tuned.cfg == run.model and created.training and tuned.training
    ours, theirs = created.state_dict(), tuned.state_dict()
    assert list(ours) == list(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert ours["pos_embed"].shape == (1, 1 + 3 * 4, 32) and not ours["head.weight"].any()
