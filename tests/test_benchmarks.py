"""Benchmarks that cannot rot: every script in benchmarks/ runs in CI, in its `--quick` mode.

A benchmark nobody runs breaks silently (bench_sft_packing.py imported a test helper that a refactor
removed, and the README kept quoting its figures). So every `benchmarks/*.py` is found by glob (a new
one is covered without touching this file) and must:
- take `--quick`: the same code path on tiny sizes, in seconds;
- import library code only: never a test module, never a path put on sys.path by hand;
- in `--quick`, exit 0 and end its stdout with the figure it measures (a line holding a number).
No timings are asserted: on a shared machine they measure the neighbours.

The quick runs (`make bench-check`, the 31 scripts and 3 other tests marked bench: 587 s on an idle 2-core
Intel Xeon on 2026-12-07; pytest's `--durations` lists each) are marked `bench`: `make bench-check` runs them
and `.ci/run` runs it after `make test`, so no benchmark lands broken, while `make test` stays a suite a
contributor runs before every commit. The static checks above them run in every tier."""

from __future__ import annotations

import ast
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((REPO / "benchmarks").glob("*.py"))
TEST_MODULES = {path.stem for path in (REPO / "tests").glob("*.py")} | {"tests", "conftest"}


def imported_modules(tree: ast.Module) -> set[str]:
    """Top-level names of every module the script imports, at any depth (function-level imports too)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def touches_sys_path(tree: ast.Module) -> bool:
    """True when the script changes sys.path (how a benchmark reached into tests/ before)."""
    return any(isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
               and node.value.id == "sys" for node in ast.walk(tree))


def test_benchmarks_are_found():
    assert len(BENCHMARKS) >= 10, BENCHMARKS


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda path: path.name)
def test_benchmark_imports_library_code_and_has_a_quick_mode(script):
    tree = ast.parse(script.read_text(), filename=str(script))
    test_imports = imported_modules(tree) & TEST_MODULES
    assert not test_imports, f"{script.name} imports test modules {sorted(test_imports)}: import library code"
    assert not touches_sys_path(tree), f"{script.name} changes sys.path: benchmarks import the installed library"
    flags = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value == "--quick"}
    assert flags, f"{script.name} has no --quick flag (seconds, tiny sizes, the same code path)"


def last_figure(stdout: str) -> float | None:
    """The first number on the last non-empty stdout line, or None."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    match = re.search(r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?", lines[-1]) if lines else None
    return float(match[0].replace(",", "")) if match else None


@pytest.mark.slow
@pytest.mark.bench  # `make bench-check` and CI run these; `make test` leaves them out (README, "Tests")
@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda path: path.name)
def test_quick_mode_runs_and_ends_with_its_figure(script, tmp_path):
    done = subprocess.run([sys.executable, str(script), "--quick"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{script.name} --quick exited {done.returncode}:\n{done.stderr[-3000:]}"
    figure = last_figure(done.stdout)
    assert figure is not None and math.isfinite(figure), (
        f"{script.name} --quick did not end its stdout with a figure:\n{done.stdout[-2000:]}")
    assert not re.search(r"\b(nan|inf)", done.stdout.strip().splitlines()[-1].lower()), done.stdout[-2000:]
