"""The library's layers: imports point down only, and a step imports only what it needs.

    recipes/<model>/stage*/   steps           (evaluation steps are the only ones that use evaluation/)
    chat/                     the terminal chat (on the server's engine)
    evaluation/               metrics and harnesses
    sdg/                      synthetic data: endpoint client, strategies, judge, cost (a client of serve, over HTTP)
    training/                 the training run, losses, samplers, processes and collectives, memory check
    serve/                    the model server: engine, chat formats of checkpoints, HTTP API, page
    trace/                    spans of a text found in a model's training data (below serve: its page calls it)
    models/                   model configs, loading, "fits this model" checks, the device a model runs on
    data_prep/                data: sources, filters, tokenizers, chat templates, formats
    artifact/ trackers cli    the contract every step keeps (and atomic writes, errors, CPU threads: count, wait,
                              progress bars)

Checked two ways: every `import` statement in the source (module level or inside a function) against
the layer order, and each data-curation step imported in a fresh interpreter, which must not load
torch or transformers (a data step should start in a fraction of a second and run on a machine
without the model stack's import cost).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nemotron"
LAYERS = ["artifact", "trackers", "cli", "errors", "atomic", "cpu", "progress", "data_prep", "models", "trace", "serve",
          "training", "sdg", "evaluation", "chat", "recipes"]
# the contract: importable from anywhere
BASE = {"artifact", "trackers", "cli", "errors", "atomic", "cpu", "progress", "__init__"}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[str]:
    """Every nemotron module `path` imports, anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nemotron"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("nemotron")]
    return found


SOURCES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down_only(path):
    own = path.relative_to(SRC).parts[0].removesuffix(".py")
    if own in BASE:
        allowed = BASE
    else:
        allowed = BASE | set(LAYERS[: LAYERS.index(own) + 1])
    wrong = [module for module in imports(path) if layer_of(module) not in allowed]
    assert not wrong, f"{path.relative_to(SRC)} ({own}) imports {wrong}, which sit above it"


# ---------------------------------------------------------------------------------------------------
# No import cycles, inside a layer too (issue 23): a cycle means two modules are one concept, or a
# helper sits in the wrong one; a function-level import that "breaks" it still couples them.
# ---------------------------------------------------------------------------------------------------


def module_graph(root: Path, package: str, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports anywhere in its file (module or function level;
    under `if TYPE_CHECKING:`, which never runs and only names types for annotations, with `type_checking`).

    `from a.b import c` points at the module a.b.c when c is a module, else at a.b (a package's
    `__init__`). Only the named module counts, not the parent packages Python also runs, so a package
    that re-exports its submodules is not a cycle with them."""
    names = {".".join((package, *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): p
             for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        edges = set()
        for node in runtime_imports(ast.parse(path.read_text()), type_checking):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names}
                continue
            base = node.module or ""
            if node.level:  # relative: from the module's own package, one package up per extra dot
                own = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(own[: len(own) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                edges.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base)
        graph[name] = {edge for edge in edges if edge in names and edge != name}
    return graph


def runtime_imports(tree: ast.AST, type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if not type_checking and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        todo += ast.iter_child_nodes(node)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a -> b -> ... -> a) per strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = {stack.pop()}
            while module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_through(graph, group) for group in groups]


def _cycle_through(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest path from the group's first module back to itself (breadth-first)."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module] & group):
                if target == start:
                    return paths[module] + [start]
                if target not in paths:
                    paths[target] = paths[module] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {sorted(group)}")


def test_no_import_cycle_inside_nemotron():
    cycles = import_cycles(module_graph(SRC, "nemotron"))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_import_cycle_even_through_type_only_imports():
    """Not even for annotations (issue 59): the trackers, which the artifact core calls, name the fields they
    read (`trackers.Artifact`, a protocol) instead of importing the artifact core back."""
    graph = module_graph(SRC, "nemotron", type_checking=True)
    assert "nemotron.trackers" in graph["nemotron.artifact"]  # the one direction
    cycles = import_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.a import x\n")  # re-exporting a submodule: no cycle
    (package / "a.py").write_text("from pkg.sub.b import y\nx = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def y():\n    from pkg.sub import c\n")
    (package / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nfrom .. import a\n"
                                         "if TYPE_CHECKING:\n    from pkg.sub import b\n")  # types only: no edge
    assert import_cycles(module_graph(package, "pkg")) == [["pkg.a", "pkg.sub.b", "pkg.sub.c", "pkg.a"]]
    assert import_cycles(module_graph(package, "pkg", type_checking=True)) == [  # and the type-only one
        ["pkg.a", "pkg.sub.b", "pkg.sub.c", "pkg.a"]]
    (package / "a.py").write_text("x = 1\n")
    assert import_cycles(module_graph(package, "pkg", type_checking=True)) == [["pkg.sub.b", "pkg.sub.c", "pkg.sub.b"]]


# Every recipe module but package files: stage steps, and pipelines whose steps sit in the recipe folder.
STEPS = sorted(p for p in (SRC / "recipes").rglob("*.py")
               if not p.name.startswith("__") and p.parent != SRC / "recipes")


@pytest.mark.parametrize("path", STEPS, ids=lambda p: str(p.relative_to(SRC)))
def test_only_evaluation_steps_import_the_evaluation_package(path):
    if path.name == "evaluation.py":
        return
    assert not [m for m in imports(path) if layer_of(m) == "evaluation"], path


def test_the_layer_test_sees_every_step():
    names = {p.name for p in STEPS}
    assert {"data_curation.py", "training.py", "evaluation.py"} <= names and len(STEPS) >= 12


CURATION_STEPS = [p for p in STEPS if p.name in ("data_curation.py", "normalize.py", "pools.py", "synthetic_data.py")]
LIGHT = ["nemotron.recipes.nano2.artifacts", "nemotron.artifact", "nemotron.cli", "nemotron.recipes.orchestration",
         "nemotron.recipes.nano2.__main__", "nemotron.recipes.nano3.artifacts", "nemotron.recipes.nano3.__main__",
         "nemotron.data_prep.chat.nano3", "nemotron.data_prep.chat.templates", "nemotron.data_prep.chat.harmony",
         "nemotron.data_prep.verifiable"]


def module_name(path: Path) -> str:
    return ".".join(("nemotron", *path.relative_to(SRC).with_suffix("").parts))


# One interpreter imports the modules in turn and looks after each import: the first module that loads
# torch or transformers is named (after it they are loaded, so the probe stops there). One process, not
# one per module: the same check, without paying an interpreter and the shared imports 22 times.
LIGHT_PROBE = """
import importlib, json, sys
for module in sys.argv[1:]:
    importlib.import_module(module)
    heavy = [name for name in ("torch", "transformers") if name in sys.modules]
    if heavy:
        print(json.dumps({module: heavy}))
        break
else:
    print(json.dumps({}))
"""


@pytest.mark.slow
def test_data_steps_and_the_contract_import_neither_torch_nor_transformers():
    modules = [module_name(p) for p in CURATION_STEPS] + LIGHT
    assert len(modules) >= 15, modules
    result = subprocess.run([sys.executable, "-c", LIGHT_PROBE, *modules], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == {}, f"importing loads torch or transformers: {result.stdout.strip()}"


@pytest.mark.slow
def test_the_light_probe_names_the_module_that_loads_torch():
    result = subprocess.run([sys.executable, "-c", LIGHT_PROBE, "json", "torch.nn", "nemotron.cli"],
                            capture_output=True, text=True, timeout=120)
    assert json.loads(result.stdout) == {"torch.nn": ["torch"]}


# ---------------------------------------------------------------------------------------------------
# A second recipe reuses the library; it copies no step code from the first (issue 12)
# ---------------------------------------------------------------------------------------------------

BLOCK = 8  # lines: a block this long shared by two recipes' step files belongs in the library


def code_lines(path: Path) -> list[str]:
    """The file's lines with indentation, blank lines and comments dropped (what a copy keeps)."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def shared_blocks(a: Path, b: Path, size: int = BLOCK) -> list[str]:
    windows = {tuple(code_lines(a)[i : i + size]) for i in range(len(code_lines(a)) - size + 1)}
    lines = code_lines(b)
    return ["\n".join(lines[i : i + size]) for i in range(len(lines) - size + 1)
            if tuple(lines[i : i + size]) in windows]


def recipe_files(recipe: str) -> list[Path]:
    return sorted(p for p in (SRC / "recipes" / recipe).rglob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("nano3_file", recipe_files("nano3"), ids=lambda p: str(p.relative_to(SRC)))
def test_no_block_of_code_is_copied_between_the_nano2_and_nano3_recipes(nano3_file):
    copied = {str(f.relative_to(SRC)): blocks[0] for f in recipe_files("nano2")
              if (blocks := shared_blocks(f, nano3_file))}
    assert not copied, f"{nano3_file.relative_to(SRC)} repeats {BLOCK}+ lines of {copied}; move them into the library"


def test_the_copy_check_finds_a_copied_block(tmp_path):
    source = SRC / "recipes" / "nano2" / "stage0_pretrain" / "training.py"
    copy = tmp_path / "copy.py"
    lines = source.read_text().splitlines()
    copy.write_text("x = 1\n" + "\n".join(lines[-40:-20]))  # 20 lines of the step's main
    assert shared_blocks(source, copy)


# ---------------------------------------------------------------------------------------------------
# One recipe's page is no other recipe's dependency (issue 59): nano3 imports the library, never a nano2
# step. Only nano2's artifacts module may be shared (nano3's stage 0 makes nano2's PretrainDataset).
# ---------------------------------------------------------------------------------------------------

SHARED_NANO2 = {"nemotron.recipes.nano2.artifacts"}


def nano2_step_imports(path: Path, module: str) -> list[str]:
    """The nano2 modules other than its artifacts that the file at `path` (module `module`) imports: at
    module level, inside a function or under TYPE_CHECKING, absolute or relative, as `import a.b` or as a
    name in `from a import b`."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[:3] == ["nemotron", "recipes", "nano2"] and len(parts) > 3 \
                    and ".".join(parts[:4]) not in SHARED_NANO2:
                found.append(name)
    return sorted(set(found))


@pytest.mark.parametrize("nano3_file", sorted((SRC / "recipes" / "nano3").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(SRC)))
def test_nano3_imports_no_nano2_step(nano3_file):
    wrong = nano2_step_imports(nano3_file, module_name(nano3_file))
    assert not wrong, f"{nano3_file.relative_to(SRC)} imports {wrong}: call the library (nemotron.data_prep...)"


def test_the_nano2_step_check_finds_imports_anywhere(tmp_path):
    step = tmp_path / "data_curation.py"
    step.write_text("from nemotron.recipes.nano2.artifacts import PretrainDataset\n"
                    "def main():\n"
                    "    from nemotron.recipes.nano2.stage0_pretrain import data_curation as nano2_curation\n"
                    "    from ...nano2 import stage1_sft\n"
                    "    import nemotron.recipes.nano2.stage2_alignment.training\n")
    assert nano2_step_imports(step, "nemotron.recipes.nano3.stage0_pretrain.data_curation") == [
        "nemotron.recipes.nano2.stage0_pretrain", "nemotron.recipes.nano2.stage0_pretrain.data_curation",
        "nemotron.recipes.nano2.stage1_sft", "nemotron.recipes.nano2.stage2_alignment.training"]


# ---------------------------------------------------------------------------------------------------
# No private name crosses a module boundary (issue 59): a `_name` is its module's own; another module that
# needs it gets a public name, or the helper moves where both can reach it.
# ---------------------------------------------------------------------------------------------------


def private_imports(source: str) -> list[str]:
    """Every `_name` (not a dunder) in a `from nemotron... import` (or a relative import) of `source`,
    wherever it stands in the imported list, one name a line or a parenthesised list over several."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "nemotron"):
            found += [f"{'.' * node.level}{node.module or ''}.{alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_private_name_is_imported_from_another_module(path):
    wrong = private_imports(path.read_text())
    assert not wrong, f"{path.relative_to(SRC)} imports {wrong}: make it public, or move it where both can reach it"


def test_the_private_import_check_reads_the_whole_list():
    source = ("from nemotron.data_prep.sources import (\n    Document,\n    _shakespeare_folder,\n)\n"
              "def f():\n    from nemotron.x import a, _b as b\n    from .y import __version__, _c\n"
              "from os import _exit\n")
    assert private_imports(source) == ["nemotron.data_prep.sources._shakespeare_folder", "nemotron.x._b", ".y._c"]
