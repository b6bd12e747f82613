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


def test_the_stage0_comparison_answers_per_budget_with_the_paired_error_and_older_results_draw_as_they_did():
    metrics = {"moe_bits_per_byte": 2.27, "dense_bits_per_byte": 2.28, "dense_time_bits_per_byte": 2.25,
               "unigram_bits_per_byte": 3.1, "moe_steps": 160, "dense_steps": 160, "dense_time_steps": 240,
               "moe_active_parameters": 1470000, "dense_parameters": 1468000, "dense_time_parameters": 1468000}
    record = {"n": 39, "moe_steps": 160, "moe_train_seconds": 28.7}
    metrics["moe_against_dense"] = {  # gain: the dense loss minus the MoE's, per window (positive: MoE better)
        "equal_tokens": {**record, "gain": 0.012, "standard_error": 0.004, "dense_steps": 160,
                         "dense_train_seconds": 19.5},
        "equal_time": {**record, "gain": -0.003, "standard_error": 0.005, "dense_steps": 240,
                       "dense_train_seconds": 29.0}}
    text = "\n".join(report.comparison(metrics))
    assert "| | MoE | dense, same tokens | dense, same training time | unigram |" in text
    assert "| training steps | 160 | 160 | 240 |  |" in text
    assert ("- Same tokens (MoE 160 steps in 28.7 s, dense 160 in 19.5 s): -0.0120 ± 0.0040 nats/token over 39 "
            "windows: the MoE model predicts better.") in text
    assert "- Same training time (MoE 160 steps in 28.7 s, dense 240 in 29 s): +0.0030 ± 0.0050" in text
    assert text.endswith("no clear difference.")
    older = {k: v for k, v in metrics.items() if not k.startswith("dense_time") and k != "moe_against_dense"}
    drawn = report.comparison(older)
    assert drawn[0] == "| | MoE | dense, same tokens | unigram |" and not any("nats/token over" in x for x in drawn)

