"""What the report cards say, from artifacts and metrics written here (the whole-recipe tests read real ones):
each MoE layer's expert balance, the mistakes RL teaches beside the one it unlearns, the header, and what to
ask the chat model."""

from __future__ import annotations

import json

from nemotron.recipes import report_card
from nemotron.recipes.nano3 import report

EXPERTS = 8


def test_the_card_shows_each_moe_layers_balance_and_names_a_layer_one_expert_dominates(tmp_path):
    even = [1 / EXPERTS] * EXPERTS
    dominated = [0.4] + [0.6 / (EXPERTS - 1)] * (EXPERTS - 1)  # one expert takes 40%: even is 12.5%
    metrics = tmp_path / "metrics.jsonl"
    record = {"loss": 1.0, "aux_loss": 1.1, "expert_load": [even, dominated]}
    metrics.write_text("".join(json.dumps({"step": step, **record}) + "\n" for step in (1, 2)))
    lines = report.expert_balance(metrics)
    assert "| 1 | 0.125 | 0.125 | 1.00x |" in lines
    assert "| 2 | 0.4 | 0.08571 | 3.20x |" in lines
    assert lines[0].endswith("(step 2) |") and lines[-1] == "An even split gives every expert 0.125."
    report.plot_expert_load(metrics, tmp_path / "expert_load.png")
    assert (tmp_path / "expert_load.png").stat().st_size > 0


def test_the_rl_table_counts_added_carries_beside_dropped_ones_and_older_results_draw_as_they_did():
    metrics = {"samples_per_problem": 4, "num_problems": 200, "sft_reward": 0.8, "rl_reward": 0.94,
               "sft_exact_match": 0.9, "rl_exact_match": 0.95, "sft_exact_match_stderr": 0.02,
               "rl_exact_match_stderr": 0.015, "gain_above_two_stderr": True, "reward_gain": 0.14,
               "reward_gain_stderr": 0.016, "sft_dropped_carry_share": 0.23, "rl_dropped_carry_share": 0.056,
               "sft_added_carry_share": 0.01, "rl_added_carry_share": 0.03, "sft_other_share": 0.04,
               "rl_other_share": 0.02}
    text = "\n".join(report.rl_table(metrics))
    assert "| sampled answers that drop a carry (the teacher's mistake) | 0.23 | 0.056 |" in text
    assert "| sampled answers that add a carry that is not there | 0.01 | 0.03 |" in text
    assert "| sampled answers that are wrong otherwise | 0.04 | 0.02 |" in text
    older = {k: v for k, v in metrics.items() if "added" not in k and "other" not in k}
    text = "\n".join(report.rl_table(older))
    assert "drop a carry" in text and "add a carry" not in text


def test_the_header_names_version_and_commit_and_the_chat_sentence_is_the_recipes():
    artifacts = [{"type": "nano3sftdataset", "scale": "tiny", "seed": 0, "config": {"chat_data": False},
                  "producer": {"version": "0.1.0", "git_commit": "0123456789abcdef"}}]
    line = report_card.header("nano3", artifacts)[2]
    assert line == "scale **tiny**, seed **0**, nemotron 0.1.0, commit `0123456789ab`"
    assert "no chat" in report.what_it_has_seen(artifacts)
    artifacts[0]["config"]["chat_data"] = True
    assert "chat beside the sums" in report.what_it_has_seen(artifacts)
