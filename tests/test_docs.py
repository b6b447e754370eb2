"""The documentation's reference pages, generated from the code (docs/gen_reference.py, which
mkdocs-gen-files runs when `make docs` builds the site): every config key, every verb and its
arguments, every pretrained entry, each from its one declaration."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from vitkit.compose import flat
from vitkit.io.pretrained import REGISTRY
from vitkit.recipes import get_recipe

SCRIPT = Path(__file__).parent.parent / "docs" / "gen_reference.py"


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # as a module: it writes no page
    return module


def _rows(page: str) -> list[list[str]]:
    """The cells of a page's table rows (header and rule lines left out)."""
    rows = []
    for line in page.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def test_the_configuration_page_lists_every_key_with_its_doc(reference: ModuleType) -> None:
    page = reference.config_page()
    keys = [row[0].strip("`") for row in _rows(page) if row[0].startswith("`")]
    run = get_recipe("smoke")
    # every key a run has, section by section (a section that is none counts its keys)
    expected = {k for k in flat(run.to_dict()) if k != "model.resnet"}
    assert expected <= set(keys) and len(keys) == len(set(keys))
    lr = next(row for row in _rows(page) if row[0] == "`optim.lr`")
    assert "learning rate" in lr[3].lower() and lr[1]  # its doc and its type, from key()


def test_the_command_line_page_has_every_verb_and_its_arguments(reference: ModuleType) -> None:
    from vitkit.cli import build_parser

    page = reference.cli_page()
    verbs = re.findall(r"^## `vitkit (\w+)`$", page, re.M)
    parser = build_parser()
    choices = next(a for a in parser._actions if a.dest == "verb").choices
    assert verbs == list(choices)
    predict = page.split("## `vitkit predict`")[1].split("## `vitkit")[0]
    assert (
        "`--precision {auto,fp32,bf16,int8}`" in predict and "Example: `vitkit predict" in predict
    )


def test_the_pretrained_page_says_what_pins_each_entry(reference: ModuleType) -> None:
    rows = [row for row in _rows(reference.pretrained_page()) if row[0].startswith("`")]
    assert len(rows) == len(REGISTRY)
    for row, entry in zip(rows, REGISTRY.values(), strict=True):
        name, size, hub = row[0], row[4], row[5]
        assert name == f"`{entry.name}`"
        assert size == (entry.size or "none listed")
        assert hub == (
            f"`{entry.timm}` ({entry.timm_revision or 'main'})" if entry.timm else "none"
        )


def test_the_api_page_renders_every_public_function(reference: ModuleType) -> None:
    import vitkit

    page = reference.api_page()
    assert set(re.findall(r"^::: vitkit\.(\w+)$", page, re.M)) == {
        name for name in vitkit.__all__ if callable(getattr(vitkit, name)) and name[0].islower()
    }
