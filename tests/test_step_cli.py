"""Every step's command line: `--help` answers without loading the model stack, and every flag is explained.

tyro builds each step's flags from its `Config` dataclass and shows the docstring under each field as
the flag's help, so a field without one is an unexplained flag. `--help` must answer at once (a
learner types it first): steps import torch and transformers inside `main`. How long it takes is
measured by `benchmarks/bench_startup.py`, not asserted here.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nemotron"
STEP_FILES = sorted(SRC.glob("recipes/*/stage*/[!_]*.py"))
ORCHESTRATORS = sorted(SRC.glob("recipes/*/__main__.py")) + sorted(SRC.glob("recipes/*/stage*/__main__.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(("nemotron", *(parts[:-1] if parts[-1] == "__main__" else parts)))


def documented_fields(path: Path, classes: set[str] | None = None) -> tuple[set[str], list[str]]:
    """(fields with a docstring under them, fields without) of the dataclasses `classes` (all) in `path`."""
    documented, missing = set(), []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and (classes is None or node.name in classes):
            for index, field in enumerate(node.body):
                following = node.body[index + 1] if index + 1 < len(node.body) else None
                value = getattr(following, "value", None)
                has_doc = isinstance(following, ast.Expr) and isinstance(value, ast.Constant)
                if isinstance(field, ast.AnnAssign):
                    (documented.add if has_doc else missing.append)(field.target.id)
    return documented, missing


# The shared settings every data-curation, training or evaluation Config inherits: a step that only changes a
# default (with its reason in a comment) keeps the one docstring declared here, which tyro shows.
SHARED = {name for layer in ("data_prep", "training", "evaluation")
          for name in documented_fields(SRC / layer / "settings.py")[0]}


def undocumented_fields(path: Path) -> list[str]:
    return [name for name in documented_fields(path, {"Config"})[1] if name not in SHARED]


@pytest.mark.parametrize("path", STEP_FILES + ORCHESTRATORS, ids=lambda p: str(p.relative_to(SRC)))
def test_every_config_field_has_the_docstring_help_shows(path):
    assert undocumented_fields(path) == [], f"{path.relative_to(SRC)}: Config fields without a docstring"


def imported_modules(importtime_stderr: str) -> set[str]:
    """Module names from `python -X importtime` output ("import time: self | cumulative | name")."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:")}


MODULES = sorted({module_name(p) for p in STEP_FILES + ORCHESTRATORS})


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    """`python -X importtime -m <module> --help` of every step, one process each, as many at once as there are
    cores: each process is one busy core for ~0.4 s, so one at a time leaves the other cores idle."""
    def help_of(module: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-X", "importtime", "-m", module, "--help"], capture_output=True,
                              text=True, timeout=120)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return dict(zip(MODULES, pool.map(help_of, MODULES)))


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES)
def test_help_exits_0_and_loads_neither_torch_nor_transformers(module, helps):
    result = helps[module]
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:") and "--output-dir" in result.stdout
    loaded = imported_modules(result.stderr)
    assert "nemotron.cli" in loaded  # the probe sees our own imports...
    assert not loaded & {"torch", "transformers"}, f"{module} --help imports torch or transformers"  # ...not these
