"""A run past its best (``Overfitting``): the validation loss risen at ``RISES`` evaluations in a
row while the training loss fell. The run says so once; with ``train.early_stop`` it ends there.
Read from the figures metrics.jsonl holds, so a resumed run sees what the uninterrupted one saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from .metrics_log import read_records

RISES = 3  # evaluations in a row: one rise is noise, the newcomer's run rose for 5 (issue 46)


@dataclass
class _Evaluation:
    step: int
    loss: float
    accuracy: float
    train_loss: float | None  # the last logged training loss then


@dataclass
class Overfitting:
    """The evaluations so far, the last training loss logged, and whether the signal was said."""

    evaluations: list[_Evaluation] = field(default_factory=list)
    train_loss: float | None = None
    rise: list[_Evaluation] | None = None  # the evaluations of the signal, once it held

    @property
    def said(self) -> bool:
        return self.rise is not None

    @classmethod
    def from_log(cls, path: Path, step: int, split: str, *, evaluated: bool = True) -> Overfitting:
        """What a run resumed at ``step`` had seen: the records of ``path`` (metrics.jsonl) up to
        it, its evaluations those of ``split`` (the one that chooses the best weights), without
        ``step``'s unless ``evaluated`` (its checkpoint was saved without it), whether or not
        rank 0 has truncated the log yet."""
        seen = cls()
        for _, record in read_records(path):
            at, loss, of = record["step"], record["loss"], record.get("split")
            if at > step:
                continue
            if of is None:
                seen.trained(loss)
            elif of == split and (at < step or evaluated):
                seen.evaluated(at, loss, record["accuracy"])
        return seen

    def trained(self, loss: float) -> None:
        self.train_loss = loss

    def evaluated(self, step: int, loss: float, accuracy: float) -> bool:
        """Record the evaluation of ``step``; whether the signal holds now for the first time."""
        self.evaluations.append(_Evaluation(step, loss, accuracy, self.train_loss))
        if self.said or not self.holds():
            return False
        self.rise = self.evaluations[-(RISES + 1) :]
        return True

    def holds(self) -> bool:
        """The last ``RISES`` evaluations each raised the validation loss, and the training loss
        logged at the last is below the one logged at the first of them."""
        last = self.evaluations[-(RISES + 1) :]
        if len(last) <= RISES:
            return False
        rose = all(b.loss > a.loss for a, b in pairwise(last))
        before, now = last[0].train_loss, last[-1].train_loss
        return rose and before is not None and now is not None and now < before

    def message(self, split: str, *, early_stop: bool) -> str:
        """What the run says once the signal held: the rise, the best step then (``best/``'s:
        the first of the highest accuracy), and what to try."""
        assert self.rise is not None  # said once it held
        first, last = self.rise[0], self.rise[-1]
        until = self.evaluations[: self.evaluations.index(last) + 1]
        best = max(until, key=lambda e: e.accuracy)  # the first of equals
        said = (
            f"the {split} loss rose at {RISES} evaluations in a row ({first.loss:.3f} at step "
            f"{first.step:,} to {last.loss:.3f} at step {last.step:,}) while the training loss "
            f"fell: the model is fitting its training images past what carries over. best/ holds "
            f"step {best.step:,} ({split} accuracy {best.accuracy:.4f})"
        )
        if early_stop:
            return f"{said}; ended there (train.early_stop)"
        return (
            f"{said}. Try pretrained weights by name (vitkit finetune --init-from "
            "ViT-Ti/16@augreg-in21k --data DIR), more augmentation (--set train.mixup=0.8 --set "
            "data.auto_augment=rand-m9-mstd0.5-inc1), or ending here (--set train.early_stop=true, "
            "or train.time_budget)"
        )
