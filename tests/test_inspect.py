"""Inspection [P §4.5, Fig. 6, 7, 14]: attention distance and rollout against hand-computed cases,
posemb similarity and filter PCA invariants, and the report end to end on tiny models."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import randomize, tiny
from vitkit.config import ResNetConfig
from vitkit.errors import UserFileError
from vitkit.inspect import (
    attention_distance,
    attention_rollout,
    collect_attention,
    embedding_filters,
    inspect_model,
    posemb_similarity,
    rollout_maps,
    sample_images,
)
from vitkit.inspect.figures import plot_rollout, rollout_overlays
from vitkit.model import VisionTransformer

GRID = (4, 5)
N = GRID[0] * GRID[1]


def random_attention(b: int, h: int, t: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, t, t, generator=g).softmax(dim=-1)  # (B, H, T, T), rows sum to 1


def model(**overrides) -> VisionTransformer:
    return randomize(VisionTransformer(tiny(**overrides)))


# ------------------------------------------------------------------------ attention distance


@pytest.mark.parametrize("prefix", [0, 1])
def test_identity_attention_has_distance_zero_and_rollout_identity(prefix):
    T = prefix + N
    attn = torch.eye(T).expand(2, 3, T, T)  # (B, H, T, T), each token attends to itself
    distance = attention_distance([attn, attn], grid=GRID, num_prefix=prefix, pixels_per_patch=16)
    assert distance.shape == (2, 3)
    assert torch.equal(distance, torch.zeros(2, 3))
    torch.testing.assert_close(attention_rollout([attn, attn]), torch.eye(T).expand(2, T, T))


def test_uniform_attention_distance_matches_brute_force():
    T = 1 + N
    attn = torch.full((2, 3, T, T), 1.0 / T)  # uniform, class token included
    got = attention_distance([attn], grid=GRID, num_prefix=1, pixels_per_patch=8)
    cells = [(r, c) for r in range(GRID[0]) for c in range(GRID[1])]
    total = sum(math.dist(q, k) for q in cells for k in cells)
    expected = 8 * total / (N * N)  # mean over queries of the mean over keys (renormalised)
    torch.testing.assert_close(got, torch.full((1, 3), expected))


def test_attention_to_a_fixed_offset_gives_that_distance():
    gh, gw = 8, 8
    T = 1 + gh * gw
    attn = torch.zeros(1, 2, T, T)
    attn[:, :, :, 0] = 0.3  # weight on the class token is left out and the rest renormalised
    for r in range(gh):
        for c in range(gw):
            kr = r + 3 if r + 3 < gh else r - 3  # every query looks 3 rows and 4 columns away
            kc = c + 4 if c + 4 < gw else c - 4
            attn[:, :, 1 + r * gw + c, 1 + kr * gw + kc] = 0.7
    got = attention_distance([attn], grid=(gh, gw), num_prefix=1, pixels_per_patch=16)
    torch.testing.assert_close(got, torch.full((1, 2), 5.0 * 16))


def test_attention_distance_rejects_a_wrong_grid():
    with pytest.raises(ValueError, match="grid"):
        attention_distance(
            [random_attention(1, 1, 17)], grid=GRID, num_prefix=1, pixels_per_patch=8
        )


# ------------------------------------------------------------------------ attention rollout


def test_rollout_rows_sum_to_one_and_single_layer_is_half_identity():
    layers = [random_attention(2, 4, 1 + N, seed=s) for s in range(3)]
    rollout = attention_rollout(layers)
    assert rollout.shape == (2, 1 + N, 1 + N)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 1 + N))
    single = attention_rollout(layers[:1])
    torch.testing.assert_close(single, 0.5 * layers[0].mean(1) + 0.5 * torch.eye(1 + N))
    two = attention_rollout(layers[:2])  # R = Â_2 Â_1: the later layer on the left
    hat = [0.5 * a.mean(1) + 0.5 * torch.eye(1 + N) for a in layers[:2]]
    torch.testing.assert_close(two, hat[1] @ hat[0])


def test_rollout_maps_cls_row_and_gap_mean():
    rollout = attention_rollout([random_attention(2, 4, 1 + N)])
    cls = rollout_maps(rollout, grid=GRID, num_prefix=1, normalize=False)
    torch.testing.assert_close(cls, rollout[:, 0, 1:].reshape(2, *GRID))
    rollout = attention_rollout([random_attention(2, 4, N)])
    gap = rollout_maps(rollout, grid=GRID, num_prefix=0, normalize=False)
    torch.testing.assert_close(gap, rollout.mean(dim=1).reshape(2, *GRID))
    shown = rollout_maps(rollout, grid=GRID, num_prefix=0)
    torch.testing.assert_close(shown.amax(dim=(1, 2)), torch.ones(2))
    torch.testing.assert_close(shown, gap / gap.amax(dim=(1, 2), keepdim=True))


def test_collect_attention_batches_and_matches_intermediates():
    m = model()
    images = torch.rand(5, 3, 32, 32) * 2 - 1
    attn = collect_attention(m, images, batch_size=2)
    assert len(attn) == 2 and attn[0].shape == (5, 4, 17, 17)
    with torch.no_grad():
        direct = m.intermediates(images, attention=True)
    torch.testing.assert_close(attn[1], direct["attn1"])


# ------------------------------------------------------------------------ posemb and filters


@pytest.mark.parametrize("classifier", ["token", "gap"])
@pytest.mark.parametrize("posemb", ["learn", "sincos2d"])
def test_posemb_similarity_is_symmetric_with_unit_diagonal(classifier, posemb):
    sim = posemb_similarity(model(classifier=classifier, posemb=posemb))
    assert sim.shape == (4, 4, 4, 4)
    flat = sim.reshape(16, 16)
    torch.testing.assert_close(flat.diagonal(), torch.ones(16))
    torch.testing.assert_close(flat, flat.T)


def test_posemb_similarity_of_two_equal_positions_is_one():
    m = model()
    with torch.no_grad():
        m.pos_embed[0, 1 + 5] = m.pos_embed[0, 1 + 0]  # patch (1, 1) := patch (0, 0); slot 0 is CLS
        m.pos_embed[0, 0] = 0.0  # a class-token slot that leaked in would give NaN or change it
    sim = posemb_similarity(m)
    torch.testing.assert_close(sim[0, 0, 1, 1], torch.tensor(1.0))
    assert sim[0, 0, 0, 1] < 0.99


def test_posemb_similarity_needs_a_posemb():
    with pytest.raises(ValueError, match="no position embedding"):
        posemb_similarity(model(posemb="none"))


@pytest.mark.parametrize("in_chans", [1, 3])
def test_embedding_filter_components_are_orthonormal_and_ordered(in_chans):
    m = model(in_chans=in_chans)
    out = embedding_filters(m, k=10)
    comps, ratio = out["components"], out["explained_variance_ratio"]
    assert comps.shape == (10, in_chans, 8, 8) and ratio.shape == (10,)
    flat = comps.reshape(10, -1)
    torch.testing.assert_close(flat @ flat.T, torch.eye(10), atol=1e-5, rtol=0)
    assert ratio.sum() <= 1 + 1e-6
    assert torch.all(ratio[:-1] >= ratio[1:])
    assert embedding_filters(m, k=1000)["components"].shape[0] == min(64, in_chans * 64)


def test_rank_one_filters_have_one_component():
    m = model()
    g = torch.Generator().manual_seed(1)
    mean, direction = torch.randn(3, 8, 8, generator=g), torch.randn(3, 8, 8, generator=g)
    scale = torch.randn(64, 1, 1, 1, generator=g)
    with torch.no_grad():
        m.patch_embed.proj.weight.copy_(mean + scale * direction)  # (D, C, P, P), rank 1 + mean
    out = embedding_filters(m)
    assert out["explained_variance_ratio"][0] > 0.9999
    first = out["components"][0].flatten()
    assert abs(float(first @ direction.flatten() / direction.norm())) == pytest.approx(1, abs=1e-5)


def test_embedding_filters_refuse_a_hybrid():
    with pytest.raises(ValueError, match="hybrid"):
        embedding_filters(model(resnet=ResNetConfig(num_layers=(1,)), patch_size=1))


# ------------------------------------------------------------------------ the report


def _written_figures(out, written):
    page = (out / "index.html").read_text()
    pngs = {p.name for p in out.glob("*.png")}
    assert set(re.findall(r'src="([^"]+)"', page)) == pngs
    assert {p.name for p in out.iterdir()} == set(written)
    return pngs, page


@pytest.mark.parametrize(
    ("classifier", "in_chans", "posemb"), [("token", 3, "learn"), ("gap", 1, "none")]
)
def test_inspect_model_writes_every_figure(tmp_path, classifier, in_chans, posemb):
    m = model(classifier=classifier, in_chans=in_chans, posemb=posemb)
    images = torch.rand(7, in_chans, 32, 32) * 2 - 1
    written = inspect_model(m, images, tmp_path, max_maps=5, batch_size=3, name="tiny")
    pngs, page = _written_figures(tmp_path, written)
    names = ["embedding_filters", "attention_distance", "attention_rollout"]
    names += ["posemb_similarity"] if posemb != "none" else []
    assert pngs == {f"{n}.png" for n in names}
    data_files = {"embedding_filters.npz", "attention_distance.json", "attention_rollout.npz"}
    data_files |= {"posemb_similarity.npz"} if posemb != "none" else set()
    assert set(written) == pngs | data_files | {"index.html"}
    assert "7 image(s)" in page and "tiny" in page
    assert page.count("Skipped") == (posemb == "none")
    data = json.loads((tmp_path / "attention_distance.json").read_text())
    assert data["num_images"] == 7
    expected = attention_distance(
        collect_attention(m, images),
        grid=(4, 4),
        num_prefix=m.cfg.num_prefix_tokens,
        pixels_per_patch=8,
    )  # batches of 3 are averaged back to the mean over all 7 images
    torch.testing.assert_close(torch.tensor(data["mean_attention_distance_px"]), expected)
    with np.load(tmp_path / "attention_rollout.npz") as maps:
        assert maps["maps"].shape == (5, 4, 4) and maps["raw"].shape == (5, 4, 4)


def test_sampled_images_span_the_classes_and_files_the_same_every_time():
    """The rollout took each class's first files in sort order: on a folder of photos in their
    4 rotations (one class each), one wallpaper 16 times. Each class in turn, its images drawn
    at random from a seed."""
    labels = torch.arange(4).repeat_interleave(25)  # (100,), listed class by class
    chosen = sample_images(labels, 16)
    assert torch.equal(chosen, sample_images(labels, 16))  # seeded
    assert not torch.equal(chosen, sample_images(labels, 16, seed=1))
    assert labels[chosen].tolist() == [0, 1, 2, 3] * 4  # each class in turn
    within = chosen % 25  # the image's place in its class's listing
    assert sorted(within.tolist()) != [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4  # not the first files
    assert len(set(within.tolist())) > 4  # nor one file in every class
    assert sorted(sample_images(labels, 1000).tolist()) == list(range(100))


def test_sampled_images_are_different_photos_while_there_are_enough():
    """A folder whose classes are one set of photos turned (rot_000/0001.jpg, rot_090/0001.jpg,
    ...) showed one wallpaper in its 4 rotations: the draw prefers a file stem not drawn yet,
    and repeats one only when every stem left in a class has been drawn."""
    labels = torch.arange(4).repeat_interleave(20)  # (80,): 4 rotations of the same 20 photos
    keys = [f"rot_{90 * k:03d}/{i:04d}.jpg" for k in range(4) for i in range(20)]
    for seed in range(3):
        chosen = sample_images(labels, 40, seed=seed, keys=keys)
        assert torch.equal(chosen, sample_images(labels, 40, seed=seed, keys=keys))  # seeded
        assert labels[chosen].tolist() == [0, 1, 2, 3] * 10  # each class in turn still
        stems = [keys[i].split("/")[1] for i in chosen.tolist()]
        assert len(set(stems[:20])) == 20  # every photo once before any twice
        assert len(set(chosen.tolist())) == 40 and len(set(stems)) == 20
    # without names (a table of bytes alone), the draw is the one of each class in turn
    assert torch.equal(sample_images(labels, 16, keys=[None] * 80), sample_images(labels, 16))


def test_the_page_names_no_absolute_path(tmp_path):
    """The page's heading named the data folder (and the checkpoint) by its absolute path: a
    page is shared, and that path names the user's folders. A path under the working directory
    is shown relative to it, any other by its last name."""
    run, photos = tmp_path / "run" / "best", tmp_path / "photos"
    inspect_model(
        model(),
        torch.rand(2, 3, 32, 32) * 2 - 1,
        tmp_path / "out",
        name=str(run),
        images_from=f"{photos}: test/ (2 images), drawn at random",
    )
    page = (tmp_path / "out" / "index.html").read_text()
    text = re.sub(r"<[^>]+>", " ", page)  # what a reader sees
    assert str(tmp_path) not in page and not re.search(r"(?<![\w.~/])/\w", text)
    assert "<p>best: D=64" in page
    assert "Images: photos: test/ (2 images), drawn at random: 2 at 32x32 px." in page
    here = Path.cwd() / "runs" / "best"
    inspect_model(model(), torch.rand(1, 3, 32, 32) * 2 - 1, tmp_path / "out", name=str(here))
    assert "<p>runs/best: " in (tmp_path / "out" / "index.html").read_text()


def test_inspect_model_on_a_hybrid(tmp_path):
    m = model(resnet=ResNetConfig(num_layers=(1,)), patch_size=1, image_size=32)
    assert m.cfg.grid_size == 8
    written = inspect_model(m, torch.rand(3, 3, 32, 32) * 2 - 1, tmp_path, titles=["a", "b", "c"])
    pngs, page = _written_figures(tmp_path, written)
    assert pngs == {"posemb_similarity.png", "attention_distance.png", "attention_rollout.png"}
    assert page.count("Skipped") == 1  # the embedding filters: not pixel filters in a hybrid


def test_titles_are_plain_text_whatever_a_name_holds(tmp_path):
    """Class and file names title the rollout maps: '$...$' was parsed as mathtext (a
    traceback on an unknown command, a RecursionError on 140 nested square roots), and a raw
    ESC warned that its glyph is missing. Each is drawn as the text it is (a control character
    escaped, as a terminal is shown it), without a warning."""
    names = ["$\\notacommand$", "$" + "\\sqrt{" * 140 + "$", "$x_1$", "\x1b[31mred"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = plot_rollout(
            torch.rand(4, 3, 16, 16) * 2 - 1, torch.rand(4, 2, 2), tmp_path / "r.png", titles=names
        )
    assert path.stat().st_size > 0


@pytest.mark.parametrize("in_chans", [1, 3])
def test_rollout_overlays_are_enlarged_and_keep_the_images_colours(tmp_path, in_chans):
    """On colour photos at 32 px the maps could not be read (a jet colour map at half opacity
    over 32 px pictures): each picture is drawn at 160 px (nearest, every pixel a 5x5 block),
    and the overlay is the image in its own colours where the map is 1, dimmed to a fifth where
    it is 0."""
    images = torch.rand(2, in_chans, 32, 32) * 2 - 1
    maps = torch.zeros(2, 4, 4)
    maps[:, 0, 0] = 1  # the top-left patch only
    pictures, up = rollout_overlays(images, maps)
    assert pictures.shape == (2, 2, 160, 160, 3) and up.shape == (2, 160, 160)
    shown = ((images + 1) / 2).mean(dim=1, keepdim=True) if in_chans == 1 else (images + 1) / 2
    expected = shown.expand(2, 3, 32, 32).permute(0, 2, 3, 1)  # (B, H, W, 3)
    torch.testing.assert_close(pictures[:, 0, ::5, ::5], expected)
    torch.testing.assert_close(pictures[:, 0, 4::5, 4::5], expected)
    torch.testing.assert_close(pictures[:, 1, :10, :10], pictures[:, 0, :10, :10])
    torch.testing.assert_close(pictures[:, 1, 60:, 60:], 0.2 * pictures[:, 0, 60:, 60:])
    from PIL import Image

    with Image.open(plot_rollout(images, maps, tmp_path / "r.png")) as png:
        assert png.width >= 4 * 160 and png.height >= 160  # two pairs at full size, side by side


def test_every_file_replaces_a_link_and_a_file_is_no_folder(tmp_path):
    """``inspect --out`` wrote through symbolic links (a link named index.html overwrote its
    target), and an --out naming a file was mkdir's FileExistsError, a traceback. Every file is
    written beside its name and renamed over the link; a file as the folder is one line."""
    target = tmp_path / "precious.txt"
    target.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    linked = ["index.html", "attention_rollout.png", "attention_distance.json"]
    for name in [*linked, "attention_rollout.npz"]:
        (out / name).symlink_to(target)
    images = torch.rand(2, 3, 32, 32) * 2 - 1
    written = inspect_model(model(), images, out)
    assert target.read_text() == "keep"
    assert not any(p.is_symlink() for p in out.iterdir()) and set(linked) <= set(written)
    with pytest.raises(UserFileError) as err:
        inspect_model(model(), images, target)
    assert str(err.value) == f"{target} is a file: expected a folder to write the figures to"


def test_inspect_model_rejects_images_of_the_wrong_channels(tmp_path):
    with pytest.raises(ValueError, match="images must be"):
        inspect_model(model(), torch.zeros(2, 1, 32, 32), tmp_path)
