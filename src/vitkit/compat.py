"""What a run directory or checkpoint written by an earlier vitkit needs to load and resume, and
nothing more: before 1.0 vitkit breaks rather than carries (STYLE.md), except for files already
written. Each path is kept for the committed runs under ``tests/data/`` that need it, and has its
test in ``tests/test_compat.py``:

- ``data.data_dir`` (before data specs), folded into ``data.dataset`` by ``fold_data_dir``; a
  folder's run of that time also predates ``data.validation`` and chose its best weights on
  val/, else test/ (``VAL_OR_TEST``, a value of ``data.validation`` that only such runs hold).
  All three runs (folder_v1, folder_v1_no_val, resume_v1).
- ``train.bf16`` (before ``train.precision``), folded by ``fold_bf16``. All three.
- ``state.pt`` without ``seconds``, ``scaler`` and ``eval_due``, and its log window without
  ``seconds`` (``upgrade_state``). All three.

The config sections name their folds in ``RENAMED`` (config/keys.py reads them); any other old
form is the one-line error of an unknown key or value.
"""

from __future__ import annotations

from typing import Any

from .errors import ConfigError

# ``data.dataset`` before data specs: a kind, its files in ``data.data_dir`` (None: the default).
KINDS_BEFORE_SPECS = ("fashion_mnist", "cifar10", "cifar100", "folder", "synthetic")
# ``data.validation`` of a folder's run from before data specs: its val split, else its test split
# (never a holdout of train). Only such runs hold it: the data section reads it from their files
# but neither lists it nor takes it from ``--set`` (``Key.earlier``).
VAL_OR_TEST = "val_or_test"


def fold_data_dir(data: dict[str, Any], data_dir: Any) -> None:
    """``data.data_dir`` into ``data``'s spec: ``folder`` + DIR is ``DIR`` (validated as it was
    then: ``VAL_OR_TEST``), a named kind + DIR is ``kind:DIR``; synthetic images ignored it."""
    dataset = data.get("dataset", "fashion_mnist")
    if dataset not in KINDS_BEFORE_SPECS:
        raise ConfigError(
            f"data.data_dir={data_dir!r} goes with data.dataset naming a kind "
            f"({', '.join(KINDS_BEFORE_SPECS)}), found {dataset!r}: write the data's folder in "
            "data.dataset (a spec such as DIR or cifar10:DIR) and drop data.data_dir"
        )
    if dataset == "folder":
        data.setdefault("validation", VAL_OR_TEST)
    if data_dir is None or dataset == "synthetic":
        return
    if not isinstance(data_dir, str):
        raise ConfigError(f"data.data_dir={data_dir!r} is not valid: expected a folder")
    data["dataset"] = data_dir if dataset == "folder" else f"{dataset}:{data_dir}"


def fold_bf16(train: dict[str, Any], bf16: Any) -> None:
    """``train.bf16`` into ``train.precision``: bf16 autocast, or fp32."""
    if not isinstance(bf16, bool):
        raise ConfigError(f"train.bf16={bf16!r} is not valid: expected true or false")
    train["precision"] = "bf16" if bf16 else "fp32"


def upgrade_state(payload: dict[str, Any]) -> dict[str, Any]:
    """A ``state.pt`` payload with what an earlier vitkit did not write: the run's time so far
    (``seconds``: unknown, so 0), fp16's gradient scaler (``scaler``: none then), whether the
    step's evaluation is still due (``eval_due``: never then, a stop waited for it), and the log
    window's ``seconds``: its images restart with the resumed process, so images/s counts only
    what this process timed."""
    out = {"seconds": 0.0, "scaler": None, "eval_due": False, **payload}
    window = out.get("window")
    if isinstance(window, dict) and "seconds" not in window:
        out["window"] = {**window, "images": 0, "seconds": 0.0}
    return out
