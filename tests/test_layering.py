"""The package's layering (``../shared/DESIGN.md``, "Dependency direction"), checked over the
import graph read from the source: no module imports from a layer above it (a lazy import inside a
function counts too), no two modules import each other however indirectly, and peers (timm,
transformers, jax) are never imported at a module's top level. A new top-level module or package
must be given a layer here. Inside data, the readers (data/sources/) sit above the container they
build and below the modules that take their datasets whole (``DATA_TIERS``)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

# Lowest first. A unit (a top-level module or package of vitkit; "vitkit" is the package's
# __init__) imports only from itself and from units of lower layers: units of one layer never
# import each other (model and data are independent; eval and inspect too).
LAYERS: list[set[str]] = [
    {"errors", "version"},
    {"compat"},  # what the files an earlier vitkit wrote need to load: below config and train
    {"files", "config"},  # the file-system primitives below both data and io
    {"presets", "runtime"},
    {"recipes", "model", "data"},
    {"io"},
    {"eval", "inspect", "inference"},  # inference: a checkpoint run (io below, the CLI above)
    {"train"},
    {"compose"},
    {"transfer"},  # the paper's two protocols (transfer, VTAB-1k) and the runs of a sweep
    {"vitkit"},  # the public API: create_model, load, save, ...
    {"cli"},
    {"__main__"},
]
PEERS = ("timm", "transformers", "jax", "flax")

# data/ in tiers, lowest first: the container (decoded.py, verify.py) and what it and the readers
# build on (the contract, the bounds, the codec, ...): every module of data not named below; the
# readers (data/sources/: each builds a container, decoded.DecodedImages, so it imports it); the
# modules that take a reader's dataset whole. So data/sources/ holds nothing the container
# imports: a source reaches the container only through data/contract.py.
READERS = "vitkit.data.sources"
ABOVE_READERS = {
    "vitkit.data",  # the public API re-exports the named datasets and readers (ImageFolderDataset)
    "vitkit.data.run_data",  # a run's datasets: it reads what its spec's kind lists (registry)
    "vitkit.data.loader",  # it batches every split a run reads (contract.Images), a container too
    "vitkit.data.stream",  # it batches sources/parquet.py's stream, whose rows no container holds
    "vitkit.data.in_memory",  # it decodes a split a run reads through the loader's workers
}
DATA_TIERS: list[set[str]] = [{"container"}, {"readers"}, {"above readers"}]


def import_graph(src: Path, package: str = "vitkit") -> dict[str, set[str]]:
    """Every module of ``package`` under ``src`` -> the modules of the package it imports, at top
    level or inside a function (``from . import x`` of a submodule ``x`` names the submodule)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    graph = {}
    for name, (path, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    targets.add(sub if sub in modules else module)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def unit(module: str) -> str:
    """``vitkit.io.formats.hf`` -> ``io``; the package itself -> ``vitkit``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def data_tier(module: str) -> str:
    """The tier of ``DATA_TIERS`` a module of data is in."""
    if module == READERS or module.startswith(f"{READERS}."):
        return "readers"
    return "above readers" if module in ABOVE_READERS else "container"


def data_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` (``import_graph``'s) between the modules of ``vitkit.data`` alone."""
    inside = {m for m in graph if m == "vitkit.data" or m.startswith("vitkit.data.")}
    return {m: graph[m] & inside for m in inside}


def layering_violations(
    graph: dict[str, set[str]], layers: list[set[str]], unit_of: Callable[[str], str] = unit
) -> list[str]:
    """``a -> b`` for every import of a unit that is not in a lower layer than the importer's
    (imports within one unit aside), and every unit no layer names; a module's unit is
    ``unit_of(module)``."""
    level = {u: i for i, layer in enumerate(layers) for u in layer}
    unplaced = sorted({unit_of(m) for m in graph} - level.keys())
    found = [f"{u}: in no layer" for u in unplaced]
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            ua, ub = unit_of(a), unit_of(b)
            if ua != ub and ua in level and ub in level and level[ub] >= level[ua]:
                found.append(f"{a} -> {b}")
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (Tarjan's
    strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def top_level_peer_imports(src: Path, package: str = "vitkit") -> list[str]:
    """``module: peer`` for every peer imported in a module's body (not inside a function)."""
    found = []
    for path in sorted((src / package).rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(src)}: {n}" for n in names if n.split(".")[0] in PEERS]
    return found


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    assert layering_violations(import_graph(SRC), LAYERS) == []


def test_the_readers_sit_between_the_container_and_what_takes_their_datasets() -> None:
    graph = import_graph(SRC)
    assert ABOVE_READERS - graph.keys() == set()  # a renamed module leaves the list
    assert layering_violations(data_graph(graph), DATA_TIERS, data_tier) == []


def test_no_modules_import_each_other() -> None:
    assert import_cycles(import_graph(SRC)) == []


def test_peers_are_imported_only_where_they_are_used() -> None:
    assert top_level_peer_imports(SRC) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"vitkit/__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (  # data reaching into io for a lock, inside a function: what this check caught
            {"vitkit/data/verify.py": "def f():\n    from ..io.checkpoint import exclusive\n"},
            ["vitkit.data.verify -> vitkit.io.checkpoint"],
        ),
        (  # the model importing data: two units of one layer
            {"vitkit/model/vit.py": "from ..data import loader\n"},
            ["vitkit.model.vit -> vitkit.data.loader"],
        ),
        (
            {"vitkit/io/download.py": "from .. import __version__\n"},
            ["vitkit.io.download -> vitkit"],
        ),
        ({"vitkit/zoo.py": "import os\n"}, ["zoo: in no layer"]),
        ({"vitkit/train/loop.py": "from ..data import loader\n"}, []),  # downwards: fine
    ],
)
def test_the_check_finds_an_import_from_a_higher_layer(
    tmp_path: Path, files: dict[str, str], expected: list[str]
) -> None:
    stubs = {"vitkit/data/__init__.py": "", "vitkit/data/loader.py": ""}
    stubs |= {"vitkit/io/__init__.py": "", "vitkit/io/checkpoint.py": ""}
    src = _tree(tmp_path, {**stubs, **files})
    assert layering_violations(import_graph(src), LAYERS) == expected


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (  # the container reaching into the readers' folder for their contract: what this caught
            {"vitkit/data/decoded.py": "from .sources.contract import SourceState\n"},
            ["vitkit.data.decoded -> vitkit.data.sources.contract"],
        ),
        (  # a reader importing what batches readers' datasets
            {"vitkit/data/sources/hf.py": "def f():\n    from ..loader import data_loader\n"},
            ["vitkit.data.sources.hf -> vitkit.data.loader"],
        ),
        (  # a run's data building a reader, which builds a container: fine
            {
                "vitkit/data/run_data.py": "from .sources.hf import open_hf\n",
                "vitkit/data/sources/hf.py": "from ..decoded import DecodedImages\n",
                "vitkit/data/decoded.py": "from .contract import SourceState\n",
            },
            [],
        ),
    ],
)
def test_the_check_finds_an_import_of_a_reader_from_below(
    tmp_path: Path, files: dict[str, str], expected: list[str]
) -> None:
    stubs = {"vitkit/data/__init__.py": "", "vitkit/data/sources/__init__.py": ""}
    for name in ("contract", "decoded", "loader", "sources/contract", "sources/hf"):
        stubs[f"vitkit/data/{name}.py"] = ""
    src = _tree(tmp_path, {**stubs, **files})
    assert layering_violations(data_graph(import_graph(src)), DATA_TIERS, data_tier) == expected


def test_the_check_finds_modules_that_import_each_other(tmp_path: Path) -> None:
    src = _tree(
        tmp_path,
        {
            "vitkit/data/__init__.py": "",
            "vitkit/data/hf.py": "def f():\n    from .stream import open_parquet\n",
            "vitkit/data/stream.py": "from .cells import image_bytes\nfrom . import hf\n",
            "vitkit/data/cells.py": "",
        },
    )
    assert import_cycles(import_graph(src)) == [["vitkit.data.hf", "vitkit.data.stream"]]


def test_the_check_finds_a_peer_imported_at_top_level(tmp_path: Path) -> None:
    src = _tree(
        tmp_path,
        {
            "vitkit/io/timm.py": "import timm.models\n\ndef f():\n    import transformers\n",
            "vitkit/eval/x.py": "from transformers import ViTModel\n",
        },
    )
    assert top_level_peer_imports(src) == [
        "vitkit/eval/x.py: transformers",
        "vitkit/io/timm.py: timm.models",
    ]
