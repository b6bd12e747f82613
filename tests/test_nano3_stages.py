"""nano3 stages 0 and 1. Stage 0: the MoE training step logs routing and resumes bit-identically, its dense
counterpart has the same active parameters, the evaluation compares both with a unigram baseline, wrong
inputs are one line. Stage 1: curation's problem split and masks, SFT of the MoE model, exact match with
reasoning on and off. Stage 2: GRPO's refusals, log, resume and evaluation. Slow: the stage-0, SFT and GRPO
steps under torchrun (the whole recipe end to end is tests/test_nano3_recipe.py).

Everything runs on a real PretrainDataset made once by nano2's stage-0 data curation over two plays with
the nano3 chat template, with short runs (`FEW`: 8 steps of 4 x 64 tokens).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from nemotron.data_prep.chat.nano3 import NANO3_CHAT_TEMPLATE
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.errors import NemotronError
from nemotron.recipes.nano3.artifacts import Nano3PretrainCheckpoint
from nemotron.recipes.nano3.stage0_pretrain import evaluation, training
from nemotron.recipes.nano3.stage1_sft import data_curation as sft_curation
from nemotron.recipes.nano3.stage1_sft import evaluation as sft_evaluation
from nemotron.recipes.nano3.stage1_sft import training as sft_training
from nemotron.recipes.nano3.stage2_rl import evaluation as rl_evaluation
from nemotron.recipes.nano3.stage2_rl import training as rl_training
from nemotron.training.metrics import read_metrics

FEW = {"steps": 8, "seq_len": 64, "micro_batch_size": 4, "checkpoint_every": 2, "eval_every": 4, "eval_batches": 1,
       "keep_last": 10}


@pytest.fixture(scope="module", autouse=True)
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def dataset(nano3_two_plays):
    return nano3_two_plays  # builders.curate_two_plays_nano3, made once per session (tests/runs.py)


@pytest.fixture(scope="module")
def moe(dataset, tmp_path_factory):
    return training.main(training.Config(dataset_path=dataset.path, output_dir=tmp_path_factory.mktemp("moe"), **FEW))


@pytest.fixture(scope="module")
def dense(dataset, tmp_path_factory):
    return training.main(training.Config(dataset_path=dataset.path, output_dir=tmp_path_factory.mktemp("dense"),
                                         dense=True, **FEW))


def test_data_curation_saves_the_nano3_chat_template_with_the_tokenizer(dataset):
    assert load_tokenizer(dataset.tokenizer_dir).chat_template == NANO3_CHAT_TEMPLATE


def test_nano3_curation_is_byte_for_byte_nano2s_curation_with_the_nano3_template(dataset, tmp_path):
    """nano3's own stage-0 data_curation (its stage lists over the curation library, nemotron.data_prep.curation)
    gives exactly the shards, tokenizer and split files nano2's step gives for the same settings."""
    from builders import folder_bytes, write_plays_blend
    from nemotron.recipes.nano2.stage0_pretrain import data_curation as nano2_curation
    from nemotron.recipes.nano3.stage0_pretrain import data_curation as nano3_curation

    assert nano3_curation.Config().chat_template == "nano3" and dataset.config["chat_template"] == "nano3"
    blend = write_plays_blend(tmp_path, {"hamlet", "macbeth"}, [0.8, 0.2, 0])
    nano2 = nano2_curation.main(nano2_curation.Config(
        blend_path=blend, vocab_size=512, num_shards=2, workers=1, chat_template="nano3", scale=dataset.scale,
        output_dir=tmp_path / "nano2"))
    for folder in ("shards", "splits", "tokenizer"):
        ours, theirs = folder_bytes(dataset.path / folder), folder_bytes(nano2.path / folder)
        assert ours and ours == theirs, folder
    assert dataset.metrics["tokens"] == nano2.metrics["tokens"]


def test_moe_training_logs_expert_load_and_the_balancing_loss(moe):
    records = read_metrics(moe.metrics_path)
    assert [r["step"] for r in records] == list(range(1, 9))
    for record in records:
        loads = torch.tensor(record["expert_load"])
        assert loads.shape == (2, 8) and torch.allclose(loads.sum(-1), torch.ones(2), atol=1e-3)
        assert record["aux_loss"] >= 0.99  # 1.0 is perfectly even; it can only be above
        assert record["max_load"] >= 1.0
    assert not moe.dense and moe.active_parameters < moe.parameters
    # the expert bias moved (auxiliary-loss-free balancing) and was saved with the weights
    weights = load_file(moe.model_dir / "model.safetensors")
    biases = [name for name in weights if name.endswith("e_score_correction_bias")]
    assert len(biases) == 2 and all(weights[name].abs().sum() > 0 for name in biases)


def test_dense_counterpart_has_the_active_parameters_and_no_routing(moe, dense):
    assert dense.dense and dense.parameters == dense.active_parameters
    routers = 2 * 8 * 128  # two MoE layers of 8 experts x hidden 128
    assert dense.parameters == moe.active_parameters - routers
    assert "expert_load" not in read_metrics(dense.metrics_path)[-1]


def test_resume_after_a_kill_ends_with_the_uninterrupted_weights(dataset, moe, tmp_path):
    # What a kill after step 4 leaves: checkpoints up to step 4, no model folder, no artifact.
    folder = tmp_path / "resumed"
    shutil.copytree(moe.path, folder)
    (folder / "metadata.json").unlink()
    shutil.rmtree(folder / "model")
    for checkpoint in (folder / "checkpoints").iterdir():
        if int(checkpoint.name.split("_")[-1]) > 4:
            shutil.rmtree(checkpoint)
    resumed = training.main(training.Config(dataset_path=dataset.path, output_dir=folder, **FEW))
    assert resumed.metrics["resumed_from_step"] == 4
    first, second = load_file(moe.model_dir / "model.safetensors"), load_file(resumed.model_dir / "model.safetensors")
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    assert read_metrics(resumed.metrics_path) == read_metrics(moe.metrics_path)


def test_evaluation_puts_moe_dense_and_unigram_side_by_side(dataset, moe, dense, tmp_path):
    results = evaluation.main(evaluation.Config(checkpoint_path=moe.path, dense_checkpoint_path=dense.path,
                                                max_tokens=2000, output_dir=tmp_path / "eval"))
    for value in (results.moe_bits_per_byte, results.dense_bits_per_byte, results.unigram_bits_per_byte):
        assert 0 < value < 10
    assert results.metrics["moe_train_seconds"] > 0 and results.metrics["dense_train_seconds"] > 0
    assert results.metrics["moe_active_parameters"] == moe.active_parameters
    lesson = results.metrics["lesson"]  # the MoE model's held-out loss per window against the unigram's
    assert lesson["before"] == pytest.approx(results.metrics["unigram_loss"], rel=0.05)
    assert lesson["gain"] == pytest.approx(lesson["before"] - lesson["after"]) and lesson["standard_error"] > 0
    with pytest.raises(NemotronError, match="pass the MoE checkpoint as --checkpoint-path"):
        evaluation.main(evaluation.Config(checkpoint_path=dense.path, dense_checkpoint_path=moe.path,
                                          output_dir=tmp_path / "swapped"))


def test_the_dense_run_of_the_moe_runs_time_trains_the_measured_ratio_more_steps_and_is_compared_paired(
        dataset, moe, dense, tmp_path, monkeypatch):
    """--dense --equal-time: MOE_STEP_TIME_RATIO x the scale's steps (a constant: no live timing decides them);
    the evaluation then holds, per budget, the dense model's held-out loss per window against the MoE model's on
    the same windows, with the paired standard error."""
    few = {key: value for key, value in FEW.items() if key != "steps"}
    monkeypatch.setitem(training.STEPS, "tiny", 6)
    dense_time = training.main(training.Config(dataset_path=dataset.path, output_dir=tmp_path / "dense_time",
                                               dense=True, equal_time=True, **few))
    assert dense_time.dense and dense_time.steps == round(6 * training.MOE_STEP_TIME_RATIO) > 6
    results = evaluation.main(evaluation.Config(checkpoint_path=moe.path, dense_checkpoint_path=dense.path,
                                                dense_time_checkpoint_path=dense_time.path, max_tokens=2000,
                                                output_dir=tmp_path / "eval"))
    against = results.metrics["moe_against_dense"]
    assert set(against) == {"equal_tokens", "equal_time"}
    moe_windows = np.array(results.metrics["lesson_items"]["after"])  # the MoE model's loss per held-out window
    for budget, checkpoint in (("equal_tokens", dense), ("equal_time", dense_time)):
        record = against[budget]
        assert record["dense_steps"] == checkpoint.steps and record["moe_steps"] == moe.steps
        assert record["after"] == pytest.approx(moe_windows.mean()) and record["n"] == len(moe_windows)
        assert record["gain"] == pytest.approx(record["before"] - record["after"]) and record["standard_error"] > 0
    name = "dense_time_validation_loss"  # the mean over tokens; the record's is the mean over windows
    assert against["equal_time"]["before"] == pytest.approx(results.metrics[name], rel=0.05)
    with pytest.raises(NemotronError, match="add --dense"):
        training.main(training.Config(dataset_path=dataset.path, output_dir=tmp_path / "moe_time", equal_time=True,
                                      **FEW))


def test_a_checkpoint_of_the_wrong_family_is_one_clear_error(tmp_path):
    from builders import make_pretrain_checkpoint

    nano2 = make_pretrain_checkpoint(tmp_path / "nano2")
    with pytest.raises(NemotronError, match="pretraincheckpoint") as error:
        Nano3PretrainCheckpoint.load(path=nano2.path, scale="tiny")
    assert "\n" not in str(error.value)


def test_at_scale_the_moe_model_hands_off_to_its_recipe_and_the_dense_one_is_refused(dataset, tmp_path):
    # --engine megatron-bridge at tiny (tests/test_nano3_megatron_bridge.py covers --scale full)
    cluster = {"engine": "megatron-bridge", "dry_run": True, "data_root": "/data", "nodes": 1, "gpus_per_node": 2}
    with pytest.raises(NemotronError, match="drop --dense") as error:
        training.main(training.Config(dataset_path=dataset.path, output_dir=tmp_path / "dense", dense=True, **cluster))
    assert "\n" not in str(error.value) and not (tmp_path / "dense").exists()
    run = training.main(training.Config(dataset_path=dataset.path, output_dir=tmp_path / "moe", **cluster))
    assert run.type_name() == "megatronbridgerun"
    assert run.recipe.endswith("nemotron_3_nano_pretrain_8gpu_h100_bf16_config")
    assert not (tmp_path / "moe" / "model").exists()  # nothing trained here


# ---------------------------------------------------------------------------------------------------
# Stage 1
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sft_data(moe, tmp_path_factory):
    return sft_curation.main(sft_curation.Config(checkpoint_path=moe.path, num_problems=100, chat_data=False,
                                                 output_dir=tmp_path_factory.mktemp("sft_data")))


def test_sft_curation_holds_problems_out_by_question_and_strips_reasoning_from_a_tenth(sft_data, moe, tmp_path):
    from nemotron.data_prep.packing import read_packed

    train = [json.loads(line) for line in sft_data.train_problems.read_text().splitlines()]
    test = [json.loads(line) for line in sft_data.test_problems.read_text().splitlines()]
    assert len(train) == 80 and len(test) == 20 and not {p["question"] for p in train} & {p["question"] for p in test}
    assert sft_data.metrics["reasoning_off_problems"] == 8
    tokenizer = load_tokenizer(sft_data.tokenizer_dir)
    rows = read_packed(sft_data.train_packed) + read_packed(sft_data.valid_packed)
    trained = "".join(tokenizer.decode(row.input_ids[1:][row.loss_mask[:-1] == 1]) for row in rows)
    assert trained.count("<|im_end|>") == 80 and trained.count("</think>") == 72  # 8 answers without reasoning
    # reasoning tokens out of the loss: the same rows, fewer targets, and no worked steps among them
    without = sft_curation.main(sft_curation.Config(checkpoint_path=moe.path, num_problems=100, chat_data=False,
                                                    train_reasoning=False, output_dir=tmp_path / "no_reasoning"))
    rows = read_packed(without.train_packed) + read_packed(without.valid_packed)
    trained = "".join(tokenizer.decode(row.input_ids[1:][row.loss_mask[:-1] == 1]) for row in rows)
    assert trained.count("<|im_end|>") == 80 and "</think>" not in trained and "carry" not in trained


@pytest.mark.slow
def test_sft_curation_stages_write_the_bytes_of_one_process_with_two_workers(moe, tmp_path):
    """The step's stage list over its work items (the problems' chat file, chatterbot): a pool of two
    writes the files of one process, the run hash and digest are the same, and a re-run re-uses them."""
    made = [sft_curation.main(sft_curation.Config(checkpoint_path=moe.path, num_problems=100, chat_data=True,
                                                  workers=workers, output_dir=tmp_path / f"workers_{workers}"))
            for workers in (1, 2)]
    for name in ("train.parquet", "valid.parquet", "problem_chats.jsonl"):
        assert (made[0].path / name).read_bytes() == (made[1].path / name).read_bytes(), name
    assert made[0].metrics["run_hash"] == made[1].metrics["run_hash"] and made[0].digest == made[1].digest
    assert made[0].metrics["chat_conversations"] > 1000 and made[0].num_train_conversations > 1000
    again = sft_curation.main(sft_curation.Config(checkpoint_path=moe.path, num_problems=100, chat_data=True,
                                                  output_dir=tmp_path / "workers_2"))
    assert again.digest == made[1].digest


@pytest.fixture(scope="module")
def sft(sft_data, tmp_path_factory):
    return sft_training.main(sft_training.Config(dataset_path=sft_data.path, steps=2, micro_batch_size=2,
                                                 eval_every=2, checkpoint_every=2,
                                                 output_dir=tmp_path_factory.mktemp("sft")))


def test_sft_at_tiny_runs_without_patience_unless_asked(sft_data, sft, tmp_path):
    """nano3 SFT's --patience is per scale (PATIENCE: off at tiny, where it ended runs before the plateau); the
    config keeps None, as for a per-scale --steps, and the artifact records the patience the run used."""
    assert sft.config["patience"] is None and sft.metrics["patience"] == sft_training.PATIENCE["tiny"] == 0
    asked = sft_training.main(sft_training.Config(dataset_path=sft_data.path, steps=1, micro_batch_size=2,
                                                  patience=3, output_dir=tmp_path / "asked"))
    assert asked.config["patience"] == asked.metrics["patience"] == 3


def test_sft_trains_the_moe_model_and_evaluates_with_reasoning_on_and_off(sft_data, sft, dense, tmp_path):
    assert "expert_load" in read_metrics(sft.metrics_path)[-1] and sft.validation_loss > 0
    kept = [json.loads(line) for line in sft.watch_path.read_text().splitlines()]  # at each validation
    assert [(r["step"], r["kind"]) for r in kept] == [(2, "tokens")]
    for text in kept[0]["texts"]:  # per-token loss of a held-out chat, its answer's tokens marked as trained
        assert len(text["loss"]) == len(text["trained"]) == len(text["tokens"]) - 1 and 0 < sum(text["trained"])
    results = sft_evaluation.main(sft_evaluation.Config(checkpoint_path=sft.path, max_problems=3, max_new_tokens=12,
                                                        output_dir=tmp_path / "eval"))
    assert results.num_problems == 3
    for key in ("base_exact_match_reasoning_on", "sft_exact_match_reasoning_off"):
        assert 0.0 <= getattr(results, key) <= 1.0 and f"{key}_stderr" in results.metrics
    for key in ("base_p_right_working", "sft_p_right_working", "sft_p_dropped_carry"):
        assert 0.0 <= results.metrics[key] <= 1.0 and f"{key}_stderr" in results.metrics
    samples = json.loads(results.samples_path.read_text())
    assert {(s["model"], s["reasoning"]) for s in samples} == {(m, r) for m in ("base", "sft") for r in ("on", "off")}
    with pytest.raises(NemotronError, match="dense counterpart"):
        sft_training.main(sft_training.Config(dataset_path=sft_data.path, checkpoint_path=dense.path, steps=1,
                                              output_dir=tmp_path / "wrong"))


def test_sft_evaluation_gives_the_exact_chance_of_the_teachers_working_as_the_template_renders_it(sft_data, sft):
    """The chance of the right working is that of the assistant turn the tokenizer's own chat template renders
    after the reasoning-on prompt, token for token (recomputed here from the model's logits); a dropped carry
    has no chance where a sum has no carry; one question's chances sum to at most 1."""
    from nemotron.data_prep.verifiable import Addition, read_problems
    from nemotron.models.loading import load_model

    model, tokenizer = load_model(sft.model_dir)
    problems = read_problems(sft_data.test_problems, 12)
    assert {Addition(p["a"], p["b"]).carries > 0 for p in problems} == {True, False}  # both kinds are scored
    chances = sft_evaluation.working_chances(model, tokenizer, problems, batch_size=5)
    for i, p in enumerate(problems):
        kind, prompt, completion = sft_evaluation.workings(tokenizer, p)[0]
        reasoning, answer = Addition(p["a"], p["b"]).worked()
        question = [{"role": "user", "content": p["question"]}]
        rendered = tokenizer.apply_chat_template(
            [*question, {"role": "assistant", "content": answer, "reasoning_content": reasoning}], tokenize=False)
        opening = tokenizer.apply_chat_template(question, tokenize=False, add_generation_prompt=True)
        assert kind == "right_working" and rendered.startswith(opening), p
        assert tokenizer.decode(completion) == rendered[len(opening):].split("<|im_end|>")[0] + "<|im_end|>", p
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0].double().log_softmax(-1)
        steps = range(len(prompt) - 1, len(prompt) + len(completion) - 1)
        expected = sum(logits[t, token].item() for t, token in zip(steps, completion))
        assert chances["right_working"][i] == pytest.approx(float(torch.tensor(expected).exp()), rel=1e-4), p
        assert (chances["dropped_carry"][i] > 0) == (Addition(p["a"], p["b"]).carries > 0), p
        assert chances["right_working"][i] + chances["dropped_carry"][i] <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("step", ["stage0_pretrain", "stage1_sft"])
def test_moe_training_under_torchrun_saves_one_artifact_with_the_routing_logged(step, dataset, sft_data, tmp_path):
    """Pretraining and SFT of the MoE model with 2 processes (DDP; the expert loads are averaged over ranks
    before the bias update): one artifact on stdout from rank 0, every step logged with the expert load."""
    data, settings = (dataset, {**FEW, "steps": 4}) if step == "stage0_pretrain" else (
        sft_data, {"steps": 2, "micro_batch_size": 2, "eval_every": 2, "checkpoint_every": 2})
    out = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m",
               f"nemotron.recipes.nano3.{step}.training", "--dataset-path", str(data.path), "--output-dir", str(out),
               *(f"--{k.replace('_', '-')}={v}" for k, v in settings.items())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    assert done.returncode == 0, done.stderr[-2000:]
    (made,) = json.loads(done.stdout).values()
    assert made["metrics"]["world_size"] == 2
    records = [r for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in records] == list(range(1, settings["steps"] + 1))
    assert all(len(r["expert_load"]) == 2 and abs(sum(r["expert_load"][0]) - 1) < 1e-3 for r in records)


# ---------------------------------------------------------------------------------------------------
# Stage 2
# ---------------------------------------------------------------------------------------------------

RL = {"steps": 2, "completions_per_step": 4, "group_size": 2, "max_new_tokens": 6, "checkpoint_every": 1,
      "keep_last": 5}


def raising_reward(completion: str, answer: str) -> float:
    """A reward function with a bug, for the refusal test (importable as test_nano3_stages:raising_reward)."""
    raise KeyError("score")


@pytest.mark.parametrize("changes, fragment", [
    ({"completions_per_step": 6, "group_size": 4}, "a batch of 6 completions is not whole groups of --group-size 4"),
    ({"reward_function": "test_nano3_stages:raising_reward"}, "reward function raising_reward raised KeyError"),
    ({"reward_function": "no_such_module:reward"}, "--reward-function 'no_such_module:reward' cannot be imported"),
])
def test_rl_bad_input_is_one_line_before_any_work(sft, tmp_path, changes, fragment):
    config = rl_training.Config(checkpoint_path=sft.path, output_dir=tmp_path / "rl", **{**RL, **changes})
    with pytest.raises(NemotronError, match=fragment) as error:
        rl_training.main(config)
    assert "\n" not in str(error.value) and not (tmp_path / "rl").exists()


def test_rl_refuses_a_checkpoint_of_another_stage(moe, tmp_path):
    with pytest.raises(NemotronError, match="nano3sftcheckpoint"):
        rl_training.main(rl_training.Config(checkpoint_path=moe.path, output_dir=tmp_path / "rl", **RL))


def test_grpo_logs_generation_and_update_and_resumes_after_a_kill(sft, tmp_path):
    policy = rl_training.main(rl_training.Config(checkpoint_path=sft.path, output_dir=tmp_path / "rl", kl_beta=0.05,
                                                 **RL))
    records = read_metrics(policy.metrics_path)
    assert [r["step"] for r in records] == [1, 2]
    for key in ("reward", "correct", "kl", "clipped", "expert_load"):
        assert key in records[-1]
    # how long sampling and updating took: the run's metrics, not metrics.jsonl (its bytes are in the digest)
    assert not any(key.endswith("_seconds") for key in records[-1])
    assert policy.metrics["generation_seconds"] > 0 and policy.metrics["update_seconds"] > 0
    # a kill after step 1: its checkpoint, no model, no artifact; the resumed run samples and ends alike
    folder = tmp_path / "resumed"
    shutil.copytree(policy.path, folder)
    (folder / "metadata.json").unlink()
    shutil.rmtree(folder / "model")
    shutil.rmtree(folder / "checkpoints" / "step_000002")
    resumed = rl_training.main(rl_training.Config(checkpoint_path=sft.path, output_dir=folder, kl_beta=0.05, **RL))
    first = load_file(policy.model_dir / "model.safetensors")
    second = load_file(resumed.model_dir / "model.safetensors")
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert read_metrics(resumed.metrics_path) == records
    assert resumed.digest == policy.digest  # same config and seed, same digest, killed and resumed or not
    # what each step sampled and scored, kept in the artifact (watch.jsonl), the same bytes after the resume
    kept = [json.loads(line) for line in policy.watch_path.read_text().splitlines()]
    assert [(r["step"], r["kind"]) for r in kept] == [(1, "grpo"), (2, "grpo")]
    assert resumed.watch_path.read_bytes() == policy.watch_path.read_bytes()
    groups = kept[0]["groups"]
    assert len(groups) == RL["completions_per_step"] // RL["group_size"]
    for group in groups:
        assert len(group["samples"]) == RL["group_size"] and group["prompt"] and group["answer"]
        assert sum(s["advantage"] for s in group["samples"]) == pytest.approx(0.0, abs=1e-3)
        for sample in group["samples"]:
            assert len(sample["tokens"]) == len(sample["logprob"]) == len(sample["clipped"])
            assert len(sample["reference_logprob"]) == len(sample["tokens"])  # --kl-beta > 0
            assert all(lp <= 0 for lp in sample["logprob"]) and sample["correct"] == (sample["reward"] >= 1)
    results = rl_evaluation.main(rl_evaluation.Config(checkpoint_path=policy.path, max_problems=2, max_new_tokens=6,
                                                      output_dir=tmp_path / "eval"))
    assert results.num_problems == 2 and results.metrics["samples_per_problem"] == 4
    assert {"reward_gain_stderr", "greedy_reward_gain_stderr", "rl_exact_match"} <= results.metrics.keys()
    for model in ("sft", "rl"):  # every sampled answer that is wrong is one kind of mistake (Addition.mistake)
        shares = [results.metrics[f"{model}_{kind}_share"] for kind in ("dropped_carry", "added_carry", "other")]
        assert all(0 <= share <= 1 for share in shares) and sum(shares) <= 1 + 1e-9, results.metrics
    again = rl_evaluation.main(rl_evaluation.Config(checkpoint_path=policy.path, max_problems=2, max_new_tokens=6,
                                                    output_dir=tmp_path / "eval_again"))
    assert again.metrics["rl_reward"] == results.metrics["rl_reward"]  # seeded samples: the same numbers
    with pytest.raises(NemotronError, match="--samples-per-problem 0") as error:
        rl_evaluation.main(rl_evaluation.Config(checkpoint_path=policy.path, samples_per_problem=0,
                                                output_dir=tmp_path / "bad"))
    assert "\n" not in str(error.value) and not (tmp_path / "bad").exists()


def test_rl_prompts_artifact_holds_the_sft_training_problems_and_grpo_trains_on_them_alike(sft_data, sft, tmp_path):
    """Stage-2 data_curation writes the SFT dataset's training problems (through its stage list) and the
    checker's specification; GRPO reading that artifact trains exactly as it did from the SFT dataset."""
    from nemotron.data_prep.verifiable import read_problems
    from nemotron.recipes.nano3.stage2_rl import data_curation as rl_curation

    prompts = rl_curation.main(rl_curation.Config(checkpoint_path=sft.path, output_dir=tmp_path / "prompts"))
    made = [p for path in prompts.prompt_files for p in read_problems(path)]
    assert made == read_problems(sft_data.train_problems) and prompts.num_prompts == len(made)
    checker = json.loads(prompts.checker.read_text())
    assert checker["reward_function"] == rl_training.Config().reward_function and checker["format_bonus"] > 0
    via_artifact = rl_training.main(rl_training.Config(checkpoint_path=sft.path, dataset_path=prompts.path,
                                                       output_dir=tmp_path / "rl_artifact", **RL))
    direct = rl_training.main(rl_training.Config(checkpoint_path=sft.path, output_dir=tmp_path / "rl_direct", **RL))
    assert prompts.digest in {ref.digest for ref in via_artifact.inputs}
    strip = lambda rows: [{k: v for k, v in r.items() if not k.endswith("_seconds")} for r in rows]  # noqa: E731
    assert strip(read_metrics(via_artifact.metrics_path)) == strip(read_metrics(direct.metrics_path))
    first = load_file(via_artifact.model_dir / "model.safetensors")
    second = load_file(direct.model_dir / "model.safetensors")
    assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.slow
def test_grpo_under_torchrun_samples_a_share_per_rank_and_saves_one_artifact(sft, tmp_path):
    out = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m",
               "nemotron.recipes.nano3.stage2_rl.training", "--checkpoint-path", str(sft.path),
               "--output-dir", str(out),
               *(f"--{k.replace('_', '-')}={v}" for k, v in RL.items())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    assert done.returncode == 0, done.stderr[-2000:]
    made = json.loads(done.stdout)  # one artifact JSON on stdout, from rank 0
    assert made["nano3rlcheckpoint"]["metrics"]["world_size"] == 2
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
