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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias, cast

import torch

from ..compat import VAL_OR_TEST
from ..config import DataConfig, DataSource, ModelConfig, RunConfig
from ..errors import ConfigError, DataError
from .arrays import ArrayDataset
from .decoded import DecodedImages, Reading
from .loader import Batches, BatchOptions
from .sources.cells import by_number_note
from .sources.cifar import cifar
from .sources.fashion_mnist import fashion_mnist
from .sources.folder import ImageFolderDataset, folder_layout
from .sources.hf import open_hf
from .sources.lists import STAGES, ListImages
from .sources.parquet import ParquetStream
from .sources.shards import WebDatasetShards, shard_layout
from .sources.synthetic import SyntheticImages, synthetic_images
from .splits import balanced_subset, split_holdout, subset
from .stream import StreamBatches
from .survey import shorter_sides
from .transforms import mode_of
from .verify import Level

# A split of a folder, of tar shards or of a Hugging Face dataset, as read: images read by index
# (decoded when read), or a stream.
SplitImages: TypeAlias = DecodedImages | ParquetStream
# Any split a run reads: those, images held in memory (named datasets, synthetic images), or
# synthetic images made when read (too many to hold).
Images: TypeAlias = ArrayDataset | SyntheticImages | SplitImages


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
        moved: dict[int, Images] = {}  # one view per dataset: val may be test

        def view(dataset: Images) -> Images:
            if id(dataset) not in moved:
                moved[id(dataset)] = _in_order(dataset, order)
            return moved[id(dataset)]

        return dataclasses.replace(
            self,
            train=view(self.train),
            val=view(self.val),
            test=None if self.test is None else view(self.test),
            classes=list(order),
            notes=_reordered_notes(self.notes, self.classes, order, why),
        )


def _named(source: DataSource, split: str) -> ArrayDataset:
    if source.kind == "fashion_mnist":
        return fashion_mnist(split, source.path)
    assert source.kind in ("cifar10", "cifar100")
    return cifar(split, source.path, num_classes=int(source.kind[5:]))


def _synthetic(
    model: ModelConfig, channels: int, seed: int
) -> tuple[ArrayDataset | SyntheticImages, ArrayDataset | SyntheticImages]:
    """One draw, so both splits share the class patterns: 32 + 8 per class."""
    data = synthetic_images(
        num_classes=model.num_classes,
        per_class=40,
        image_size=model.image_size,
        channels=channels,
        seed=seed,
    )
    cut = 32 * model.num_classes  # labels cycle through the classes: every prefix is balanced
    return data.subset(torch.arange(cut)), data.subset(torch.arange(cut, len(data)))


def _count(n: int, what: str = "image") -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


# The kinds of data that come in splits (train, val, test) read the same way.
SPLIT_KINDS = ("folder", "wds", "hf", "vtab", "vtab800")


@dataclass
class _Splits:
    """The splits of a folder, of tar shards or of a Hugging Face dataset, read on demand."""

    root: str  # the data, as messages name it
    names: tuple[str, ...]  # of train, val and test, in that order
    named: bool  # False: one set of images (a single tree, unnamed shards), called train
    read: Callable[[str, str | None, bool], SplitImages]  # (split, mode, verify) -> its images
    label: Callable[[str], str]  # a split as the run names it: "val/", "val shards"
    notes: list[str] = field(default_factory=list)  # what to say of its classes' order


def _splits_of(cfg: DataConfig) -> _Splits:
    """What ``cfg``'s folder, shards or Hugging Face dataset holds (listed, not yet read)."""
    source = cfg.source
    assert source.kind in SPLIT_KINDS and source.path is not None

    def level(verify: bool) -> Level:
        return cfg.verify if verify else "none"

    def reading(mode: str | None, verify: bool) -> Reading:
        return {
            "mode": mode,
            "verify": level(verify),
            "max_bad_fraction": cfg.max_bad_fraction,
            "max_image_bytes": cfg.max_image_bytes,
            "max_image_pixels": cfg.max_image_pixels,
        }

    if source.kind == "folder":
        layout = folder_layout(source.path)
        tree = layout.kind == "tree"

        def folder(split: str, mode: str | None, verify: bool) -> ImageFolderDataset:
            name = None if tree else split
            return ImageFolderDataset(layout.root, name, **reading(mode, verify))

        names = ("train",) if tree else tuple(str(s) for s in layout.splits)
        notes = _notes(by_number_note(list(layout.classes)))
        return _Splits(str(layout.root), names, not tree, folder, lambda s: f"{s}/", notes)
    if source.kind in STAGES:  # a VTAB-1k task's lists, as its stage reads them (sources/lists.py)
        stage, task_dir = STAGES[source.kind], source.path

        def listed(split: str, mode: str | None, verify: bool) -> ListImages:
            return ListImages(
                task_dir, stage[split], image_paths=cfg.image_paths, **reading(mode, verify)
            )

        return _Splits(task_dir, tuple(stage), True, listed, lambda split: f"{stage[split]}.txt")
    if source.kind == "wds":
        shards = shard_layout(source.path)

        def tars(split: str, mode: str | None, verify: bool) -> WebDatasetShards:
            return WebDatasetShards(shards.root, split, **reading(mode, verify))

        names = tuple(shards.splits)
        return _Splits(str(shards.root), names, shards.named, tars, lambda s: f"{s} shards")
    hf = open_hf(cfg)

    def rows(split: str, mode: str | None, verify: bool) -> SplitImages:
        # the cells' bounds are the source's (open_hf)
        dataset = hf.dataset(
            split, mode=mode, verify=level(verify), max_bad_fraction=cfg.max_bad_fraction
        )
        if isinstance(dataset, ParquetStream):
            dataset.shuffle_buffer = cfg.shuffle_buffer
        return dataset

    named = hf.label_names is not None  # classes named by a label column of text
    notes = _notes(by_number_note(hf.classes)) if named else []
    return _Splits(hf.spec, hf.splits, hf.named, rows, lambda s: f"{s} split", notes)


def _notes(note: str | None) -> list[str]:
    return [] if note is None else [note]


def _sizes(train: DecodedImages, model: ModelConfig, seed: int) -> list[str]:
    """What the run says of its training images' size: their median shorter side, from the
    headers of at most ``survey.SAMPLE`` of them, and a hint when the model sees under a quarter
    of it."""
    sides = shorter_sides(train, seed=seed)
    if sides is None:
        return []
    of = "all" if sides.sampled == len(train) else "seeded"
    line = (
        f"images: median shorter side {sides.median:,} px (the headers of {of} "
        f"{sides.sampled:,} training images, upright)"
    )
    hint = sides.hint(model.image_hw)
    return [line] if hint is None else [line, hint]


def _channels_reason(dataset: SplitImages) -> str:
    """Why a split has the channels it has, for the run's statement."""
    if isinstance(dataset, ParquetStream):
        return f"{dataset.channels} channels: a stream is read as RGB unless model.in_chans=1"
    return str(dataset.channels_reason)


# The channels of the datasets known by name.
NAMED_CHANNELS = {"fashion_mnist": 1, "cifar10": 3, "cifar100": 3}


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
    source = cfg.source
    if in_chans is not None and in_chans not in (1, 3) and source.kind != "synthetic":
        raise ConfigError(
            f"model.in_chans={in_chans}: images have 1 channel (greyscale) or 3 (RGB)"
        )
    notes: list[str] = []
    skipped: list[tuple[str, str]] = []
    splits: dict[str, Images]
    if source.kind == "synthetic":
        channels = model.in_chans if in_chans is None else in_chans
        made_train, made_test = _synthetic(model, channels, seed)
        splits = {"train": made_train, "test": made_test}
        named = {"test": f"synthetic test ({_count(len(made_test))})"}
    elif source.kind in SPLIT_KINDS:
        found = _splits_of(cfg)
        mode = None if in_chans is None else mode_of(in_chans)
        if mode is None and cfg.verify == "none" and not cfg.streaming:  # a stream reads RGB
            raise ConfigError(
                "data.verify=none opens no image before training, so it cannot decide the "
                "channels: set model.in_chans=3 (or 1), or data.verify=header"
            )
        first = found.read("train", mode, True)
        read: dict[str, SplitImages] = {"train": first}
        for name in found.names[1:]:  # val and test, as the training split's channels
            read[name] = found.read(name, first.mode, True)
        channels = first.channels
        notes += found.notes
        if in_chans is None:
            notes.append(_channels_reason(first))
        if isinstance(first, DecodedImages):  # a stream is not read ahead
            notes += _sizes(first, model, seed)
        for dataset in read.values():
            skipped += dataset.skipped
        if class_order is not None and another_order(list(class_order), first.classes):
            notes = _reordered_notes(notes, first.classes, list(class_order), RESUMED)
            read = {k: cast(SplitImages, _in_order(v, list(class_order))) for k, v in read.items()}
        splits = dict(read)
        named = {
            k: f"{found.label(k)} ({_count(len(v))})" for k, v in splits.items() if k != "train"
        }
    else:
        native = NAMED_CHANNELS[source.kind]
        channels = native if in_chans is None else in_chans
        splits = {k: _named(source, k).with_channels(channels) for k in ("train", "test")}
        named = {"test": f"{source.kind} test ({_count(len(splits['test']))})"}
        if channels != native:
            kind = "repeated into R, G and B" if native == 1 else "made grey (PIL's luma)"
            notes.append(f"{channels} channels: {source.kind}'s images {kind}, as the model takes")
    train = splits["train"]
    classes = list(train.classes)
    test = splits.get("test")

    # the split that chooses the best weights (see the module docstring)
    use: str = cfg.validation
    if use == "auto" and source.kind in SPLIT_KINDS:  # a VTAB-1k sweep's val200 is its val
        use = "val" if "val" in splits else "test" if cfg.streaming else "holdout"
    elif use == "auto":
        use = "test"
    elif use == VAL_OR_TEST:
        use = "val" if "val" in splits else "test"
    if use == "val" and "val" not in splits:
        raise ConfigError(
            f"data.validation='val' but {source.spec} has no val split: use 'auto', 'holdout' "
            "or 'test'"
        )
    if cfg.streaming and (use == "holdout" or (test is None and use == "test")):
        raise ConfigError(
            f"data.validation={cfg.validation!r} but {source.spec} is streamed and has no "
            f"{'val or test' if use == 'test' else 'val'} split to validate on (a stream cannot be "
            "held out of): give it a validation split, or set data.streaming=False"
        )
    if use == "test" and test is None:
        where = {"folder": "test/", "wds": "test shards"}.get(source.kind, "a test split")
        raise ConfigError(
            f"data.validation={cfg.validation!r} but {source.spec} has no test split ({where}): "
            "use 'auto' or 'holdout'"
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
        classes=classes,
        channels=channels,
        val_name=val_name,
        test_name=named.get("test"),
        notes=notes,
        skipped=skipped,
    )


def split_names(cfg: DataConfig) -> tuple[str, ...]:
    """The splits ``cfg``'s data has (``train``, ``val``, ``test``, as named), listed, not read:
    a folder's split folders, shards' or a Hugging Face dataset's splits (one set of images is
    ``train``); a named or synthetic dataset's train and test."""
    if cfg.source.kind in SPLIT_KINDS:
        return _splits_of(cfg).names
    return ("train", "test")


# Training images and classes of the datasets known by name, as their releases publish them.
NAMED_SIZES = {"fashion_mnist": (60_000, 10), "cifar10": (50_000, 10), "cifar100": (50_000, 100)}


def peek_data(cfg: DataConfig, model: ModelConfig) -> tuple[int, int, str]:
    """(classes, training images, what they are) of ``cfg``'s data without decoding an image: a
    folder's or shards' listing (before verification drops unreadable images), a Hugging Face
    dataset's rows, a named dataset's published size, the synthetic set's; the holdout a run
    would take out of train is taken out."""
    source = cfg.source
    if source.kind in ("wds", "hf", *STAGES):
        found = _splits_of(cfg)
        listed = found.read("train", "RGB", False)
        train, classes = len(listed), len(listed.classes)
        holdout = cfg.validation == "holdout" or (
            cfg.validation == "auto"
            and "val" not in found.names
            and not cfg.streaming
            and source.kind not in STAGES
        )
        what = "listed, before verification"
    elif source.kind == "folder":
        assert source.path is not None
        layout = folder_layout(source.path)
        train = layout.counts.get("train", layout.counts.get(None, 0))
        classes = len(layout.classes)
        holdout = cfg.validation == "holdout" or (
            cfg.validation == "auto" and "val" not in layout.splits
        )  # (val, test and VAL_OR_TEST never hold out)
        what = "listed, before verification"
    elif source.kind == "synthetic":
        train, classes, holdout, what = 32 * model.num_classes, model.num_classes, False, "made"
    else:
        train, classes = NAMED_SIZES[source.kind]
        holdout, what = cfg.validation == "holdout", "published"
    if holdout:  # about: the run rounds the held-out part of each class
        train -= round(cfg.holdout * train)
    return classes, train, what


def batches_of(dataset: Images, options: BatchOptions) -> Batches:
    """``dataset``'s batches as ``options`` say: ``Batches``, or for a stream ``StreamBatches``
    (the same options and contract, the stream read in its own order: data/stream.py)."""
    if isinstance(dataset, ParquetStream):
        return StreamBatches(dataset, options)
    return Batches(dataset, options)


def _in_order(dataset: Images, order: list[str]) -> Images:
    """``dataset`` with its classes in the order ``order``: its own view (``in_class_order``)."""
    if isinstance(dataset, ParquetStream):
        raise DataError(
            f"{dataset.name} is streamed, and its classes cannot be put in the order "
            f"{order[:3]}...: expected data.streaming=False"
        )
    return dataset.in_class_order(order)


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
            dataset=_in_order(self.dataset, order),
            classes=list(order),
            train=None if self.train is None else _in_order(self.train, order),
            notes=_reordered_notes(self.notes, self.classes, order, why),
        )


def evaluation_split(
    spec: str | None, trained: RunConfig | None, model: ModelConfig, *, source: str
) -> Split:
    """What ``vitkit eval`` (fewshot, inspect) evaluates ``model`` on: the data ``spec`` names,
    else the data the checkpoint's run trained on (``trained``: the run its metadata records;
    ``source``: its path, for messages). Of a run's data, its test split (else its validation split: the same
    holdout it validated on); of a folder given as ``spec``, its test/ split (else val/), or the
    folder itself when it holds class folders (``DIR/val`` given directly); of shards or a
    Hugging Face dataset, the same (unnamed shards, or one ``Dataset``, are evaluated whole); of
    a named dataset, its test split. Images are read with the model's channels, and a Hugging
    Face dataset's columns are the checkpoint's run's (``data.image_column``, ``label_column``).
    Only the split evaluated is verified, and the training split listed (few-shot; none for a
    stream), unless a holdout must be made again. The split's notes say when its classes are in
    order by number (``cells.by_number_note``); the caller puts it in a checkpoint's recorded
    order (``Split.in_class_order``)."""
    from ..config import normalise_data

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
    mode = mode_of(model.in_chans)
    notes: list[str] = []  # what to say of the classes' order
    if cfg.source.kind in SPLIT_KINDS:
        found = _splits_of(cfg)
        notes = found.notes
        folder = cfg.source.kind == "folder"
        if not recorded and not found.named:  # one set of images given directly: the split
            dataset = found.read("train", mode, True)
            name = f"{found.root} ({_count(len(dataset))})"
            return Split(dataset, list(dataset.classes), name, notes=notes)
        splits = found.names
        if recorded:  # test, else the split the run validated on unless it was a holdout
            held = cfg.validation == "holdout" or (
                cfg.validation == "auto" and "val" not in splits and not cfg.streaming
            )
            which = (
                "test" if "test" in splits else None if held else "val" if "val" in splits else None
            )
        else:
            which = next((s for s in ("test", "val") if s in splits), None)
            if which is None:
                only = {"folder": "a train/ split", "wds": "train shards"}
                hint = f" (--data {found.root}/train evaluates the training images)"
                raise DataError(
                    f"{found.root} has only {only.get(cfg.source.kind, 'a train split')}: give "
                    f"the {'folder' if folder else 'data'} to evaluate" + (hint if folder else "")
                )
        if which is not None:
            dataset = found.read(which, mode, True)
            # the training images few-shot draws from: none where the data has no train split
            # (a benchmark's test shards) or no random access (a stream)
            train = found.read("train", mode, False) if "train" in splits else None
            name = f"{found.root}: {found.label(which)} ({_count(len(dataset))})"
            if recorded:
                name += " (the checkpoint's data)"
            train_images = None if isinstance(train, ParquetStream) else train
            return Split(dataset, list(dataset.classes), name, train_images, notes=notes)
    data = build_data(cfg, model, seed=seed, in_chans=model.in_chans)
    evaluated, named = (
        (data.test, data.test_name) if data.test is not None else (data.val, data.val_name)
    )
    described = f"{cfg.dataset}: {named}" + (" (the checkpoint's data)" if recorded else "")
    return Split(evaluated, data.classes, described, data.train, notes=notes)
