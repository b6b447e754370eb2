"""``vitkit config``: every setting with its type, value, allowed values, origin and
documentation, as a run with the same arguments would choose it on this machine, without
training. The settings are checked before torch is imported; then the data's listing is read
(classes, training images) as a run would read it, and what the config leaves to the machine
(the device, the precision of ``auto``, the decoding workers) is decided as a run here would."""

from __future__ import annotations

import argparse
import fnmatch
from typing import Any, get_args

from ..config import Objective
from ..errors import VitkitError
from .common import Verb


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(_show(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    return str(value)


def _config(args: argparse.Namespace) -> None:
    from ..compose import (
        Request,
        adapt,
        check_run_data_exists,
        compose,
        default_run_dir,
        flat,
        on_this_machine,
    )
    from ..config import ConfigError, RunConfig
    from ..config.keys import explain
    from ..config.overrides import field_hint

    request = Request(
        recipe=args.recipe,
        model=args.model,
        data=args.data,
        sets=tuple(args.set or ()),
        objective=args.objective,
    )
    if request.recipe is None and request.data is None:
        request = Request(**{**request.__dict__, "recipe": "scratch"})
    composed = compose(request)
    check_run_data_exists(composed.run)
    from ..data.run_data import peek_data  # the settings are valid: now torch may be imported

    classes, train_size, what = peek_data(composed.run.data, composed.run.model)
    composed = adapt(composed, num_classes=classes, channels=None, train_size=train_size)
    if args.params:
        _print_params(composed.run, args.key)
        return
    try:  # what a run would use here: its device, and what the config leaves to the machine
        composed, device = on_this_machine(composed)
        here = f"on this machine: {device}"
    except ConfigError as e:  # a run here would stop with this line; the config is still shown
        here = f"a run here would stop: {e}"
    values = flat(composed.run.to_dict())  # a section that is none is one value: model.resnet
    pattern = args.key
    rows = [
        (name, *field_hint(RunConfig, name))
        for name in values
        if not pattern or fnmatch.fnmatchcase(name, pattern) or name.startswith(f"{pattern}.")
    ]
    if not rows:
        raise VitkitError(f"no setting matches {args.key!r}; `vitkit config` lists them all")
    print(
        f"recipe {composed.recipe.name}; data {composed.run.data.dataset}: {classes} classes, "
        f"{train_size:,} training images ({what}); run directory "
        f"{default_run_dir(request, composed)}"
    )
    for name, hint, spec in rows:
        origin = composed.origin[name]
        grey = name == "model.in_chans" and composed.run.data.source.kind == "folder"
        if grey and name not in composed.fixed:
            origin = "the data: 1 if every training image is greyscale, else 3, decided when a run verifies them"
        if name == "train.device":
            origin += f"; {here}"
        print(f"{name} = {_show(values[name])}    ({origin})")
        print(f"    {explain(hint, spec)}")
        if spec is not None:
            print(f"    {spec.doc}")


def _print_params(run: Any, pattern: str | None) -> None:
    """Each trained parameter's optimizer settings (``train.optim.param_settings``), the model
    built on the meta device: no weights are allocated, so a ViT-H is as quick as a ViT-Ti."""
    import torch

    from ..model import build_model
    from ..train.objectives import MaskedPatchPrediction
    from ..train.optim import param_settings

    with torch.device("meta"):
        model = build_model(run.model)
        objective = MaskedPatchPrediction(run.model) if run.train.objective == "mpp" else None
    settings = param_settings(run.optim, model, *([objective] if objective is not None else []))
    optim = run.optim
    decay = "off" if optim.layer_decay is None else f"{optim.layer_decay:g}"
    print(
        f"{len(settings)} trained tensors, {sum(s.param.numel() for s in settings):,} parameters; "
        f"optim {optim.name}, lr {optim.lr:g}, weight decay {optim.weight_decay:g}, layer decay "
        f"{decay}: each parameter's lr is the schedule's times its multiplier"
    )
    rows = [
        s
        for s in settings
        if not pattern or fnmatch.fnmatchcase(s.name, pattern) or s.name.startswith(pattern)
    ]
    if not rows:
        raise VitkitError(f"no trained parameter matches {pattern!r}")
    width = max(len(s.name) for s in rows)
    print(f"{'parameter':<{width}}  {'shape':<18} layer  lr x      weight decay")
    for s in rows:
        layer = "-" if s.layer is None else str(s.layer)
        shape = "x".join(map(str, s.param.shape)) or "scalar"
        print(f"{s.name:<{width}}  {shape:<18} {layer:>5}  {s.lr_scale:<8.6g}  {s.weight_decay:g}")


def add_verbs(verb: Verb) -> None:
    p = verb(
        "config",
        "every setting of a run: type, value, allowed values, origin and meaning (no training)",
        _config,
        "vitkit config --data photos/ --model ViT-Ti/16 train   |   vitkit config --recipe fmnist optim.lr"
        "   |   vitkit config --params --model ViT-B/16 --set optim.layer_decay=0.75",
    )
    p.add_argument(
        "key",
        nargs="?",
        default=None,
        help="a key, a section (train) or a glob (*lr*); with --params, parameter names",
    )
    p.add_argument(
        "--params",
        action="store_true",
        help="print each trained parameter's layer, lr multiplier (optim.layer_decay) and weight "
        "decay instead (the model built without its weights)",
    )
    p.add_argument("--recipe", default=None, help="the recipe (default: scratch)")
    p.add_argument("--data", default=None, metavar="SPEC", help="the data, as train's --data")
    p.add_argument("--model", default=None, metavar="PRESET", help="a preset, as train's --model")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="settings, as train's --set")
    p.add_argument("--objective", choices=get_args(Objective), default=None, help=argparse.SUPPRESS)
