"""Documentation that must stay true.

- The custom-blend example (examples/custom_blend/README.md) runs exactly as its README writes it, and
  the artifact it makes holds what the README says: documents from both sources, drawn by weight as
  documented, with the per-split table of the README matching the run.
- Every `python -m nemotron...` module that README.md, docs/*.md and the example and recipe READMEs
  mention can be imported (what `python -m` would run), and every `python examples/...` path exists,
  so the docs cannot point at code that is not there.
"""

import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nemotron.data_prep.indexed import IndexedReader
from nemotron.data_prep.tokenizer import EOS_ID, load_tokenizer
from nemotron.recipes.nano2.artifacts import PretrainDataset

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "custom_blend"
STEP = "nemotron.recipes.nano2.stage0_pretrain.data_curation"
DOCUMENTS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "examples").glob("*/README.md")),
    *sorted((REPO / "src" / "nemotron" / "recipes").rglob("README.md")),
]


# ---------------------------------------------------------------------------------------------
# The custom blend example
# ---------------------------------------------------------------------------------------------


def readme_command() -> list[str]:
    """The README's command line for the step (backslash continuations joined), as argv."""
    lines = (EXAMPLE / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"python -m {STEP}"))
    command = lines[start]
    while command.endswith("\\"):
        start += 1
        command = command[:-1] + " " + lines[start].strip()
    return shlex.split(command)


def readme_draw_table() -> dict[str, dict[str, tuple[int, int]]]:
    """The README's table `| split | a -> b | c -> d |` as {split: {source: (available, drawn)}}."""
    text = (EXAMPLE / "README.md").read_text()
    header = re.search(r"^\| split \| (\w+) available -> drawn \| (\w+) available -> drawn \|$", text, re.MULTILINE)
    rows = re.findall(r"^\| (train|valid|test) \| (\d+) -> (\d+) \| (\d+) -> (\d+) \|$", text, re.MULTILINE)
    assert header and len(rows) == 3, "the README's draw table changed shape; update this test with it"
    first, second = header.groups()
    return {
        split: {first: (int(a), int(b)), second: (int(c), int(d))}
        for split, a, b, c, d in rows
    }


@pytest.fixture(scope="module")
def custom_blend_run(tmp_path_factory):
    """The README's command, run for real with only the output folder moved into tmp."""
    argv = readme_command()
    assert argv[:3] == ["python", "-m", STEP] and "--blend-path" in argv and "--scale" in argv
    out = tmp_path_factory.mktemp("custom_blend") / "data_curation"
    argv[0] = sys.executable
    argv[argv.index("--output-dir") + 1] = str(out)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("NEMOTRON_TRACKER", None)
    result = subprocess.run(argv, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return out, json.loads(result.stdout)


@pytest.mark.slow
def test_custom_blend_command_makes_a_verified_dataset_from_both_sources(custom_blend_run):
    out, printed = custom_blend_run
    dataset = PretrainDataset.from_path(out)
    dataset.verify()  # every shard and tokenizer file matches the digest
    assert printed["pretraindataset"]["digest"] == dataset.digest
    assert dataset.scale == "tiny"

    # Lineage names both raw sources of the blend, with content digests.
    blend = json.loads((EXAMPLE / "blend.json").read_text())
    expected = {str((EXAMPLE / source["path"]).resolve()) for source in blend["sources"]}
    assert {ref.path for ref in dataset.inputs} == expected
    assert all(ref.type == "source" and ref.digest for ref in dataset.inputs)

    # Both sources reach the training split and its shards.
    train = [json.loads(line) for path in sorted((out / "splits").glob("*/train/*.jsonl"))
             for line in path.read_text().splitlines()]
    assert set(Counter(doc["source"] for doc in train)) == {s["name"] for s in blend["sources"]}
    assert dataset.metrics["documents_curated"] == 36  # the README: all 36 documents are kept


@pytest.mark.slow
def test_custom_blend_draw_follows_the_weights_as_documented(custom_blend_run):
    out, _ = custom_blend_run
    dataset = PretrainDataset.from_path(out)
    weights = {s["name"]: s["weight"] for s in json.loads((EXAMPLE / "blend.json").read_text())["sources"]}
    draw = dataset.metrics["blend_draw"]

    # The README's table is what the run drew.
    for split, by_source in readme_draw_table().items():
        for source, (available, drawn) in by_source.items():
            got = draw[split].get(source, {"available": 0, "drawn": 0})
            assert (got["available"], got["drawn"]) == (available, drawn), (split, source)

    # The documented rule: N = the split's available documents; source i gets N * w_i / sum(w),
    # rounded so the counts add up to N; the split files hold exactly those draws.
    for split, sources in draw.items():
        total = sum(s["available"] for s in sources.values())
        weight_sum = sum(weights[name] for name in sources)
        assert sum(s["drawn"] for s in sources.values()) == total
        for name, counts in sources.items():
            assert abs(counts["drawn"] - total * weights[name] / weight_sum) < 1, (split, name)
        lines = [line for path in sorted((out / "splits").glob(f"*/{split}/*.jsonl"))
                 for line in path.read_text().splitlines()]
        in_file = Counter(json.loads(line)["source"] for line in lines)
        assert in_file == {name: counts["drawn"] for name, counts in sources.items() if counts["drawn"]}

    # Upweighted past its size, a source repeats whole passes: every available note is in train.
    train = [json.loads(line) for path in sorted((out / "splits").glob("*/train/*.jsonl"))
             for line in path.read_text().splitlines()]
    notes = draw["train"]["notes"]
    assert notes["drawn"] > notes["available"] and draw["train"]["sonnets"]["drawn"] < notes["drawn"]
    assert len({doc["id"] for doc in train if doc["source"] == "notes"}) == notes["available"]


@pytest.mark.slow
def test_custom_blend_shards_hold_the_drawn_documents_with_eos(custom_blend_run):
    out, _ = custom_blend_run
    dataset = PretrainDataset.from_path(out)
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    train = [json.loads(line) for path in sorted((out / "splits").glob("*/train/*.jsonl"))
             for line in path.read_text().splitlines()]
    documents = [doc for prefix in dataset.train_prefixes for doc in IndexedReader(prefix)]
    assert len(documents) == len(train)
    for tokens, record in zip(documents, train):  # shards are contiguous line ranges, in order
        assert tokens[-1] == EOS_ID
        assert tokenizer.decode(tokens[:-1].tolist()) == record["text"]


# ---------------------------------------------------------------------------------------------
# Every module and example path the docs mention exists
# ---------------------------------------------------------------------------------------------

MODULE_MENTION = re.compile(r"-m\s+(nemotron[\w.<>]*)")
EXAMPLE_MENTION = re.compile(r"python3?\s+(examples/[\w./-]+)")


def mentions(pattern: re.Pattern) -> dict[str, list[str]]:
    """{mentioned name: [documents that mention it]}; template names like `recipes.<name>` skipped."""
    found: dict[str, list[str]] = {}
    for document in DOCUMENTS:
        for match in pattern.finditer(document.read_text()):
            name = match.group(1)
            if "<" not in name and not name.endswith(".."):  # a template or "nemotron..." in prose
                name = name.rstrip(".")  # a sentence's full stop
                found.setdefault(name, []).append(str(document.relative_to(REPO)))
    return found


DOCUMENTED_MODULES = mentions(MODULE_MENTION)
DOCUMENTED_EXAMPLES = mentions(EXAMPLE_MENTION)


def test_the_docs_mention_the_commands_a_user_needs():
    # Guards the two scans below against silently finding nothing (a changed regex or layout).
    assert {"nemotron.recipes.nano2", "nemotron.artifact", STEP} <= set(DOCUMENTED_MODULES)
    assert len(DOCUMENTS) >= 5


@pytest.mark.parametrize("module", sorted(DOCUMENTED_MODULES))
def test_documented_module_is_importable(module):
    """What `python -m module` runs: the module itself, or the package's __main__."""
    where = ", ".join(sorted(set(DOCUMENTED_MODULES[module])))
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    assert spec is not None, f"{where} mentions `python -m {module}`, which does not exist"
    runnable = f"{module}.__main__" if spec.submodule_search_locations is not None else module
    importlib.import_module(runnable)


def test_documented_example_paths_exist():
    missing = {path: where for path, where in DOCUMENTED_EXAMPLES.items() if not (REPO / path).exists()}
    assert not missing, f"the docs mention example paths that do not exist: {missing}"


# ---------------------------------------------------------------------------------------------
# A model recipe's README follows the template of docs/add-a-recipe.md
# ---------------------------------------------------------------------------------------------

TEMPLATE_SECTIONS = ("## Model overview", "## Hardware requirements", "## How to run", "## Expected results",
                     "## Citation")


def test_the_nano2_readme_has_the_template_sections_with_true_parameter_counts():
    from nemotron.data_prep.tokenizer import VOCAB_SIZES
    from nemotron.models.nano2 import SCALES, build_config, count_parameters

    text = (REPO / "src" / "nemotron" / "recipes" / "nano2" / "README.md").read_text()
    template = (REPO / "docs" / "add-a-recipe.md").read_text()
    assert all(f"`{section}`" in template for section in TEMPLATE_SECTIONS), "docs/add-a-recipe.md lost the template"
    missing = [section for section in (*TEMPLATE_SECTIONS, "## Why hybrid?") if section + "\n" not in text]
    assert not missing, f"nano2/README.md lacks {missing}"
    # Hardware: one row per scale, its model state worked out as 16 bytes x the true parameter count.
    hardware = text[text.index("## Hardware requirements") : text.index("## How to run")]
    for scale in SCALES:
        row = next(line for line in hardware.splitlines() if line.startswith(f"| {scale} |"))
        params = count_parameters(build_config(scale, VOCAB_SIZES[scale]))
        shown = re.search(r"16 x ([\d.]+) ([MB])", row)
        assert shown, row
        value = float(shown[1]) * (1e6 if shown[2] == "M" else 1e9)
        assert abs(value - params) / params < 0.03, f"{scale}: README says {shown[0]}, the model has {params:,}"
    bibtex = text[text.index("## Citation") :]
    assert "```bibtex" in bibtex and len(re.findall(r"^@\w+\{", bibtex, re.MULTILINE)) >= 3
    assert "2508.14444" in bibtex  # the Nemotron Nano 2 report the recipe follows


def test_the_nano3_readme_has_the_template_sections_with_true_parameter_counts():
    from nemotron.data_prep.tokenizer import VOCAB_SIZES
    from nemotron.models.nano3 import SCALES, active_parameters, build_config, count_parameters

    text = (REPO / "src" / "nemotron" / "recipes" / "nano3" / "README.md").read_text()
    missing = [section for section in TEMPLATE_SECTIONS if section + "\n" not in text]
    assert not missing, f"nano3/README.md lacks {missing}"
    overview = text[text.index("## Model overview") : text.index("## Hardware requirements")]
    hardware = text[text.index("## Hardware requirements") : text.index("## How to run")]
    for scale in SCALES:
        config = build_config(scale, VOCAB_SIZES[scale])
        params, active = count_parameters(config), active_parameters(config)
        row = next(line for line in hardware.splitlines() if line.startswith(f"| {scale} |"))
        shown = re.search(r"16 x ([\d.]+) ([MB])", row)
        assert shown, row
        value = float(shown[1]) * (1e6 if shown[2] == "M" else 1e9)
        assert abs(value - params) / params < 0.03, f"{scale}: README says {shown[0]}, the model has {params:,}"
        row = next(line for line in overview.splitlines() if line.startswith(f"| {scale} |"))
        counts = [float(n) * (1e6 if unit == "M" else 1e9) for n, unit in re.findall(r"\| ([\d.]+) ([MB]) ", row)]
        assert len(counts) == 2, row  # parameters, active per token
        assert abs(counts[0] - params) / params < 0.03, (row, params)
        assert abs(counts[1] - active) / active < 0.03, (row, active)
    bibtex = text[text.index("## Citation") :]
    assert "```bibtex" in bibtex and len(re.findall(r"^@\w+\{", bibtex, re.MULTILINE)) >= 3
    assert "2512.20848" in bibtex  # the Nemotron 3 Nano report the recipe follows
