"""The documentation's reference pages, generated from the code when the site is built
(mkdocs-gen-files runs this script; `make docs`), so that they cannot drift from it:

- reference/config.md: every config key, from its ``key()`` declaration;
- reference/cli.md: every verb of ``vitkit``, from its argparse parser;
- reference/api.md: the Python API, rendered from its docstrings by mkdocstrings;
- reference/pretrained.md: the registry of published weights and what pins each entry.

Each page's Markdown comes from a function of this module, which the tests call too.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from typing import Any

from vitkit.config import RunConfig
from vitkit.config.dicts import nested_class
from vitkit.config.keys import default_of, explain, fields_of, hints, spec_of


def _cell(text: str) -> str:
    """Text for one table cell: one line, its pipes and brackets escaped (``[A][B]`` would read as
    a cross-reference)."""
    text = " ".join(str(text).split())
    return text.replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")


def _default(section: type, name: str) -> str:
    try:
        value = default_of(section, name)
    except (TypeError, KeyError, AttributeError):
        return "required"
    if dataclasses.is_dataclass(value):
        return "a section"
    return "none" if value is None else f"`{value!r}`"


def _keys(section: type, prefix: str) -> Iterator[tuple[str, type, str]]:
    """Every key of ``section`` and its nested sections: (dotted name, section, field name)."""
    for field in fields_of(section):
        dotted = f"{prefix}{field.name}"
        nested = nested_class(hints(section)[field.name])
        if nested is not None:
            yield from _keys(nested, f"{dotted}.")
        else:
            yield dotted, section, field.name


def config_page() -> str:
    """Every key of a run's config: its type and bounds, default and meaning."""
    lines = [
        "# Configuration",
        "",
        "Every key of a run's config, generated from its `key()` declaration "
        "(`src/vitkit/config/`). Set one with `--set key=value`; `vitkit config` prints every "
        "key with the value a run would take and where it came from. A recipe or a preset sets "
        "many of them: the defaults here are the keys' own.",
        "",
    ]
    current = None
    for dotted, section, name in _keys(RunConfig, ""):
        group = dotted.split(".")[0] if "." in dotted else "run"
        if group != current:
            current = group
            lines += ["", f"## {group}", "", "| key | type and bounds | default | meaning |"]
            lines += ["|---|---|---|---|"]
        hint, spec = (
            hints(section)[name],
            spec_of(next(f for f in fields_of(section) if f.name == name)),
        )
        doc = spec.doc if spec is not None else ""
        lines.append(
            f"| `{dotted}` | {_cell(explain(hint, spec))} | {_cell(_default(section, name))} "
            f"| {_cell(doc)} |"
        )
    return "\n".join(lines) + "\n"


def _arguments(parser: argparse.ArgumentParser, *, verb: bool = True) -> list[str]:
    """A table of ``parser``'s arguments (a verb's: without ``--debug``, which every verb takes
    as ``vitkit`` does)."""
    rows = ["| argument | meaning | default |", "|---|---|---|"]
    skipped = (argparse._HelpAction, argparse._SubParsersAction)
    for action in parser._actions:  # argparse keeps its arguments only there
        if action.help == argparse.SUPPRESS or isinstance(action, skipped):
            continue
        if verb and action.option_strings == ["--debug"]:
            continue
        name = ", ".join(action.option_strings) or action.dest
        if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
            name += " {" + ",".join(map(str, action.choices)) + "}"
        default = action.default
        shown = (
            ""
            if default in (None, False, argparse.SUPPRESS) or not action.option_strings
            else f"`{default}`"
        )
        rows.append(f"| `{_cell(name)}` | {_cell(action.help or '')} | {_cell(shown)} |")
    return rows


def cli_page() -> str:
    """Every verb of ``vitkit``: what it does, an example, its arguments."""
    from vitkit.cli import build_parser

    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = [
        "# Command line",
        "",
        "Every verb of `vitkit`, generated from its parser (`src/vitkit/cli/`); `vitkit VERB "
        "--help` prints the same. Every error a user can cause is one line on stderr and exit "
        "status 2.",
        "",
        *_arguments(parser, verb=False),
    ]
    for name, sub in verbs.choices.items():
        lines += ["", f"## `vitkit {name}`", "", _cell(sub.description or "")]
        if sub.epilog:
            lines += ["", f"Example: `{sub.epilog.removeprefix('example: ')}`"]
        lines += ["", *_arguments(sub)]
    return "\n".join(lines) + "\n"


API = (
    "create_model",
    "list_models",
    "load",
    "load_with_meta",
    "save",
    "read_image",
    "optimize_for_inference",
    "fit",
)
# For a training loop of one's own: a folder as a dataset, and its batches.
DATA_API = ("ImageFolderDataset", "Batches", "BatchOptions")


def api_page() -> str:
    """The package's public functions, rendered from their docstrings (mkdocstrings)."""
    lines = [
        "# Python API",
        "",
        "The functions `import vitkit` gives, rendered from their docstrings; below them the "
        "object that runs a checkpoint, the model's own methods, what a run returns, and the "
        "data pieces for a training loop of your own (the Fine-tuning guide's last block).",
        "",
    ]
    for name in API:
        lines += [f"::: vitkit.{name}", ""]
    lines += ["::: vitkit.inference.Inference", "", "::: vitkit.model.VisionTransformer", ""]
    lines += ["::: vitkit.config.ModelConfig", ""]
    lines += ["::: vitkit.train.loop.RunResult", "", "::: vitkit.eval.metrics.Evaluation", ""]
    for name in DATA_API:
        lines += [f"::: vitkit.data.{name}", ""]
    return "\n".join(lines)


def pretrained_page() -> str:
    """The registry: every entry, and what pins its bytes."""
    from vitkit.io.pretrained import REGISTRY

    lines = [
        "# Pretrained entries",
        "",
        "Every published checkpoint vitkit knows by name, generated from its registry "
        "(`src/vitkit/io/pretrained.py`). `vitkit pretrained` lists the same with what is "
        "cached. No source gives the files' exact sizes or sha256s: the listed size bounds a "
        "file (one unit of its last digit either side) and the first download records its "
        "sha256, which every load checks.",
        "",
        "| entry | resolution | trained on | classes | listed size: bounds the file "
        "| Hub counterpart (`VITKIT_PRETRAINED_SOURCE=hub`) at revision |",
        "|---|---|---|---|---|---|",
    ]
    for entry in REGISTRY.values():
        data = entry.pretrained_on + (f" -> {entry.fine_tuned_on}" if entry.fine_tuned_on else "")
        size = entry.size or "none listed"
        hub = f"`{entry.timm}` ({entry.timm_revision or 'main'})" if entry.timm else "none"
        lines.append(
            f"| `{entry.name}` | {entry.image_size} | {_cell(data)} | {entry.num_classes:,} "
            f"| {_cell(size)} | {hub} |"
        )
    return "\n".join(lines) + "\n"


PAGES: dict[str, Any] = {
    "reference/config.md": config_page,
    "reference/cli.md": cli_page,
    "reference/api.md": api_page,
    "reference/pretrained.md": pretrained_page,
}

try:  # run by mkdocs-gen-files: write the pages into the site being built
    import mkdocs_gen_files
except ImportError:  # imported by the tests
    mkdocs_gen_files = None
if mkdocs_gen_files is not None and __name__ in ("<run_path>", "__main__"):
    for path, page in PAGES.items():
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(page())
