"""Tests for stage-2 DPO training, on real tiny inputs built here.

The inputs are real: a BPE tokenizer trained on chatterbot with the nano2 chat template, preference
pairs of seeded "largest" problems (the true answer against the teacher's near miss:
`nemotron.data_prep.preference.reference_pairs`) written as JSONL, and a small
NemotronH saved with `save_pretrained` next to the tokenizer, wrapped in the real `PreferenceDataset`
and `SFTCheckpoint` artifact classes. The training step runs in-process (also through its command line,
for the one-line refusals), as a subprocess that is SIGKILLed and then resumed, and under torchrun with
two processes.
"""

import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from builders import SMALL_MODEL  # tests/ is on sys.path under pytest
from nemotron.cli import run
from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE
from nemotron.data_prep.conversations import chatterbot_pool, dedup_conversations, filter_conversations
from nemotron.data_prep.preference import (
    read_pairs,
    read_tokenized_pairs,
    reference_pairs,
    split_pairs,
    tokenize_pairs,
    write_pairs,
    write_tokenized_pairs,
)
from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer
from nemotron.data_prep.verifiable import largest_problems
from nemotron.errors import NemotronError
from nemotron.evaluation.preference import preference_accuracy
from nemotron.models.nano2 import build_config, build_model
from nemotron.recipes.nano2.artifacts import DPOCheckpoint, PreferenceDataset, SFTCheckpoint
from nemotron.recipes.nano2.stage2_alignment.training import REFERENCE_LOGPS, Config, main
from nemotron.training.dpo import STEP_METRICS, reward_metrics
from nemotron.training.logprobs import pair_logprobs
from nemotron.training.watch import PROBE_PAIRS

VOCAB = 512
TRAIN_PAIRS, TEST_PAIRS = 160, 60
STEP = "nemotron.recipes.nano2.stage2_alignment.training"


@pytest.fixture(scope="module", autouse=True)
def restore_threads():
    threads = torch.get_num_threads()  # main() sets 1 thread at tiny
    yield
    torch.set_num_threads(threads)


# --------------------------------------------------------------------------------------------------
# Real inputs
# --------------------------------------------------------------------------------------------------


def save_sft_checkpoint(out: Path, tokenizer, scale: str = "tiny", seed: int = 0) -> SFTCheckpoint:
    """What stage-1 training leaves: an HF folder (weights + tokenizer), a metrics JSONL, the artifact."""
    model = build_model(build_config("tiny", len(tokenizer), **SMALL_MODEL), seed=seed)
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    return SFTCheckpoint(
        path=out, config={"scale": scale}, scale=scale, model_dir=out / "model", metrics_path=out / "metrics.jsonl",
        training_loss=1.0, validation_loss=None, steps=1,
    ).save()


MAX_LENGTH, VALIDATION_SHARE = 96, 0.1


def save_preference_dataset(out: Path, tokenizer_dir: Path, train: list, test: list) -> PreferenceDataset:
    """What stage-2 data curation leaves: text pairs, and the train pairs tokenized, filtered and split."""
    out.mkdir(parents=True, exist_ok=True)
    tokens = tokenize_pairs(load_tokenizer(tokenizer_dir), train)
    train_ids, valid_ids = split_pairs(tokens, MAX_LENGTH, VALIDATION_SHARE, seed=0)
    write_pairs([train[i] for i in train_ids], out / "train_pairs.jsonl")
    write_pairs([train[i] for i in valid_ids], out / "valid_pairs.jsonl")
    write_pairs(test, out / "test_pairs.jsonl")
    write_tokenized_pairs(train, tokens, train_ids, out / "train_tokens.jsonl")
    write_tokenized_pairs(train, tokens, valid_ids, out / "valid_tokens.jsonl")
    return PreferenceDataset(
        path=out, config={"scale": "tiny"}, tokenizer_dir=tokenizer_dir, train_pairs=out / "train_pairs.jsonl",
        valid_pairs=out / "valid_pairs.jsonl", test_pairs=out / "test_pairs.jsonl",
        train_tokens=out / "train_tokens.jsonl", valid_tokens=out / "valid_tokens.jsonl", max_length=MAX_LENGTH,
        num_train_pairs=len(train_ids), num_valid_pairs=len(valid_ids), num_test_pairs=len(test),
    ).save()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """(PreferenceDataset, SFTCheckpoint): a tokenizer trained on chatterbot, pairs of "largest" problems (the
    first TEST_PAIRS held out), a random small NemotronH."""
    root = tmp_path_factory.mktemp("stage2_inputs")
    pool, _ = chatterbot_pool()
    conversations, _ = dedup_conversations(filter_conversations(pool)[0])
    texts = [message["content"] for conversation in conversations for message in conversation["messages"]]
    tokenizer_dir = train_tokenizer(texts, VOCAB, root / "tokenizer", chat_template=NANO2_CHAT_TEMPLATE)
    tokenizer = load_tokenizer(tokenizer_dir)
    pairs = reference_pairs([p.record() for p in largest_problems(TRAIN_PAIRS + TEST_PAIRS, seed=0)])
    dataset = save_preference_dataset(root / "pairs", tokenizer_dir, pairs[TEST_PAIRS:], pairs[:TEST_PAIRS])
    return dataset, save_sft_checkpoint(root / "sft", tokenizer)


def config(inputs, out: Path, **changes) -> Config:
    dataset, sft = inputs
    quick = dict(steps=6, micro_batch_size=4, eval_every=3, checkpoint_every=3)
    return replace(Config(dataset_path=dataset.path, checkpoint_path=sft.path, output_dir=out, **quick), **changes)


def cli(config: Config) -> list[str]:
    """The command line of `config`, for running the step as a user would."""
    flags = {"dataset-path": config.dataset_path, "checkpoint-path": config.checkpoint_path,
             "output-dir": config.output_dir, "steps": config.steps, "micro-batch-size": config.micro_batch_size,
             "eval-every": config.eval_every, "checkpoint-every": config.checkpoint_every}
    return [sys.executable, "-m", STEP, *(f"--{k}={v}" for k, v in flags.items())]


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(model_dir / "model.safetensors")


# --------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(inputs, tmp_path_factory):
    return main(config(inputs, tmp_path_factory.mktemp("dpo") / "run"))


def test_dpo_writes_a_self_contained_model_metrics_and_lineage(inputs, trained):
    dataset, sft = inputs
    assert isinstance(trained, DPOCheckpoint) and trained.steps == 6
    assert [(ref.type, ref.digest) for ref in trained.inputs] == [
        ("preferencedataset", dataset.digest), ("sftcheckpoint", sft.digest)
    ]
    assert trained.config["beta"] == 0.1  # stage-2 evaluation reads beta from here
    # The final folder alone is a usable model: plain transformers loads weights and tokenizer.
    model = AutoModelForCausalLM.from_pretrained(trained.model_dir)
    assert AutoTokenizer.from_pretrained(trained.model_dir).chat_template == NANO2_CHAT_TEMPLATE
    assert not torch.equal(model.lm_head.weight, AutoModelForCausalLM.from_pretrained(sft.model_dir).lm_head.weight)

    records = [json.loads(line) for line in trained.metrics_path.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    for record in records:
        assert set(STEP_METRICS) | {"smoothed_loss", "lr", "grad_norm"} <= set(record)
        assert "seconds" not in json.dumps(record) and "tokens_per_second" not in record  # no wall-clock in files
    assert [r["step"] for r in records if "val_loss" in r] == [3, 6]
    assert trained.validation_loss == records[-1]["val_loss"]
    dataset, _ = inputs
    assert trained.metrics["validation_pairs"] == dataset.num_valid_pairs > 0
    assert trained.metrics["train_pairs"] == dataset.num_train_pairs
    # Step 1: the policy IS the reference, so h = 0, DPO's term is log 2 and no reward is earned yet; the default
    # adds the chosen answers' NLL per token (--sft-weight 1), logged alone as nll_loss.
    assert trained.config["sft_weight"] == 1.0 and records[0]["nll_loss"] > 0
    assert records[0]["loss"] == pytest.approx(math.log(2) + records[0]["nll_loss"], abs=1e-5)
    assert records[0]["reward_margin"] == pytest.approx(0.0, abs=1e-4)
    assert records[0]["lr"] == Config().lr and records[-1]["lr"] < records[0]["lr"]  # cosine (no warmup in 6 steps)


def test_dpo_keeps_its_probe_pairs_log_ratios_in_the_artifact(inputs, trained):
    """watch.jsonl (a hashed file of the artifact): the probe pairs once, then each kept step's log-ratios."""
    records = [json.loads(line) for line in trained.watch_path.read_text().splitlines()]
    probes, kept = records[0], records[1:]
    assert probes["kind"] == "dpo_probes" and probes["step"] == 0
    assert [p["split"] for p in probes["pairs"]] == ["train"] * PROBE_PAIRS + ["valid"] * PROBE_PAIRS
    every = Config().watch_every
    assert [r["step"] for r in kept] == sorted({*range(every, 7, every), 6}) and {r["kind"] for r in kept} == {"dpo"}
    for record in kept:
        assert len(record["pairs"]) == len(probes["pairs"])
        for pair in record["pairs"]:
            assert pair["chosen_reward"] == pytest.approx(Config().beta * pair["chosen"], abs=1e-3)
    # trained on chosen over rejected: the training probes' margin moved the right way
    margins = [p["chosen"] - p["rejected"] for p in kept[-1]["pairs"][:PROBE_PAIRS]]
    assert sum(margins) > 0
    assert "watch.jsonl" in trained.file_hashes


def test_reference_logprobs_are_the_sft_models_and_stored_with_the_run(inputs, trained):
    dataset, sft = inputs
    stored = torch.load(trained.path / REFERENCE_LOGPS, weights_only=True)
    reference = AutoModelForCausalLM.from_pretrained(sft.model_dir)
    # Scored once, before training, by the frozen SFT model: every validation pair, and the training
    # pairs the 6 steps of 4 visit (24); the others are NaN, never read (dpo_loss would refuse them).
    for split, tokens_path in (("train", dataset.train_tokens), ("valid", dataset.valid_tokens)):
        expected_chosen, expected_rejected = pair_logprobs(reference, *read_tokenized_pairs(tokens_path))
        chosen, rejected = stored["logps"][split]
        scored = ~chosen.isnan()
        assert torch.equal(scored, ~rejected.isnan())
        assert int(scored.sum()) == (6 * 4 if split == "train" else len(expected_chosen))
        assert torch.allclose(chosen[scored], expected_chosen[scored], atol=1e-4)
        assert torch.allclose(rejected[scored], expected_rejected[scored], atol=1e-4)


def test_same_config_and_seed_give_the_same_model_and_digest(inputs, trained, tmp_path):
    again = main(config(inputs, tmp_path / "again"))
    first, second = weights(trained.model_dir), weights(again.model_dir)
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert again.digest == trained.digest


def test_dpo_learns_to_prefer_chosen_answers_on_held_out_pairs(inputs, tmp_path):
    dataset, sft = inputs
    # DPO's own term (--sft-weight 0): the recipe's default adds the NLL of the chosen answers, which raises both
    # answers' implicit rewards (the shared tokens of a pair) and so measures something else.
    result = main(config(inputs, tmp_path / "learn", steps=40, lr=1e-3, eval_every=40, checkpoint_every=40,
                         sft_weight=0.0))
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    test = tokenize_pairs(tokenizer, read_pairs(dataset.test_pairs))  # pairs never trained on
    before = pair_logprobs(AutoModelForCausalLM.from_pretrained(sft.model_dir), *test)
    after = pair_logprobs(AutoModelForCausalLM.from_pretrained(result.model_dir), *test)
    # DPO's implicit reward (against the SFT model) prefers the chosen answer of unseen pairs...
    rewards = reward_metrics(*after, *before, beta=0.1)
    # (over seeds 0-3: reward accuracy 0.57-0.67, margin 0.09-0.16)...
    assert rewards["reward_accuracy"] > 0.5 and rewards["reward_margin"] > 0.05, rewards
    # ...and the policy itself prefers chosen answers (per token) more often than the SFT model did
    # (0.50 -> 0.55-0.62 over seeds 0-3; 60 pairs, so 0.03 is two pairs).
    lengths = ([len(ids) for ids in test[1]], [len(ids) for ids in test[2]])
    assert preference_accuracy(*after, *lengths) > preference_accuracy(*before, *lengths) + 0.03


@pytest.mark.parametrize(
    "variant, changes, first_loss",
    [("conservative", dict(label_smoothing=0.2), math.log(2)), ("ipo", dict(beta=0.5), 1.0)],
)
def test_loss_variants_start_from_their_value_at_the_reference(inputs, tmp_path, variant, changes, first_loss):
    # At step 1 the policy equals the reference (h = 0): cDPO gives log 2, IPO (0 - 1/(2 beta))^2 (the preference
    # term alone: without the default's NLL of the chosen answers).
    result = main(config(inputs, tmp_path / variant, steps=2, loss_variant=variant, sft_weight=0.0, **changes))
    records = [json.loads(line) for line in result.metrics_path.read_text().splitlines()]
    assert records[0]["loss"] == pytest.approx(first_loss, abs=1e-4)
    assert result.config["loss_variant"] == variant


def test_both_inputs_can_come_from_stdin(inputs, tmp_path, monkeypatch):
    dataset, sft = inputs
    piped = {a.type: json.loads(a.model_dump_json()) for a in (dataset, sft)}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(piped)))
    result = main(config(inputs, tmp_path / "piped", dataset_path=None, checkpoint_path=None, steps=1))
    assert [ref.path for ref in result.inputs] == [str(dataset.path), str(sft.path)]


# --------------------------------------------------------------------------------------------------
# Resume after a real kill
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights_and_loss(inputs, trained, tmp_path):
    run_config = config(inputs, tmp_path / "killed", checkpoint_every=2)
    first_checkpoint = run_config.output_dir / "checkpoints" / "step_000002"
    process = subprocess.Popen(cli(run_config), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not first_checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert first_checkpoint.exists() and process.returncode == -signal.SIGKILL
    assert not (run_config.output_dir / "metadata.json").exists()
    reference_file = (run_config.output_dir / REFERENCE_LOGPS).stat()

    resumed = main(run_config)  # the same command again, here in-process
    assert 2 <= resumed.metrics["resumed_from_step"] < 6
    # The reference log-probs were read back, not recomputed.
    assert (run_config.output_dir / REFERENCE_LOGPS).stat().st_mtime_ns == reference_file.st_mtime_ns

    # The same weights, loss and log as the uninterrupted run (both 1 thread at tiny: bitwise on CPU).
    uninterrupted, resumed_weights = weights(trained.model_dir), weights(resumed.model_dir)
    assert all(torch.equal(uninterrupted[name], resumed_weights[name]) for name in uninterrupted)
    assert resumed.training_loss == trained.training_loss
    assert resumed.metrics_path.read_text() == trained.metrics_path.read_text()
    assert resumed.watch_path.read_text() == trained.watch_path.read_text()  # the probes once, each kept step once


# --------------------------------------------------------------------------------------------------
# Two processes
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_ddp_processes_train_like_one_process_with_the_whole_batch(inputs, tmp_path):
    one = main(config(inputs, tmp_path / "one", steps=2, micro_batch_size=4, eval_every=2, checkpoint_every=2))
    two = config(inputs, tmp_path / "two", steps=2, micro_batch_size=2, eval_every=2, checkpoint_every=2)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = subprocess.run([*torchrun, *cli(two)[1:]], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    artifact = json.loads(result.stdout)["dpocheckpoint"]  # exactly one artifact JSON, from rank 0
    assert artifact["metrics"]["world_size"] == 2
    # Same global batches (2 ranks x 2 pairs = 4 pairs), gradients averaged: equal up to float rounding.
    single, double = weights(one.model_dir), weights(Path(artifact["model_dir"]))
    assert all(torch.allclose(single[name], double[name], atol=1e-5) for name in single)
    assert artifact["training_loss"] == pytest.approx(one.training_loss, abs=1e-5)


# --------------------------------------------------------------------------------------------------
# Refusals: one clear line, before any training, nothing written
# --------------------------------------------------------------------------------------------------


def test_a_refusal_is_one_error_line_from_the_cli(inputs, tmp_path, capsys):
    run_config = config(inputs, tmp_path / "out", beta=-1.0)
    with pytest.raises(SystemExit) as exit_status:
        run(main, [*cli(run_config)[3:], "--beta=-1"])  # the step's command line, in-process
    stdout, stderr = capsys.readouterr()
    assert exit_status.value.code == 2 and stdout == ""
    assert stderr.strip().splitlines()[-1] == ("error: --beta -1.0 must be > 0 "
                                               "(it scales the implicit reward; 0.1 is the usual start)")
    assert not run_config.output_dir.exists()


def test_a_checkpoint_of_another_scale_is_refused(inputs, tmp_path):
    dataset, _ = inputs
    small = save_sft_checkpoint(tmp_path / "small_sft", load_tokenizer(dataset.tokenizer_dir), scale="small")
    out = tmp_path / "out"
    with pytest.raises(NemotronError, match="made at scale 'small' but this run is 'tiny'"):
        main(config(inputs, out, checkpoint_path=small.path))
    assert not out.exists()


def test_a_checkpoint_with_another_tokenizer_is_refused(inputs, tmp_path):
    other_dir = train_tokenizer(["another corpus, another vocabulary"] * 50 + ["zebra quartz"] * 20, 300,
                                tmp_path / "other_tokenizer", chat_template=NANO2_CHAT_TEMPLATE)
    other = save_sft_checkpoint(tmp_path / "other_sft", load_tokenizer(other_dir))
    out = tmp_path / "out"
    with pytest.raises(NemotronError, match="does not match the tokenizer"):
        main(config(inputs, out, checkpoint_path=other.path))
    assert not out.exists()


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(label_smoothing=0.1), "only applies to --loss-variant 'conservative'"),
        (dict(loss_variant="conservative"), "needs 0 < label_smoothing < 0.5"),
        (dict(beta=0.0), "must be > 0"),
        (dict(micro_batch_size=1000), "fewer than one global batch"),
        (dict(watch_every=0), "--watch-every 0 must be at least 1"),
    ],
)
def test_settings_dpo_does_not_define_are_refused_before_training(inputs, tmp_path, changes, message):
    out = tmp_path / "out"
    with pytest.raises(NemotronError, match=message):
        main(config(inputs, out, **changes))
    assert not (out / "checkpoints").exists()


def test_resuming_with_another_beta_is_refused(inputs, trained, tmp_path):
    with pytest.raises(NemotronError, match="other settings beta"):
        main(config(inputs, trained.path, beta=0.5))
