"""The recipe READMEs' result tables are written by scripts/readme_results.py from what was measured.

Each results block must be exactly what the script draws from the data stored beside it, and the
"Expected results" section of each recipe README may state no figure outside those blocks: a figure typed
by hand (or a table edited after the script wrote it) fails here.
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
