"""Check that the figures a learner reads agree with the code and with the generated result blocks.

`check(root)` reads the files of a checkout at `root` as text (the constants by parsing the code, not by
importing it, so a copy of the repository with one line changed is checked as it stands) and returns one
line per figure that contradicts its source; `tests/test_page_figures.py` asserts there is none. Each
rule names the source of truth of one kind of figure:

- a constant: the benchmark items per task at each scale (`orchestration.FULL_BENCHMARK_ITEMS` through
  `apply_scale`), a flag's "default per scale (tiny N)" (the step's table of that name, e.g. `STEPS`), the
  dense counterpart's steps (`DENSE_STEPS_PER_MOE_STEP`), the bill's MoE row (`sdg/cost.py`), a docstring's
  example call (the function's signature);
- a generated block (`scripts/readme_results.py`): a step's seconds, seconds per step, a default's steps,
  what the DPO variants did to the near miss;
- the code's own behaviour: what a GPU runs, what a benchmark trains, what the report cards say.

    python scripts/page_figures.py            # this checkout: one line per contradiction, exit 1 if any
    python benchmarks/bench_page_checker.py   # re-introduces old contradictions one at a time: each must fail
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

RECIPES = Path("src/nemotron/recipes")
BLOCK = re.compile(r"<!-- results:(?P<name>\w+) \(scripts/readme_results\.py writes this block; do not edit it by "
                   r"hand\) -->\n<!-- data: (?P<data>.*?) -->\n(?P<table>.*?)<!-- /results:(?P=name) -->", re.S)


# --------------------------------------------------------------------------------------------- sources of truth

def constant(root: Path, path: str | Path, name: str):
    """The literal value of module-level `name = ...` in `root/path`, parsed, never imported."""
    for node in ast.parse((root / path).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"{path} defines no constant {name}")


def block(root: Path, recipe: str, name: str) -> dict:
    """The data of results block `name` in a recipe README."""
    text = (root / RECIPES / recipe / "README.md").read_text(encoding="utf-8")
    return next(json.loads(m["data"]) for m in BLOCK.finditer(text) if m["name"] == name)


def seconds(root: Path, recipe: str, step: str) -> float:
    return dict(block(root, recipe, "expected")["step_seconds"])[step]


def pages(root: Path) -> list[Path]:
    """Every file a learner reads: the READMEs, docs/, and the code's docstrings, help and comments (not the
    checker and its proof, which quote the contradictions)."""
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    for folder in ("src", "benchmarks", "scripts", "examples"):
        files += sorted(p for p in (root / folder).rglob("*") if p.suffix in (".md", ".py"))
    return [p for p in files if p.is_file() and p.name not in ("page_figures.py", "bench_page_checker.py")]


def find(root: Path, pattern: str, files: list[Path] | None = None):
    """(file, match) for every match of `pattern` in `files` (default: every page)."""
    for path in files if files is not None else pages(root):
        for m in re.finditer(pattern, path.read_text(encoding="utf-8")):
            yield path.relative_to(root), m


def number(text: str) -> float:
    return float(text.replace(",", ""))


# --------------------------------------------------------------------------------------------- rules

def benchmark_items(root: Path) -> list[str]:
    """Items per task of the recipes' benchmarks step at each scale, against the constant that sets them."""
    full = constant(root, RECIPES / "orchestration.py", "FULL_BENCHMARK_ITEMS")
    scales = constant(root, "src/nemotron/artifact/__init__.py", "SCALES")
    items = {scale: scaled(root, full, scale) for scale in scales}
    problems = []
    for path, m in find(root, r"(\d[\d,]*) items (?:per task )?at (tiny|small|medium)|(\d[\d,]*) at (small|medium)\b"):
        stated, scale = (m[1], m[2]) if m[1] else (m[3], m[4])
        if m[3] and "items" not in m.string[max(0, m.start() - 80): m.start()]:
            continue  # "N at small" that is not about items
        if number(stated) != items[scale]:
            problems.append(f"{path}: '{m[0]}', but the benchmarks step scores {items[scale]} items per task at "
                            f"{scale} (orchestration.FULL_BENCHMARK_ITEMS {full} through apply_scale)")
    return problems


def scaled(root: Path, full: int, scale: str) -> int:
    """`artifact.apply_scale(full, scale)`, from the constants of the checkout at `root`."""
    scales = constant(root, "src/nemotron/artifact/__init__.py", "SCALES")
    scaled = max(1, int(full * scales[scale]))
    return min(scaled, constant(root, "src/nemotron/artifact/__init__.py", "TINY_CAP")) if scale == "tiny" else scaled


def tiny_default(root: Path, tables: dict[str, ast.expr], field: str) -> tuple[str, int] | None:
    """(the constant's name, the field's tiny default) from the step's table of the field's name (STEPS for
    `steps`), or from a full-scale count the field's name ends with (FULL_PROBLEMS for `max_problems`)."""
    table = tables.get(field.upper())
    if isinstance(table, ast.Dict):
        tiny = ast.literal_eval(table).get("tiny")
        return (field.upper(), tiny) if tiny is not None else None
    full = [name for name in tables if name.startswith("FULL_") and field.upper().endswith(name[len("FULL"):])]
    if len(full) == 1 and isinstance(value := ast.literal_eval(tables[full[0]]), int):
        return f"apply_scale({full[0]})", scaled(root, value, "tiny")
    return None


def per_scale_help(root: Path) -> list[str]:
    """A field's help "default per scale (tiny N)" against the constant its default comes from (`tiny_default`);
    a help built by `cli.per_scale` from the table cannot disagree and is not text here."""
    problems = []
    for path in sorted((root / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tables = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                  for t in node.targets if isinstance(t, ast.Name)}
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for field, doc in zip(cls.body, cls.body[1:]):
                if not (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                        and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                        and isinstance(doc.value.value, str)):
                    continue
                m = re.search(r"default per scale \(tiny ([\d,]+)", doc.value.value)
                source = tiny_default(root, tables, field.target.id) if m else None
                if source is not None and number(m[1]) != source[1]:
                    problems.append(f"{path.relative_to(root)}: --{field.target.id.replace('_', '-')} says tiny "
                                    f"{m[1]}, but {source[0]} gives tiny {source[1]}")
    return problems


def steps_and_seconds(root: Path) -> list[str]:
    """Steps, passes and seconds quoted in prose and comments, against the constants and the recipe runs."""
    problems = []
    nano2_steps = constant(root, RECIPES / "nano2/stage0_pretrain/training.py", "STEPS")["tiny"]
    for path, m in find(root, r"nano2 tiny's (\d+)-step curve"):
        if int(m[1]) != nano2_steps:
            problems.append(f"{path}: '{m[0]}', but nano2 tiny pretrains {nano2_steps} steps (STEPS)")
    sft = RECIPES / "nano2/stage1_sft/training.py"
    epochs = constant(root, sft, "EPOCHS")["tiny"]
    default = next(p for p in block(root, "nano2", "sft_length")["points"] if p["fraction"] == 1.0)
    for path, m in find(root, r"([\d.]+) passes = ~(\d+)[\s#]+steps", [root / sft]):
        if float(m[1]) != epochs or abs(int(m[2]) - default["steps"]) > 0.05 * default["steps"]:
            problems.append(f"{path}: '{m[0]}', but tiny trains EPOCHS {epochs} passes, {default['steps']} steps "
                            "(the README's sft_length block)")
    stage0 = seconds(root, "nano2", "stage0_pretrain/training")
    for path, m in find(root, r"stage 0 in about (\d+) s"):
        if abs(int(m[1]) - stage0) > 0.2 * stage0:
            problems.append(f"{path}: '{m[0]}', but the nano2 run in Expected results took {stage0} s")
    moe = seconds(root, "nano3", "stage0_pretrain/training")
    dense = seconds(root, "nano3", "stage0_pretrain/training_dense")
    per_step = moe / constant(root, RECIPES / "nano3/stage0_pretrain/training.py", "STEPS")["tiny"]
    for path, m in find(root, r"~?([\d.]+) s per MoE step"):
        if abs(float(m[1]) - per_step) > 0.25 * per_step:
            problems.append(f"{path}: '{m[0]}', but the nano3 run in Expected results took {per_step:.2f} s a step")
    if abs(moe / dense - 1) > 0.1:
        for path, m in find(root, r"measured them equal|a tiny MoE\s+step and a dense one cost the same"):
            problems.append(f"{path}: '{m[0]}', but the nano3 run in Expected results took MoE {moe} s, "
                            f"dense {dense} s")
    ratio = constant(root, RECIPES / "nano3/stage0_pretrain/training.py", "DENSE_STEPS_PER_MOE_STEP")
    for path, m in find(root, r"`DENSE_STEPS_PER_MOE_STEP` = ([\d.]+)x"):
        if float(m[1]) != ratio:
            problems.append(f"{path}: '{m[0]}', but DENSE_STEPS_PER_MOE_STEP is {ratio}")
    return problems


def dpo_variants(root: Path) -> list[str]:
    """What the README says of the NLL-alone variant, against the dpo_variants block (the default is its first row):
    that it "hardly moves the near miss" (it must take it down by less than half what the variant that takes it
    down most does), or that it "does as well as the default" (its gain not below the default's by more than two
    standard errors of their difference)."""
    variants = block(root, "nano2", "dpo_variants")["variants"]
    default, sft = variants[0], variants[0]["sft"]["p_near_miss"]
    nll_alone = next(v for v in variants if v["variant"].startswith("the NLL alone"))
    most = max(sft - v["p_near_miss"] for v in variants)
    problems = []
    readme = [root / RECIPES / "nano2/README.md"]
    for path, m in find(root, r"hardly moves the near miss", readme):
        if sft - nll_alone["p_near_miss"] >= most / 2:
            problems.append(f"{path}: '{m[0]}' of the NLL alone, but its block has it take the near miss down "
                            f"{sft - nll_alone['p_near_miss']:.3f} (the most any variant does: {most:.3f})")
    for path, m in find(root, r"does as well as the default", readme):
        error = (default["standard_error"] ** 2 + nll_alone["standard_error"] ** 2) ** 0.5
        if nll_alone["gain"] < default["gain"] - 2 * error:
            problems.append(f"{path}: the NLL alone '{m[0]}', but its block has it gain {nll_alone['gain']:+.3f} "
                            f"against the default's {default['gain']:+.3f} (± {error:.3f})")
    return problems


def moe_bill(root: Path) -> list[str]:
    """The sdg README's MoE row of the bill, against `sdg/cost.py`'s `Rephraser`."""
    tree = ast.parse((root / "src/nemotron/sdg/cost.py").read_text(encoding="utf-8"))
    rows = {c.args[0].value: (c.args[1].value, c.args[2].value) for c in ast.walk(tree)
            if isinstance(c, ast.Call) and getattr(c.func, "id", None) == "Rephraser"}
    problems = []
    for path, m in find(root, r"`moe-30B-A3B`\s+row of the bill[^:]*:\s+([\d.]+)B weights,\s+([\d.]+)B active"):
        if (float(m[1]) * 1e9, float(m[2]) * 1e9) != rows["moe-30B-A3B"]:
            problems.append(f"{path}: '{m[0]}', but sdg/cost.py's moe-30B-A3B row is {rows['moe-30B-A3B']}")
    return problems


def docstring_examples(root: Path) -> list[str]:
    """A module docstring's example call of a function the module defines binds to its signature."""
    problems = []
    for path in sorted((root / "src/nemotron").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = {f.name: f.args for f in tree.body if isinstance(f, ast.FunctionDef)}
        for line in (ast.get_docstring(tree) or "").splitlines():
            try:
                statement = ast.parse(line.split("#")[0].strip())
            except SyntaxError:
                continue
            for call in (c for c in ast.walk(statement) if isinstance(c, ast.Call)):
                args = functions.get(getattr(call.func, "id", None))
                if args is None:
                    continue
                positional = len(args.posonlyargs) + len(args.args)
                names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
                required = positional - len(args.defaults)
                given = len(call.args)
                if (given > positional and args.vararg is None or given + len(call.keywords) < required
                        or any(k.arg not in names for k in call.keywords if args.kwarg is None)):
                    problems.append(f"{path.relative_to(root)}: its docstring calls {line.strip()!r}, which does "
                                    f"not fit {call.func.id}'s signature")
    return problems


def code_behaviour(root: Path) -> list[str]:
    """Sentences about what the code does, against the code."""
    problems = [f"{path}: '{m[0]}': only with mamba_ssm installed (models/mamba2.py: MAMBA_SSM_KERNELS)"
                for path, m in find(root, r"\b(?:a GPU|a CUDA device) keeps transformers' forward")]
    stage0 = (root / RECIPES / "nano2/stage0_pretrain/training.py").read_text(encoding="utf-8")
    bench = (root / "benchmarks/bench_hybrid_vs_transformer.py").read_text(encoding="utf-8")
    if "use_training_scan(" in stage0 and "use_training_scan(" not in bench:
        problems.append("benchmarks/bench_hybrid_vs_transformer.py: trains the hybrid on transformers' scan, but "
                        "stage 0 trains it with use_training_scan (the nano2 README's 'Why hybrid?')")
    card = (root / RECIPES / "report_card.py").read_text(encoding="utf-8")
    if re.search(r"has seen [^\"]*chat", card):
        problems.append(f"{RECIPES}/report_card.py: the shared card says what every recipe's model has seen, but "
                        "nano3's SFT data holds chat only with --chat-data")
    for recipe in ("nano2", "nano3"):
        report = (root / RECIPES / recipe / "report.py").read_text(encoding="utf-8")
        if "header(" not in report and "git_commit" not in report:
            problems.append(f"{RECIPES}/{recipe}/report.py: the card's header lacks the version and the commit")
    run = ast.parse((root / "src/nemotron/training/run.py").read_text(encoding="utf-8"))
    record = next((f for c in run.body if isinstance(c, ast.ClassDef) and c.name == "TrainingRun"
                   for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "record"), None)
    body = ast.unparse(ast.Module(body=record.body[1:], type_ignores=[])) if record is not None else ""
    if re.search(r"schedule|anneal|patience", body):
        problems.append("src/nemotron/training/run.py: TrainingRun.record changes the schedule or stops the run; "
                        "early stopping is the step's own check, in its loop")
    return problems


RULES: list[Callable[[Path], list[str]]] = [benchmark_items, per_scale_help, steps_and_seconds, dpo_variants,
                                            moe_bill, docstring_examples, code_behaviour]


def check(root: Path) -> list[str]:
    """Every figure or claim on the pages of `root` that contradicts its source, one line each."""
    return [problem for rule in RULES for problem in rule(Path(root))]


if __name__ == "__main__":
    found = check(Path(__file__).resolve().parents[1])
    print("\n".join(found) or "page_figures: every checked figure agrees with its source", file=sys.stderr)
    sys.exit(1 if found else 0)
