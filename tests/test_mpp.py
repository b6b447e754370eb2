"""Masked patch prediction [P §4.6, App. B.1.2]: targets, corruption fractions, that the loss
falls, exact resume, and that its backbone fine-tunes like any other checkpoint."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

import vitkit
from helpers import tiny, vitkit_out
from vitkit import fit
from vitkit.config import ConfigError, replace
from vitkit.model import VisionTransformer
from vitkit.recipes import get_recipe
from vitkit.train.loop import TIMING_KEYS
from vitkit.train.objectives import MaskedPatchPrediction, corrupt, patch_colours
from vitkit.train.parts import init_from_pretrained


def test_patch_colours_are_3_bit_mean_colours() -> None:
    # 2 x 2 patches of 4 pixels; RGB means chosen to land in known levels of 8
    means01 = torch.tensor(
        [[[0.0, 1.0], [0.5, 0.99]], [[0.2, 0.0], [0.126, 0.124]], [[1.0, 0.0], [0.874, 0.876]]]
    )  # (C, gh, gw) in [0, 1]
    images = (means01.repeat_interleave(4, 1).repeat_interleave(4, 2) * 2 - 1)[None]
    levels = (means01 * 8).floor().clamp(max=7).long()  # per channel: 0..7
    expected = (levels[0] * 64 + levels[1] * 8 + levels[2]).flatten()
    assert patch_colours(images, 4).tolist() == [expected.tolist()]
    assert expected.tolist() == [
        0 * 64 + 1 * 8 + 7,
        7 * 64 + 0 + 0,
        4 * 64 + 1 * 8 + 6,
        7 * 64 + 0 + 7,
    ]
    # a patch's mean, not its pixels: half black, half white -> level 4 of 8
    gray = torch.tensor([[[-1.0, 1.0], [-1.0, 1.0]]])[None]  # (1, 1, 2, 2)
    assert patch_colours(gray, 2).tolist() == [[4]]
    assert patch_colours(torch.full((1, 1, 4, 4), -1.0), 2).unique().tolist() == [0]
    assert patch_colours(torch.ones(1, 3, 4, 4), 2).unique().tolist() == [511]


def test_corruption_fractions_and_contents() -> None:
    torch.manual_seed(0)
    B, N, D = 256, 64, 8
    tokens = torch.randn(B, N, D)
    mask_token = torch.randn(D)
    out, chosen, kind = corrupt(tokens, mask_token, rate=0.5)
    assert (chosen.sum(dim=1) == N // 2).all()  # exactly half of each image's patches
    n = chosen.sum().item()
    for code, p in ((1, 0.8), (2, 0.1), (3, 0.1)):
        observed = (kind == code).sum().item() / n
        assert abs(observed - p) < 5 * math.sqrt(p * (1 - p) / n), (code, observed)
    assert ((kind > 0) == chosen).all()
    masked, replaced = kind == 1, kind == 2
    assert torch.equal(out[masked], mask_token.expand(int(masked.sum()), D))
    assert torch.equal(out[~masked & ~replaced], tokens[~masked & ~replaced])  # untouched + kept
    # a replaced patch holds another patch's embedding from the batch, never its own
    flat = tokens.reshape(B * N, D)
    hits = (out[replaced][:, None, :] == flat[None]).all(dim=-1)  # (R, B*N)
    assert (hits.sum(dim=1) == 1).all()
    own = torch.arange(B * N).view(B, N)[replaced]
    assert (hits.float().argmax(dim=1) != own).all()


def test_rate_is_configurable_and_draws_follow_the_global_rng() -> None:
    tokens, mask_token = torch.randn(4, 10, 3), torch.zeros(3)
    _, chosen, _ = corrupt(tokens, mask_token, rate=0.15)
    assert (chosen.sum(dim=1) == 2).all()  # round(0.15 * 10)
    torch.manual_seed(3)
    a = corrupt(tokens, mask_token)
    torch.manual_seed(3)
    b = corrupt(tokens, mask_token)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_prediction_reads_each_chosen_patch_own_output_token(classifier: str) -> None:
    cfg = tiny(classifier=classifier, in_chans=1)
    model = VisionTransformer(cfg).eval()
    objective = MaskedPatchPrediction(cfg)
    torch.nn.init.normal_(objective.head.weight)  # a zero head would hide any misalignment
    images = torch.rand(3, 1, 32, 32) * 2 - 1
    torch.manual_seed(5)
    loss = objective(model, images)["loss"]
    torch.manual_seed(5)  # the same draws, spelled out with the model's public stages
    tokens, chosen, _ = corrupt(model.embed_patches(images), objective.mask_token)
    encoded = model.encode(tokens)  # (B, T, D)
    patches = encoded[:, 1:] if classifier == "token" else encoded  # (B, 16, D)
    logits = objective.head(patches[chosen])
    expected = torch.nn.functional.cross_entropy(logits, patch_colours(images, 8)[chosen])
    assert torch.allclose(loss, expected)


def test_objective_owns_mask_and_head_and_predicts_8_or_512_colours() -> None:
    for chans, classes in ((1, 8), (3, 512)):
        cfg = tiny(in_chans=chans)
        objective = MaskedPatchPrediction(cfg)
        assert objective.head.out_features == classes
        model = VisionTransformer(cfg)
        out = objective(model, torch.rand(2, chans, 32, 32) * 2 - 1)
        assert out["patches"].item() == 2 * 8  # half of 16 patches, 2 images
        assert math.isclose(out["loss"].item(), math.log(classes), rel_tol=1e-5)  # zero head
        out["loss"].backward()
        assert objective.mask_token.grad is not None and model.pos_embed.grad is not None
        assert not any("mask" in k for k in model.state_dict())


def _mpp_run(**overrides: object):
    run = get_recipe("smoke")
    return replace(
        run,
        {
            "train.objective": "mpp",
            "train.duration": "24st",
            "train.save_every": "4st",
            "train.log_every": "4st",
            "train.eval_every": "12st",
            "model.dropout_rate": 0.1,
            "optim.lr": 1e-2,
            "train.keep_last": 10,
            "train.device": "cpu",  # exact resume: deterministic kernels (auto may pick CUDA)
            **overrides,
        },
    )


def test_mpp_loss_falls_and_resume_is_exact(tmp_path: Path) -> None:
    full = tmp_path / "full"
    result = fit(_mpp_run(), run_dir=full, progress=False)
    records = [json.loads(line) for line in (full / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "split" not in r]
    assert losses[-1] < losses[0] - 0.3, losses
    assert 0 < result.evaluation.accuracy <= 1 and result.evaluation.count > 0
    # a run killed after step 12's checkpoint: later checkpoints gone, the same command again
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    for step in (16, 20, 24):
        shutil.rmtree(resumed / "checkpoints" / f"step_{step:08d}")
    fit(_mpp_run(), run_dir=resumed, progress=False)
    again = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    drop = TIMING_KEYS
    assert [{k: v for k, v in r.items() if k not in drop} for r in again] == [
        {k: v for k, v in r.items() if k not in drop} for r in records
    ]


def test_mpp_config_errors(tmp_path: Path) -> None:
    smoke = get_recipe("smoke")
    with pytest.raises(ConfigError, match=r"train\.objective"):
        replace(smoke, {"train.objective": "mpp", "train.mixup": 0.2})
    with pytest.raises(ConfigError, match=r"train\.objective"):
        replace(smoke, {"train.objective": "bert"})
    with pytest.raises(ConfigError, match="plain ViT"):
        replace(
            get_recipe("fmnist-hybrid"), {"train.objective": "mpp", "train.label_smoothing": 0.0}
        )
    with pytest.raises(ConfigError, match=r"train\.ema"):
        replace(smoke, {"train.objective": "mpp", "train.ema": 0.99})
    with pytest.raises(ConfigError, match=r"data\.test_flip"):
        replace(smoke, {"train.objective": "mpp", "data.test_flip": True})
    with pytest.raises(ConfigError, match="for a ResNet"):
        replace(get_recipe("fmnist-resnet"), {"optim.name": "muon"})
    with pytest.raises(ConfigError, match="FSDP shards"):
        replace(smoke, {"optim.name": "muon", "train.parallel": "fsdp"})
    with pytest.raises(ValueError, match="plain ViT"):
        MaskedPatchPrediction(get_recipe("fmnist-resnet").model)
    with pytest.raises(ConfigError, match="distinct"):
        replace(smoke, {"train.fewshot": (5, 5)})
    # a class too small for the few-shot evaluator fails before the run directory exists
    with pytest.raises(ValueError, match="fewer than shots=40"):
        fit(replace(smoke, {"train.fewshot": (40,)}), run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_mpp_backbone_loads_and_fine_tunes(tmp_path: Path, capsys) -> None:
    pre = tmp_path / "pre"
    out = vitkit_out(capsys, "train", "--recipe", "smoke", "--objective", "mpp",
                     "--run-dir", str(pre), "--no-progress", "--set", "train.fewshot=(2,)")  # fmt: skip
    assert "masked-patch colour accuracy" in out and "2-shot linear" in out
    model = vitkit.load(pre / "best")  # the backbone only: no mask embedding, no MPP head
    assert set(model.state_dict()) == set(VisionTransformer(model.cfg).state_dict())
    tests = [
        json.loads(x) for x in (pre / "metrics.jsonl").read_text().splitlines() if "split" in x
    ]
    assert "fewshot_2shot" in tests[-1]
    ft = tmp_path / "ft"
    out = vitkit_out(capsys, "finetune", "--init-from", str(pre / "best"), "--recipe", "smoke",
                     "--run-dir", str(ft), "--no-progress")  # fmt: skip
    assert "test accuracy" in out
    tuned = torch.load(ft / "checkpoints" / "step_00000004" / "state.pt", weights_only=True)
    assert tuned["objective"] is None  # fine-tuning is classification again
    # fine-tuning starts from the MPP backbone, with a zero head
    start = init_from_pretrained(
        dataclasses.replace(get_recipe("smoke"), init_from=str(pre / "best"))
    )
    pretrained = vitkit.load(pre / "best").state_dict()
    for key, value in start.state_dict().items():
        if key.startswith("head."):
            assert not value.any()
        else:
            assert torch.equal(value, pretrained[key]), key


def test_mpp_run_with_a_head_of_other_classes_than_its_data_resumes(tmp_path: Path) -> None:
    """A run's checkpoints record class names only when they name the head's outputs: an mpp run
    on 3 classes with model.num_classes=2 wrote 3 names, which reading then refused (found when
    reading began to check them), so the same command could not resume or re-read the run."""
    from PIL import Image

    for k in range(3):
        (tmp_path / "data" / f"c{k}").mkdir(parents=True)
        for i in range(8):
            Image.new("L", (16, 16), 30 * k + i).save(tmp_path / "data" / f"c{k}" / f"{i}.png")
    run = _mpp_run(**{"data.dataset": str(tmp_path / "data"), "model.num_classes": 2})
    run = replace(run, {"train.duration": "4st", "train.eval_every": "4st", "train.batch_size": 8})
    fit(run, run_dir=tmp_path / "run", progress=False)
    meta = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert "class_names" not in meta and meta["model"]["num_classes"] == 2
    fit(run, run_dir=tmp_path / "run", progress=False)  # the finished run, read again
