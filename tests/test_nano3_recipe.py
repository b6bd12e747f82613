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
    """Held out: both stage-0 models below the unigram's bits per byte, SFT above base on exact match, and
    GRPO above SFT on held-out reward beyond two standard errors of the paired gain; the teacher's dropped
    carry, imitated by SFT's samples, rarer after RL."""
    made = nano3_run.artifacts
    assert set(made) >= {"pretraindataset", "nano3pretraincheckpoint", "nano3pretrainresults", "nano3sftresults",
                         "nano3rlresults"}
    stage0 = made["nano3pretrainresults"]["metrics"]
    assert max(stage0["moe_bits_per_byte"], stage0["dense_bits_per_byte"]) < stage0["unigram_bits_per_byte"], stage0
    against = stage0["moe_against_dense"]  # the MoE against the dense model at equal tokens and at equal time
    assert against["equal_time"]["dense_steps"] > against["equal_tokens"]["dense_steps"] == stage0["moe_steps"]
    sft = made["nano3sftresults"]
    assert sft["sft_exact_match_reasoning_on"] > sft["base_exact_match_reasoning_on"], sft["metrics"]
    assert 0.1 < made["nano3sftdataset"]["metrics"]["teacher_error_share"] < 0.2
    rl = made["nano3rlresults"]["metrics"]
    assert rl["reward_gain"] > 2 * rl["reward_gain_stderr"], rl
    assert rl["rl_dropped_carry_share"] < rl["sft_dropped_carry_share"], rl


def test_every_evaluation_states_its_lesson_and_every_stage_teaches(nano3_run):
    """issue 36: metrics.lesson in each stage's evaluation (the previous model on the same held-out items;
    stage 0 the unigram), every gain above two paired standard errors; the report card's "Did it work?"
    table with a verdict per stage, the answers SFT and RL changed, GRPO's clipped share (or why it is
    zero), and what the models say."""
    import re

    from nemotron.evaluation.lessons import LESSON_FIELDS
    from nemotron.evaluation.lessons import lesson as lesson_of

    made = nano3_run.artifacts
    for kind in ("nano3pretrainresults", "nano3sftresults", "nano3rlresults"):
        lesson = made[kind]["metrics"]["lesson"]
        assert tuple(lesson) == LESSON_FIELDS, (kind, lesson)
        assert lesson["n"] > 1 and lesson["standard_error"] > 0, (kind, lesson)
        print(f"{kind}: {lesson['measure']}: {lesson['before']:.4g} -> {lesson['after']:.4g}, "
              f"gain {lesson['gain']:+.4g} ± {lesson['standard_error']:.2g}")
        assert lesson["gain"] > 2 * lesson["standard_error"], f"{kind}: the stage did not teach: {lesson}"
    # SFT keeps the per-question values its lesson came from (bench_sft_length compares runs item for item).
    sft = made["nano3sftresults"]["metrics"]
    assert lesson_of(sft["lesson"]["measure"], **sft["lesson_items"]) == sft["lesson"]
    rl = made["nano3rlresults"]["metrics"]
    assert rl["lesson"]["gain"] == pytest.approx(rl["reward_gain"])  # the lesson is the reward GRPO maximised
    for kind in ("nano3sftresults", "nano3rlresults"):
        changed = made[kind]["metrics"]["changed_answers"]
        assert len(changed["fixed"]) == min(5, changed["num_fixed"]), changed
    text = nano3_run.report_text
    assert "## Did it work?" in text and "held-out answers it changed" in text
    for stage in ("stage 0: pretraining \\(MoE\\)", "stage 1: SFT", "stage 2: RL \\(GRPO\\)"):
        assert re.search(rf"^\| {stage} \| .* \| helped: gain > 2 SE \|$", text, re.MULTILINE), stage
    assert "Share of completion tokens whose probability ratio PPO's clip cut" in text
    answers = text[text.index("## What the models say"):].split("\n## ")[0]
    assert answers.count("</think>") >= 3, answers  # SFT's and RL's worked answers, side by side with base's


def test_whole_recipe_report_card_shows_every_stage(nano3_run):
    import re

    report = nano3_run.out / "report"
    text = nano3_run.report_text
    assert "| held-out bits per byte |" in text and (report / "expert_load.png").stat().st_size > 0
    assert "- Same tokens (MoE" in text and "- Same training time (MoE" in text  # stage 0's answer, per budget
    assert "## Stage 1: exact match" in text and "## Stage 2: GRPO" in text and (report / "reward.png").exists()
    assert "Held-out reward gain RL - SFT" in text and "sampled answers that drop a carry" in text
    assert "sampled answers that add a carry that is not there" in text  # the mistake RL teaches, counted too
    assert "| MoE layer | busiest expert's share |" in text and ", commit `" in text.splitlines()[2]
    # SFT's finer measures: the exact chances of the teacher's right working and of its mistake
    assert re.search(r"^\| chance of the right working, word for word \| [\d.e+-]+ ± [\d.e+-]+ \| 0\.\d+ ± ", text,
                     re.MULTILINE), text
    sft = nano3_run.artifacts["nano3sftresults"]["metrics"]
    assert sft["sft_p_right_working"] > sft["base_p_right_working"] + 2 * sft["sft_p_right_working_stderr"], sft
    assert sft["sft_p_dropped_carry"] > sft["base_p_dropped_carry"], sft  # it imitates its teacher's mistake too


def test_whole_recipe_rerun_skips_every_step(nano3_run):
    again = subprocess.run(recipe_command("nano3", nano3_run.out), capture_output=True, text=True,
                           env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}, timeout=600)
    # every step of the first run skipped: 12 (stage 0 trains the MoE and two dense counterparts, equal tokens and time)
    assert again.returncode == 0 and "0 steps run, 12 skipped" in again.stderr, again.stderr[-1000:]


def test_report_card_shows_the_standard_benchmarks_and_says_where_a_score_is_at_chance(nano3_run):
    """issue 37: the final (RL) model on every standard task, each with its control, and the table says in
    words where a score is at chance (within two standard errors of guessing or of one answer every time)."""
    from test_benchmarks_standard import recipe_benchmark_rows

    recipe_benchmark_rows(nano3_run.report_text, nano3_run.artifacts["standardbenchmarkresults"], "nano3rlcheckpoint")


def test_the_trained_rl_model_reasons_apart_in_the_terminal_and_the_api(nano3_run, tmp_path):
    """The RL checkpoint the recipe trained, asked a sum: in the terminal the reasoning goes to stderr and the
    answer alone to stdout; through the `openai` client the reasoning comes in its own fields and the same
    greedy answer in `content`; with `enable_thinking` false it answers at once, in `content` only."""
    import socket
    import sys
    import time

    import httpx
    import openai

    rl = nano3_run.out / "stage2_rl" / "training"
    question = "What is 37 + 48?"
    chat = subprocess.run([sys.executable, "-m", "nemotron.chat", str(rl), "--prompt", question], capture_output=True,
                          text=True, env={**os.environ, "TERM": "dumb"}, timeout=300)
    assert chat.returncode == 0 and "[reasoning]" in chat.stderr, chat.stderr[-2000:]
    assert chat.stdout.strip() and "think>" not in chat.stdout, (chat.stdout, chat.stderr[-2000:])

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "nemotron.serve", str(rl), "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)
        model = client.models.list().data[0].id
        messages = [{"role": "user", "content": question}]
        whole = client.chat.completions.create(model=model, messages=messages, max_tokens=256, temperature=0)
        message = whole.choices[0].message
        assert message.model_extra["reasoning_content"] == message.model_extra["reasoning"]
        assert message.model_extra["reasoning"] and (message.content or "").strip() == chat.stdout.strip()
        off = client.chat.completions.create(model=model, messages=messages, max_tokens=256, temperature=0,
                                             extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        assert off.choices[0].message.content and off.choices[0].message.model_extra["reasoning"] is None
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
