"""benchmarks/gpu_checks.sh, the script a lease of a lent GPU runs, proven on the CPU before the
lease: its dry mode runs the steps with the lease's command lines at tiny sizes, and every import
of those steps is a package the GPU machine has or a wheel ``make gpu-wheels`` brings."""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_checks.sh"
# The steps a dry run here takes within a minute (2 cores, partly busy elsewhere: 53-56 s). Run by
# hand: tests (3 s; the suite collects every test file with --strict-markers anyway), parallel
# (3 runs, 2 under torchrun: 23 s) and jpeg (needs scikit-image, the bench extra).
STEPS = ("harness", "variants", "profile", "e2e", "compiled", "resume")
LOGS = ("harness", "variants", "profile", "e2e_eager", "e2e_compiled", "res_whole", "res_cut")
# Import names whose distribution is named otherwise, for packages not installed here.
DISTRIBUTIONS = {"PIL": "pillow", "skimage": "scikit-image", "yaml": "pyyaml"}


@pytest.mark.slow
def test_dry_mode_runs_every_step_and_prints_the_figures(tmp_path: Path) -> None:
    env = {**os.environ, "GPU_CHECKS_DRY": "1", "PYTHON": sys.executable, "OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(SCRIPT), *STEPS], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    statuses = [line for line in lines if re.fullmatch(r"\w+: exit \d+ in \d+ s", line)]
    assert [s.split(":")[0] for s in statuses] == list(LOGS), done.stdout
    assert all(": exit 0 in" in s for s in statuses), done.stdout
    assert "nvidia-smi: skipped (dry run on the CPU)" in lines
    machine = f" | cpu, driver none, torch {torch.__version__}, CUDA none"
    figures = [line for line in lines if line.endswith(machine)]
    assert lines[-len(figures) :] == figures  # the summary ends with the figures
    kinds = [f.split()[0] for f in figures]
    assert kinds.count("harness") == 8  # train and infer x vitkit, timm, eager and compiled
    assert kinds.count("variant") >= 6 and not any("failed" in f for f in figures)
    assert kinds.count("profile") == 1 and kinds.count("e2e") == 2
    assert "0 windows" not in done.stdout
    against_eager = (tmp_path / "compiled_vs_eager.txt").read_text()  # the compiled step's losses
    assert "same steps: True" in against_eager and "e2e_compiled" in against_eager
    resumed = (tmp_path / "resume.txt").read_text()
    assert "same steps: True" in resumed and "largest loss difference to" in resumed
    import tarfile  # the lease brings back at most 8 files: the logs travel as one archive

    with tarfile.open(tmp_path / "logs.tar.gz") as archive:
        packed = set(archive.getnames())
    assert {"resume.txt", "env.txt", "harness.md", "profile.json"} <= packed
    assert {f"{name}.log" for name in LOGS} <= packed


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """The top-level names of the modules ``path`` imports (absolute imports only)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def _installed() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()  # a scan of every installed distribution: once


def _distribution(module: str) -> str:
    installed = _installed().get(module)
    return _normal(installed[0] if installed else DISTRIBUTIONS.get(module, module))


def test_every_import_of_the_checks_is_on_the_gpu_machine_or_a_wheel() -> None:
    """The scripts the steps run (every import, also inside functions: the harness imports its
    contenders lazily) and their sibling modules, the module-level imports of the test files
    that hold ``gpu`` tests and of their helpers, and vitkit's runtime dependencies."""
    machine = {
        _normal(line)
        for line in (ROOT / "benchmarks/gpu_packages.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    wheels_line = re.search(r"^GPU_WHEELS := (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert wheels_line is not None
    wheels = {_normal(w.split("==")[0]) for w in wheels_line.group(1).split()}
    assert not wheels & machine  # a wheel of a package the machine has would replace its own

    local = {"vitkit"}
    needed: dict[str, str] = {}  # distribution -> where it is imported
    script = SCRIPT.read_text()
    todo = [(ROOT / p, False) for p in sorted(set(re.findall(r"benchmarks/\w+\.py", script)))]
    todo += [(p, True) for p in sorted(ROOT.glob("tests/test_*.py"))
             if "pytest.mark.gpu" in p.read_text()]  # fmt: skip
    seen: set[Path] = set()
    while todo:
        path, top_level_only = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imports(path, top_level_only=top_level_only):
            sibling = path.parent / f"{module}.py"
            if sibling.exists():  # benchmarks/loader.py, tests/helpers.py, ...
                todo.append((sibling, top_level_only))
            elif module not in sys.stdlib_module_names and module not in local:
                needed.setdefault(_distribution(module), str(path.relative_to(ROOT)))
    assert {"torch", "timm", "pytest"} <= set(needed)  # the parse found the imports

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        assert name is not None
        needed.setdefault(_normal(name.group()), "pyproject.toml's dependencies")

    missing = {d: where for d, where in needed.items() if d not in machine | wheels}
    assert not missing, f"not on the GPU machine nor in GPU_WHEELS: {missing}"
