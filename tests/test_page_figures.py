"""Every figure a learner reads agrees with the code and with the generated result blocks.

`scripts/page_figures.py` names each figure's source (a constant, a results block, the code's behaviour);
`benchmarks/bench_page_checker.py` shows it failing on each contradiction issue #58 found, re-introduced
one at a time. Here: the checkout has none, and one re-introduced contradiction of each kind of source
(a constant, a results block) fails the check.
"""

import importlib.util
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


page_figures = load(REPO / "scripts" / "page_figures.py")
proof = load(REPO / "benchmarks" / "bench_page_checker.py")


def test_no_figure_on_the_page_contradicts_its_source():
    problems = page_figures.check(REPO)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("index", [0, 4])  # a help figure against STEPS; a README's seconds against its block
def test_a_contradiction_re_introduced_fails_the_check(tmp_path, index):
    what, name, now, then = proof.CONTRADICTIONS[index]
    for folder in ("docs", "src", "benchmarks", "scripts", "examples"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copyfile(REPO / "README.md", tmp_path / "README.md")
    path = tmp_path / name
    path.write_text(path.read_text(encoding="utf-8").replace(now, then), encoding="utf-8")
    assert any(name in problem for problem in page_figures.check(tmp_path)), what
