"""The recipe READMEs' result tables are written by scripts/readme_results.py from what was measured.

Each results block must be exactly what the script draws from the data stored beside it, and the
"Expected results" section of each recipe README may state no figure outside those blocks: a figure typed
by hand (or a table edited after the script wrote it) fails here. The pictures of a run (the chat page, the
run browser) must come from the run of nano2's Expected-results block (their sidecars' digests), and the top
README's chat example must be what the chat page picture shows.
"""

import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_results", REPO / "scripts" / "readme_results.py")
readme_results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_results)

# A figure: a decimal number, a number of two or more digits, or a share in percent (not a stage's number
# in "stage 1", nor anything inside code).
FIGURE = re.compile(r"(?<![\w.])(\d+%|\d+\.\d+|\d{2,})(?![\w.])")


def expected_section(text: str) -> str:
    start = text.index("## Expected results")
    end = text.find("\n## ", start + 1)
    return text[start: end if end != -1 else len(text)]


@pytest.mark.parametrize("recipe", sorted(readme_results.README))
def test_every_results_block_is_what_the_script_draws_from_its_data(recipe):
    text = readme_results.README[recipe].read_text(encoding="utf-8")
    blocks = list(readme_results.BLOCK.finditer(text))
    assert {m["name"] for m in blocks} >= {"expected", "lessons", "sft_length"}, (
        f"{recipe}/README.md lacks a results block (expected, lessons, sft_length)")
    for block in blocks:
        drawn = readme_results.render(block["name"], json.loads(block["data"]))
        assert block["table"] == drawn, (
            f"{recipe}/README.md results:{block['name']} is not what scripts/readme_results.py draws from its data; "
            "re-run the script instead of editing the table")


@pytest.mark.parametrize("recipe", sorted(readme_results.README))
def test_the_expected_results_section_states_no_figure_outside_the_blocks(recipe):
    section = expected_section(readme_results.README[recipe].read_text(encoding="utf-8"))
    prose = readme_results.BLOCK.sub("", section)
    prose = re.sub(r"```.*?```", "", prose, flags=re.S)  # commands
    prose = re.sub(r"`[^`]*`", "", prose)  # inline code: flags, file names
    figures = FIGURE.findall(prose)
    assert not figures, (f"{recipe}/README.md states {figures} in Expected results outside the blocks that "
                         "scripts/readme_results.py writes; put the figure in a block's data, or leave it out")


def test_a_block_drawn_from_other_data_fails_the_check():
    """The check can fail: one figure changed in a drawn table is no longer what the data gives."""
    data = {"date": "2026-12-01", "runs": [{"recipe": "nano2", "seed": 0, "threads": 2, "step_seconds": 110.0,
                                            "load_average": 0.5, "lessons": {"DPO": {
                                                "gain": 0.1, "standard_error": 0.005, "n": 500, "measure": "m",
                                                "before": 0.6, "after": 0.7}}}]}
    drawn = readme_results.render("lessons", data)
    assert "+0.1 ± 0.005 (20.0 SE)" in drawn
    assert readme_results.render("lessons", {**data, "date": "2026-12-02"}) != drawn
    assert FIGURE.findall("gains 0.08 and took 113 s, 35% more") == ["0.08", "113", "35%"]
    assert FIGURE.findall("stage 1 and stage0 with --seed 2") == []


def test_a_curve_point_that_patience_cut_short_says_so():
    """bench_sft_length records `stopped_early`; the drawn table marks such a point (its steps are not what its
    passes ask), and a curve stored before the key existed draws as it did."""
    point = {"fraction": 0.8, "epochs": 10.4, "steps": 940, "value": 0.54, "standard_error": 0.05,
             "cells": ["+0.540 ± 0.050"]}
    data = {"date": "2026-12-03", "seed": 0, "default_epochs": 13.0, "measure": "m", "columns": ["the lesson"],
            "points": [{**point, "stopped_early": True}]}
    assert "| 0.8 | 10.4 | 940 (--patience stopped it) | +0.540 ± 0.050 |" in readme_results.render("sft_length", data)
    for older in ({**point, "stopped_early": False}, point):
        drawn = readme_results.render("sft_length", {**data, "points": [older]})
        assert "| 0.8 | 10.4 | 940 | +0.540 ± 0.050 |" in drawn and "patience" not in drawn


def test_a_curve_point_shows_its_paired_change_from_the_default():
    """bench_sft_length compares each point with the default item for item; the drawn table gives that change
    and its verdict as a column (only when every point has one: an older curve draws as it did)."""
    change = {"gain": -0.23, "standard_error": 0.045, "verdict": "hurt: loss > 2 SE"}
    point = {"fraction": 0.8, "epochs": 15.36, "steps": 1337, "value": 0.76, "standard_error": 0.043,
             "stopped_early": False, "cells": ["+0.760 ± 0.043"], "against_default": change}
    data = {"date": "2026-12-05", "seed": 1, "default_epochs": 19.2, "measure": "m", "columns": ["the lesson"],
            "points": [point]}
    drawn = readme_results.render("sft_length", data)
    assert "| the lesson | the lesson's change from the default: paired ± SE |" in drawn
    assert "| 0.8 | 15.36 | 1337 | +0.760 ± 0.043 | -0.230 ± 0.045 (hurt: loss > 2 SE) |" in drawn
    older = {key: value for key, value in point.items() if key != "against_default"}
    assert "paired" not in readme_results.render("sft_length", {**data, "points": [older]})



def test_the_moe_dense_block_gives_each_run_and_the_median_and_spread_over_runs():
    """bench_lessons keeps each nano3 run's stage-0 comparison (metrics.moe_against_dense: gain = dense minus MoE,
    per window, paired); the block shows MoE minus dense per run, then per budget the median and the range."""
    def record(gain, error):
        return {"gain": gain, "standard_error": error, "n": 39, "moe_steps": 160, "dense_steps": 160}

    runs = [{"recipe": "nano3", "seed": seed, "threads": 2,
             "moe_against_dense": {"equal_tokens": record(gain, 0.01), "equal_time": record(gain - 0.02, 0.01)}}
            for seed, gain in ((0, 0.03), (1, 0.01), (2, 0.05))]
    runs.append({"recipe": "nano3", "seed": 3, "threads": 2})  # measured before the comparison existed: left out
    drawn = readme_results.render("moe_dense", {"date": "2026-12-07", "runs": runs})
    assert "| 1 | 2 | -0.0100 ± 0.0100 (-1.0 SE) | +0.0100 ± 0.0100 (+1.0 SE) |" in drawn
    assert "| 3 |" not in drawn
    assert ("Same tokens, over 3 runs: median -0.0300 nats/token (from -0.0500 to -0.0100); in standard errors, "
            "median -3.0 (from -5.0 to -1.0).") in drawn
    assert "Same training time, over 3 runs: median -0.0100 nats/token (from -0.0300 to +0.0100)" in drawn
def test_the_lessons_over_seeds_show_the_median_its_spread_and_the_median_ratio_per_stage():
    """issue 58: a headline over seeds is the median and the spread, not the best run."""
    def run(seed, threads, gain, error, greedy):
        return {"recipe": "nano2", "seed": seed, "threads": threads, "step_seconds": 100.0, "load_average": 1.0,
                "greedy": {"base": 0.0, "SFT": greedy}, "lessons": {"SFT": {
                    "measure": "chance", "before": 0.0, "after": gain, "gain": gain, "standard_error": error,
                    "n": 500}}}
    data = {"date": "2026-12-07", "runs": [run(0, 2, 0.5, 0.01, 0.8), run(1, 2, 0.3, 0.02, 0.5),
                                           run(2, 2, 0.4, 0.1, 0.7), run(0, 1, 0.5, 0.01, 0.8)]}
    drawn = readme_results.render("lessons", data)
    # two threads, seeds 0-2: gains 0.3, 0.4, 0.5 (median 0.4); ratios 50, 15, 4 (median 15, lowest 4)
    assert "| SFT | chance | 2 | 0-2 | +0.4 | +0.3 to +0.5 | 15.0 | 4.0 | 3 of 3 |" in drawn, drawn
    assert "| SFT | chance | 1 | 0 | +0.5 | +0.5 to +0.5 | 50.0 | 50.0 | 1 of 1 |" in drawn, drawn
    assert "over the 4 runs: base 0 (0 to 0), SFT 0.75 (0.5 to 0.8)." in drawn, drawn
    assert "| 1 | 2 | +0.3 ± 0.02 (15.0 SE) |" in drawn  # and each run below
    assert [readme_results.seed_list(s) for s in ([0, 1, 2, 3], [0, 2, 3], [0, 1, 5, 6, 7])] == [
        "0-3", "0, 2, 3", "0, 1, 5-7"]


def test_runs_that_measured_a_stage_in_two_ways_are_refused(tmp_path):
    """A lessons file mixing runs from before and after a stage's measure changed is one clear error."""
    runs = [{"recipe": "nano2", "seed": seed, "threads": 2, "step_seconds": 1.0, "load_average": 0.0,
             "lessons": {"SFT": {"measure": measure, "before": 0.0, "after": 1.0, "gain": 1.0, "standard_error": 0.1,
                                 "n": 9}}} for seed, measure in ((0, "answer NLL"), (1, "chance of a right answer"))]
    source = tmp_path / "lessons.json"
    source.write_text(json.dumps({"date": "2026-12-07", "runs": runs}))
    with pytest.raises(SystemExit, match="measured nano2's SFT lesson in 2 ways"):
        readme_results.main(["nano2", "lessons", str(source)])


def test_nano2_expected_results_show_the_skill_model_by_model_and_the_fair_chat_nll():
    data = {"date": "2026-12-07", "commit": "abc", "dirty": False, "seed": 0, "threads": 2, "torch": "2",
            "matmul_gflops": 1, "lessons": [], "step_seconds": [], "total_seconds": 0,
            "skill": [{"model": m, "p_right": [p, 0.01], "accuracy": [a, 0.02], "p_near_miss": [0.1, 0.005]}
                      for m, p, a in (("base", 0.0, 0.0), ("SFT", 0.57, 0.79), ("DPO", 0.65, 0.85))],
            "chat": {"measure": "content NLL", "before": 7.4, "after": 4.6, "gain": 2.8, "standard_error": 0.1,
                     "n": 102}}
    drawn = readme_results.render("expected", data)
    assert "| chance of a right answer (exact) | 0 ± 0.01 | 0.57 ± 0.01 | 0.65 ± 0.01 |" in drawn, drawn
    assert "| greedy answer right | 0 ± 0.02 | 0.79 ± 0.02 | 0.85 ± 0.02 |" in drawn, drawn
    assert "the chat: content NLL: 7.4 -> 4.6, +2.8 ± 0.1 (102 chats)." in drawn, drawn


def test_nano3_expected_results_answer_stage_0s_question_with_its_standard_error():
    """nano3 stage 0 asks whether the MoE beats its dense counterpart: the block draws both budgets' paired
    differences (MoE minus dense, so the sign of `gain`, dense -> MoE, flips) and its ratio to the error."""
    record = {"n": 39, "standard_error": 0.006, "moe_steps": 160, "moe_train_seconds": 29.04, "dense_train_seconds": 30}
    data = {"date": "2026-12-07", "commit": "abc", "dirty": False, "seed": 0, "threads": 2, "torch": "2",
            "matmul_gflops": 1, "lessons": [], "step_seconds": [], "total_seconds": 0,
            "moe_against_dense": {"equal_tokens": {**record, "gain": 0.018, "dense_steps": 160},
                                  "equal_time": {**record, "gain": -0.21, "dense_steps": 240}}}
    drawn = readme_results.render("expected", data)
    assert "paired over the same 39 windows" in drawn, drawn
    assert "| the same tokens | 160 (29.0) | 160 (30.0) | -0.0180 ± 0.0060 (-3.0 SE) |" in drawn, drawn
    assert "| the same time | 160 (29.0) | 240 (30.0) | +0.2100 ± 0.0060 (+35.0 SE) |" in drawn, drawn
    text = readme_results.README["nano3"].read_text(encoding="utf-8")
    shown = expected_data("nano3")
    assert shown.get("moe_against_dense"), "nano3's Expected results does not answer stage 0's question"
    assert "results:moe_dense" in expected_section(text), "nano3's Expected results lacks the MoE-vs-dense seeds"


def expected_data(recipe: str) -> dict:
    text = readme_results.README[recipe].read_text(encoding="utf-8")
    return next(json.loads(m["data"]) for m in readme_results.BLOCK.finditer(text) if m["name"] == "expected")


@pytest.mark.parametrize("picture", sorted(readme_results.PICTURES))
def test_each_picture_comes_from_the_run_in_expected_results(picture):
    """issue 58: the chat page and the run browser pictures are made from the run whose numbers the README shows
    (their sidecars' digests are that run's, step for step)."""
    sidecar = REPO / f"{picture}.json"
    assert sidecar.is_file(), f"{picture} has no sidecar: make it with its script from the Expected-results run"
    recipe = readme_results.PICTURES[picture]
    mismatches = readme_results.picture_mismatches(json.loads(sidecar.read_text()), expected_data(recipe))
    assert not mismatches, (f"{picture} comes from another run than {recipe}'s Expected results:\n"
                            + "\n".join(mismatches))


def test_a_picture_from_another_run_fails_the_check():
    expected = {"digests": {"stage1_sft/training": "a" * 64, "stage2_alignment/training": "b" * 64}}
    same = {"digests": {"stage1_sft/training": "a" * 64}}
    assert readme_results.picture_mismatches(same, expected) == []
    other = {"digests": {"stage1_sft/training": "c" * 64, "stage0_pretrain/training": "d" * 64}}
    assert readme_results.picture_mismatches(other, expected) == [
        f"stage1_sft/training: the picture shows {'c' * 12}, Expected results' run has {'a' * 12}",
        f"stage0_pretrain/training: the picture shows {'d' * 12}, Expected results' run has no such step"]
    assert readme_results.picture_mismatches(same, {}) != []  # a block that records no digests matches nothing


def test_the_top_readme_chat_example_is_what_the_chat_page_picture_shows():
    """README.md's chat example is drawn by the script from the chat page picture's sidecar (its answers, as the
    page showed them), so it comes from the same run as the picture."""
    text = readme_results.TOP_README.read_text(encoding="utf-8")
    block = next((m for m in readme_results.BLOCK.finditer(text) if m["name"] == "chat_page"), None)
    assert block is not None, ("README.md has no drawn chat_page block: python scripts/readme_results.py top "
                               "chat_page docs/chat-page.png.json")
    data = json.loads(block["data"])
    assert block["table"] == readme_results.render("chat_page", data)
    assert data == json.loads((REPO / "docs" / "chat-page.png.json").read_text()), (
        "README.md's chat example is not the chat page picture's; re-run readme_results.py top chat_page")


def test_every_block_of_the_top_readme_is_what_the_script_draws_from_its_data():
    text = readme_results.TOP_README.read_text(encoding="utf-8")
    blocks = list(readme_results.BLOCK.finditer(text))
    assert {m["name"] for m in blocks} >= set(readme_results.TOP_BLOCKS), (
        f"README.md lacks a drawn block of {readme_results.TOP_BLOCKS}: python scripts/readme_results.py top NAME FILE")
    for block in blocks:
        assert block["table"] == readme_results.render(block["name"], json.loads(block["data"])), (
            f"README.md results:{block['name']} is not what scripts/readme_results.py draws from its data")


def test_the_serving_paragraph_states_no_figure_outside_its_block():
    """issue 61: the README's serving figures come from a bench_serve.py --json run, not from typing."""
    text = readme_results.TOP_README.read_text(encoding="utf-8")
    start = text.index("Many streaming clients at once")
    section = text[start: text.index("\n## ", start)]
    assert "<!-- results:serving" in section
    prose = re.sub(r"`[^`]*`", "", readme_results.BLOCK.sub("", section))
    figures = FIGURE.findall(prose)
    assert not figures, f"README.md's serving paragraph states {figures} outside its results:serving block"


def test_the_serving_block_draws_each_ratio_against_its_goal():
    run = {"clients": 8, "complete": 8, "tokens_per_s": 40.0, "sequential_tokens_per_s": 10.0, "over_sequential": 4.0,
           "cpu_over_sequential": 3.9, "median_ttft_s": 0.5, "sequential_median_ttft_s": 0.15}
    model = {"model": "m", "context": 2048, "concurrent": [run, {**run, "clients": 16, "over_sequential": 4.5}],
             "head_of_line": {"alone_s": 0.1, "beside_long_s": 0.2, "target_s": 1.0},
             "cache": {"max_batch_size": 16, "bytes_per_row": 0, "bytes_per_token": 46080, "memory": 1}}
    data = {"command": "python benchmarks/bench_serve.py", "date": "2026-12-07", "commit": "abc", "dirty": False,
            "cores": 2, "cpu_model": "cpu", "load_average_before": [1.0, 1, 1], "load_average_after": [2.0, 1, 1],
            "max_tokens": 48, "long_tokens": 200, "delay_s": 2.0, "goals": {"8": 3.5, "16": 5.0}, "models": [model]}
    drawn = readme_results.render("serving", data)
    assert "| m | 8 | 40.0 | 10.0 | **4.00x** (goal met) | 3.90x | 0.50 s (0.15 s) | 8/8 |" in drawn, drawn
    assert "| m | 16 | 40.0 | 10.0 | **4.50x** (below the 5x goal) |" in drawn, drawn
    assert "46,080 bytes per token, so 16 rows of its 2,048 positions take 1.41 GiB." in drawn, drawn
    assert readme_results.render("serving", {**data, "commit": "abd"}) != drawn
