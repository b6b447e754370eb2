"""From a ``DataConfig`` to the datasets a run trains on, chooses its best weights on, and
reports at the end (``build_data``); the split a verb evaluates a checkpoint on
(``evaluation_split``); and any of them as batches (``batches_of``).

Three roles: ``train``; ``val``, which chooses the best checkpoint; ``test``, reported once at the
end with the best weights, never used to choose. ``data.validation='auto'`` takes a folder's
``val/``, else a seeded, class-balanced holdout of ``train`` (``data.holdout`` of every class);
Fashion-MNIST, CIFAR and synthetic images validate on their test split (the paper's figures'
practice; then ``val`` is ``test``, evaluated once). A VTAB-1k sweep (``vtab800:DIR``) validates
on val200; its final run (``vtab:DIR``) holds out of train, and ``vitkit vtab`` sets
``data.validation=test`` for it. Tar shards and Hugging Face datasets have splits as a folder
has; a stream cannot be held out of, so it validates on its val split, else its test split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from ..compat import VAL_OR_TEST
from ..config import DataConfig, ModelConfig, RunConfig, normalise_data
from ..errors import ConfigError, DataError
from .contract import Images
from .listing import Listing
from .loader import Batches, BatchOptions, read_as
from .sources.cells import by_number_note
from .sources.parquet import ParquetStream
from .sources.registry import listing
from .splits import balanced_subset, split_holdout, subset
from .stream import StreamBatches


@dataclass
class RunData:
    """The datasets of a run, their names as the run states them, and what was decided."""

    train: Images
    val: Images
    test: Images | None  # None: no test split; ``val`` is reported at the end
    classes: list[str]
    channels: int
    val_name: str  # e.g. "val/ (2,000 images)", "holdout: 10% of train"
    test_name: str | None
    notes: list[str] = field(default_factory=list)  # decisions to state (channels, holdout)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # unreadable files, why

    @property
    def val_is_test(self) -> bool:
        return self.val is self.test

    def in_class_order(self, order: list[str], why: str) -> RunData:
        """The same datasets with their classes in the order ``order`` (the same names), said
        in the notes with ``why`` (who records that order: "the checkpoint records")."""
        datasets = [d for d in (self.train, self.val, self.test) if d is not None]
        moved = {id(d): d.in_class_order(order) for d in datasets}  # val may be test: one view
        return dataclasses.replace(
            self,
            train=moved[id(self.train)],
            val=moved[id(self.val)],
            test=None if self.test is None else moved[id(self.test)],
            classes=list(order),
            notes=_reordered_notes(self.notes, self.classes, order, why),
        )


def _count(n: int, what: str = "image") -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def validation_split(cfg: DataConfig, found: Listing) -> str:
    """The split that chooses the best weights of a run on ``found`` (``cfg``'s data): ``val``,
    ``test`` or ``holdout`` (of train), as ``data.validation`` says (the module docstring)."""
    if cfg.validation == "auto" and "val" not in found.names:
        return "test" if cfg.streaming else found.auto  # a stream cannot be held out of
    if cfg.validation in ("auto", VAL_OR_TEST):
        return "val" if "val" in found.names else "test"
    return cfg.validation


def build_data(
    cfg: DataConfig,
    model: ModelConfig,
    *,
    seed: int,
    in_chans: int | None = None,
    class_order: Sequence[str] | None = None,
) -> RunData:
    """The train, validation and test datasets of ``cfg``. ``in_chans``: the channels the model
    takes (images of the other kind are converted: grey repeated, or RGB to PIL's luma), or
    None to take the data's (a folder: 1 when every training image is greyscale, else 3;
    synthetic images: the model's). ``class_order``: the class names in the order a resumed run
    recorded, when the data's own order now differs (a folder of numbered classes, in order by
    name before vitkit ordered it by number): the splits are put in it before a holdout or a
    subset is drawn, so the run sees the images and the holdout it saw."""
    found = listing(cfg, model, seed=seed)
    first = found.read("train", in_chans, True)
    splits = {"train": first}
    for name in found.names[1:]:  # val and test, with the training split's channels
        splits[name] = found.read(name, first.channels, True)
    notes = [*found.notes, *found.stated(first, model, seed, in_chans is None)]
    skipped = [bad for dataset in splits.values() for bad in dataset.skipped]
    if class_order is not None and another_order(list(class_order), first.classes):
        notes = _reordered_notes(notes, first.classes, list(class_order), RESUMED)
        splits = {k: v.in_class_order(list(class_order)) for k, v in splits.items()}
    named = {k: f"{found.label(k)} ({_count(len(v))})" for k, v in splits.items()}
    train, test = splits["train"], splits.get("test")
    use, spec = validation_split(cfg, found), cfg.source.spec
    if use == "val" and "val" not in splits:
        raise ConfigError(
            f"data.validation='val' but {spec} has no val split: use 'auto', 'holdout' or 'test'"
        )
    if cfg.streaming and (use == "holdout" or (test is None and use == "test")):
        raise ConfigError(
            f"data.validation={cfg.validation!r} but {spec} is streamed and has no "
            f"{'val or test' if use == 'test' else 'val'} split to validate on (a stream cannot be "
            "held out of): give it a validation split, or set data.streaming=False"
        )
    if use == "test" and test is None:
        raise ConfigError(
            f"data.validation={cfg.validation!r} but {spec} has no test split "
            f"({found.label('test')}): use 'auto' or 'holdout'"
        )
    if use == "holdout":
        kept, held = split_holdout(train, cfg.holdout, seed)
        train, val = subset(train, kept), subset(train, held)
        val_name = (
            f"a holdout of {cfg.holdout:.0%} of every class of train ({_count(len(val))}, "
            f"seed {seed})"
        )
    else:
        val, val_name = splits[use], named[use]
    if cfg.per_class is not None:
        train = subset(train, balanced_subset(train, per_class=cfg.per_class, seed=seed))
    return RunData(
        train=train,
        val=val,
        test=test,
        classes=list(splits["train"].classes),
        channels=first.channels,
        val_name=val_name,
        test_name=named.get("test"),
        notes=notes,
        skipped=skipped,
    )


def peek_data(cfg: DataConfig, model: ModelConfig) -> tuple[int, int, str]:
    """(classes, training images, how they were counted) of ``cfg``'s data, no image decoded
    (``Listing.peek``), less the holdout a run would take out of train."""
    found = listing(cfg, model)
    classes, train, what = found.peek()
    if validation_split(cfg, found) == "holdout":  # about: the run rounds each class's part
        train -= round(cfg.holdout * train)
    return classes, train, what


def batches_of(dataset: Images, options: BatchOptions) -> Batches:
    """``dataset``'s batches as ``options`` say: ``Batches``, or for a stream ``StreamBatches``
    (the same options and contract, the stream read in its own order: data/stream.py)."""
    if read_as(dataset) == "stream":
        return StreamBatches(cast(ParquetStream, dataset), options)
    return Batches(dataset, options)


RESUMED = "the resumed checkpoint records"  # why a resumed run's classes are in their order


def another_order(recorded: list[str], classes: list[str]) -> bool:
    """Whether ``recorded`` (a checkpoint's class names) are ``classes`` in another order: the
    order a checkpoint's head was trained in, which its data is then put in (``in_class_order``)."""
    return recorded != classes and sorted(recorded) == sorted(classes)


def _reordered_notes(notes: list[str], classes: list[str], order: list[str], why: str) -> list[str]:
    """``notes`` of data whose ``classes`` are put in the order ``order`` (``why``: "the
    checkpoint records"): the note of their own order replaced by one of the new."""
    said = (
        f"classes: in the order {why} ({', '.join(order[:3])}, ...), not the data's own "
        f"({', '.join(classes[:3])}, ...)"
    )
    return [note for note in notes if note != by_number_note(classes)] + [said]


@dataclass
class Split:
    """A split a verb runs a checkpoint over: the images, the classes, what to call it and what
    to say of its classes' order (``notes``)."""

    dataset: Images
    classes: list[str]
    name: str
    train: Images | None = None  # the training images of the same data (few-shot), when known
    notes: list[str] = field(default_factory=list)

    def in_class_order(self, order: list[str], why: str) -> Split:
        """The same split with its classes in the order ``order`` (the same names), said in
        the notes with ``why`` (who records that order: "the checkpoint records")."""
        return dataclasses.replace(
            self,
            dataset=self.dataset.in_class_order(order),
            classes=list(order),
            train=None if self.train is None else self.train.in_class_order(order),
            notes=_reordered_notes(self.notes, self.classes, order, why),
        )


def evaluation_split(
    spec: str | None, trained: RunConfig | None, model: ModelConfig, *, source: str
) -> Split:
    """What ``vitkit eval`` (fewshot, inspect) evaluates ``model`` on, with its channels: the
    data ``spec`` names (with the columns of the checkpoint's run, ``trained``), else the data
    that run trained on (``source``: the checkpoint, for messages). Of a run's data, its test
    split, else the split (or the holdout) it validated on; of data given, its test split, else
    val, or the images themselves when they are one set (``DIR/val``, unnamed shards). Only the
    split evaluated is verified; the training split (for few-shot; none for a stream) is listed.
    The notes say when the classes are in order by number; the caller puts the split in a
    checkpoint's recorded order (``Split.in_class_order``)."""
    recorded = spec is None
    if recorded:
        if trained is None:
            raise DataError(
                f"{source} records no data (it was not written by vitkit train): say what to "
                "evaluate on with --data SPEC"
            )
        cfg, seed = trained.data, trained.train.seed
    else:
        assert spec is not None
        cfg, seed = DataConfig(dataset=normalise_data(spec)), 0
        if trained is not None:  # a dataset's columns are the run's (no --set)
            cfg = dataclasses.replace(
                cfg, image_column=trained.data.image_column, label_column=trained.data.label_column
            )
    found, channels = listing(cfg, model, seed=seed), model.in_chans
    if not recorded and not found.named:  # one set of images given directly: the split
        dataset = found.read("train", channels, True)
        name = f"{found.root} ({_count(len(dataset))})"
        return Split(dataset, list(dataset.classes), name, notes=found.notes)
    names = found.names
    if recorded:  # test, else the split the run validated on unless it was a holdout
        held = validation_split(cfg, found) == "holdout"
        which = "test" if "test" in names else None if held or "val" not in names else "val"
    else:
        which = next((s for s in ("test", "val") if s in names), None)
        if which is None:
            hint = f" (--data {found.train_spec} evaluates the training images)"
            raise DataError(
                f"{found.root} has only {found.label('train')}: give the data to evaluate"
                + (hint if found.train_spec else "")
            )
    if which is None:  # the holdout the run validated on, drawn again
        data = build_data(cfg, model, seed=seed, in_chans=channels)
        name = f"{cfg.dataset}: {data.val_name} (the checkpoint's data)"
        return Split(data.val, data.classes, name, data.train, notes=found.notes)
    dataset = found.read(which, channels, True)
    # the training images few-shot draws from: none where the data has no train split (a
    # benchmark's test shards) or no random access (a stream)
    train = found.read("train", channels, False) if "train" in names else None
    name = f"{found.root}: {found.label(which)} ({_count(len(dataset))})"
    if recorded:
        name += " (the checkpoint's data)"
    if train is not None and train.read_as == "stream":
        train = None
    return Split(dataset, list(dataset.classes), name, train, notes=found.notes)
