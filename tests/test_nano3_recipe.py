"""End to end: the whole nano3 recipe at tiny scale, `python -m nemotron.recipes.nano3 --scale tiny`.

The session fixture `nano3_run` (tests/runs.py) makes the default run once per pytest run (about 5 minutes
on 2 cores); the tests below read it: the held-out claims, the report card, and a re-run that skips.
The stage steps one by one, with short runs, are tests/test_nano3_stages.py.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from runs import recipe_command  # tests/ is on sys.path under pytest

pytestmark = pytest.mark.slow  # every test here reads one whole-recipe run


def test_whole_recipe_at_tiny_shows_learning_on_held_out_data(nano3_run):
    """Held out: both stage-0 models below the unigram's bits per byte, SFT above base on exact match, RL
    above SFT on held-out reward (the README reports the margin in standard errors)."""
    made = nano3_run.artifacts
    assert set(made) >= {"pretraindataset", "nano3pretraincheckpoint", "nano3pretrainresults", "nano3sftresults",
                         "nano3rlresults"}
    stage0 = made["nano3pretrainresults"]["metrics"]
    assert max(stage0["moe_bits_per_byte"], stage0["dense_bits_per_byte"]) < stage0["unigram_bits_per_byte"], stage0
    sft = made["nano3sftresults"]
    assert sft["sft_exact_match_reasoning_on"] > sft["base_exact_match_reasoning_on"], sft["metrics"]
    rl = made["nano3rlresults"]["metrics"]
    assert rl["reward_gain"] > 0 and rl["rl_reward"] > rl["sft_reward"], rl


def test_whole_recipe_report_card_shows_every_stage(nano3_run):
    report = nano3_run.out / "report"
    text = nano3_run.report_text
    assert "| held-out bits per byte |" in text and (report / "expert_load.png").stat().st_size > 0
    assert "## Stage 1: exact match" in text and "## Stage 2: GRPO" in text and (report / "reward.png").exists()
    assert "Held-out reward gain RL - SFT" in text


def test_whole_recipe_rerun_skips_every_step(nano3_run):
    again = subprocess.run(recipe_command("nano3", nano3_run.out), capture_output=True, text=True,
                           env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}, timeout=600)
    assert again.returncode == 0 and "9 skipped" in again.stderr, again.stderr[-1000:]
