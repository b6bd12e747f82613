"""nano2 stage 1 training: SFT on packed rows, loss on assistant tokens only, exact resume, refusals.

Runs on real inputs built here: a BPE tokenizer with the chat markers and nano2 template, a tiny
NemotronH saved with save_pretrained (the stage-0 checkpoint), and the real stage-1 data curation
over the chatterbot corpus (packed Parquet).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from builders import chatterbot_texts, make_pretrain_checkpoint  # tests/ is on sys.path under pytest
from nemotron.cli import run
from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE, tokenize_conversation
from nemotron.data_prep.packing import PackingConfig, pack_conversations, read_packed
from nemotron.data_prep.tokenizer import IM_END_ID, IM_START_ID, PAD_ID, load_tokenizer, train_tokenizer
from nemotron.errors import NemotronError
from nemotron.models.nano2 import build_config, build_model
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, SFTCheckpoint
from nemotron.recipes.nano2.stage1_sft import data_curation
from nemotron.recipes.nano2.stage1_sft.training import Config, main
from nemotron.training.metrics import read_metrics
from nemotron.training.packed_batches import (
    collate_packed,
    collate_per_conversation,
    masked_token_loss,
    validation_loss,
)

STEP = "nemotron.recipes.nano2.stage1_sft.training"
FEW = {"steps": 6, "checkpoint_every": 2, "eval_every": 3, "micro_batch_size": 2, "grad_accum_steps": 2}


@pytest.fixture(scope="module")
def base(tiny_base_checkpoint) -> PretrainCheckpoint:
    return tiny_base_checkpoint  # tests/runs.py: made once per session


@pytest.fixture(scope="module")
def dataset(tiny_sft_dataset) -> data_curation.SFTDataset:
    return tiny_sft_dataset  # data_curation.main(Config(checkpoint_path=base.path)), made once per session


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory) -> SFTCheckpoint:
    """Six steps, the dataset given by path and the base checkpoint found through its lineage."""
    return main(Config(dataset_path=dataset.path, output_dir=tmp_path_factory.mktemp("sft"), **FEW))


# ---------------------------------------------------------------------------------------------------
# The loss: exactly the assistant tokens, never across a conversation boundary
# ---------------------------------------------------------------------------------------------------


def _assistant_targets(ids: list[int], tokenizer) -> set[int]:
    """Positions of assistant content and its <|im_end|>, found by reading the markers in the tokens."""
    header = tokenizer("assistant\n", add_special_tokens=False)["input_ids"]
    targets, inside = set(), False
    for position, token in enumerate(ids):
        if token == IM_START_ID:
            starts_assistant = ids[position + 1 : position + 1 + len(header)] == header
            inside, skip_until = starts_assistant, position + len(header)
        elif inside and position > skip_until:
            targets.add(position)
            inside = token != IM_END_ID
    return targets


def _check_loss_positions(rows, tokenizer) -> int:
    """Assert that the loss of `rows` is trained exactly on the assistant targets; returns chats checked."""
    batch = collate_packed(rows, PAD_ID)
    # The logits whose loss gradient is non-zero are exactly the trained predictions.
    logits = torch.randn(*batch.input_ids.shape, len(tokenizer), requires_grad=True)
    masked_token_loss(logits, batch).backward()
    trained = logits.grad.abs().sum(-1) > 0
    assert torch.equal(trained, batch.loss_mask.bool())

    checked = 0
    for b, row in enumerate(rows):
        for start, end in itertools.pairwise(row.cu_seqlens().tolist()):
            ids = row.input_ids[start:end].tolist()
            expected = {start + p for p in _assistant_targets(ids, tokenizer)}
            predicted = {i + 1 for i in range(start, end) if trained[b, i]}  # position i predicts token i+1
            assert predicted == expected  # every target is inside this conversation: nothing crosses a boundary
            assert all(batch.labels[b, i - 1] == batch.input_ids[b, i] for i in predicted)
            checked += 1
        assert not trained[b, len(row.input_ids) - 1 :].any()  # the last token and the padding train nothing
    return checked


def test_loss_positions_are_exactly_the_assistant_tokens_of_each_conversation(dataset):
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    chats = [json.loads(line)["messages"] for line in dataset.valid_conversations.read_text().splitlines()]
    follow_up = [{"role": "user", "content": "And then?"}, {"role": "assistant", "content": "Yes."}]
    chats = chats[:30] + [chats[0] + follow_up]  # a multi-turn chat: two assistant spans
    tokenized = [tokenize_conversation(tokenizer, chat) for chat in chats]
    rows, _ = pack_conversations(tokenized, PackingConfig(pack_size=256), show_progress=False)
    assert _check_loss_positions(rows, tokenizer) == len(chats)

    # And every row the SFT step trains on, as data curation wrote them.
    train_rows = read_packed(dataset.train_packed)
    checked = sum(_check_loss_positions(train_rows[i : i + 16], tokenizer) for i in range(0, len(train_rows), 16))
    assert checked == dataset.num_train_conversations


def test_attention_is_block_diagonal_but_mamba_state_carries_over(dataset):
    rows = [row for row in read_packed(dataset.valid_packed) if len(row.seq_start_id) >= 3][:2]
    packed, alone = collate_packed(rows, PAD_ID), collate_per_conversation(rows, PAD_ID)

    def largest_difference(pattern: str) -> float:
        model = build_model(build_config("tiny", 1024, hybrid_override_pattern=pattern), seed=0).eval()
        with torch.no_grad():
            packed_logits = model(**packed.model_inputs(), use_cache=False).logits
            alone_logits = model(**alone.model_inputs(), use_cache=False).logits
        worst, k = 0.0, 0
        for b, row in enumerate(rows):
            for start, end in itertools.pairwise(row.cu_seqlens().tolist()):
                worst = max(worst, (packed_logits[b, start:end] - alone_logits[k, : end - start]).abs().max().item())
                k += 1
        return worst

    assert largest_difference("*-*-") < 1e-4  # attention + MLP only: packing changes nothing
    assert largest_difference("M-M*-M-") > 1e-3  # Mamba layers: the documented carry-over is real


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------


def test_sft_lowers_validation_loss_and_saves_a_model_that_loads_alone(trained, dataset, base):
    rows = read_packed(dataset.valid_packed)
    before = validation_loss(AutoModelForCausalLM.from_pretrained(base.model_dir), rows, PAD_ID)
    assert trained.validation_loss < before - 0.05

    model = AutoModelForCausalLM.from_pretrained(trained.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(trained.model_dir)
    assert tokenizer.chat_template == NANO2_CHAT_TEMPLATE
    assert validation_loss(model, rows, PAD_ID) == pytest.approx(trained.validation_loss, abs=1e-5)

    records = read_metrics(trained.metrics_path)
    assert [r["step"] for r in records] == list(range(1, 7))
    assert [r["step"] for r in records if "val_loss" in r] == [3, 6]
    assert not any("second" in key or "tok" in key for r in records for key in r)  # no wall clock in the digest
    assert {ref.type for ref in trained.inputs} == {"sftdataset", "pretraincheckpoint"}
    assert SFTCheckpoint.from_path(trained.path).digest == trained.digest


def test_loss_is_normalised_per_token_over_the_whole_step(dataset, tmp_path):
    """4 rows in one micro-batch, or 2 x 2, or 1 x 4 accumulated: the same step, the same loss."""
    first_steps = []
    for micro, accumulation in ((4, 1), (2, 2), (1, 4)):
        config = Config(dataset_path=dataset.path, output_dir=tmp_path / f"{micro}x{accumulation}", steps=1,
                        micro_batch_size=micro, grad_accum_steps=accumulation)
        first_steps.append(read_metrics(main(config).metrics_path)[0])
    for other in first_steps[1:]:
        assert other["loss"] == pytest.approx(first_steps[0]["loss"], rel=1e-5)
        assert other["grad_norm"] == pytest.approx(first_steps[0]["grad_norm"], rel=1e-4)


def _command(out: Path, *flags: str) -> list[str]:
    few = [f"--{name.replace('_', '-')}={value}" for name, value in FEW.items()]
    return [sys.executable, "-m", STEP, "--output-dir", str(out), *few, *flags]


@pytest.mark.slow
def test_resume_after_sigkill_in_a_pipe_ends_with_the_same_weights_and_loss(trained, dataset, base, tmp_path,
                                                                            monkeypatch, capsys):
    out = tmp_path / "killed"
    process = subprocess.Popen(
        _command(out, "--dataset-path", str(dataset.path)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while not (out / "checkpoints" / "step_000002").is_dir():
        assert process.poll() is None and time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / "model").exists()

    # Re-run as the second half of `data_curation | training`: both artifacts arrive on stdin. The kill was
    # real; the re-run is the command's own entry point (`nemotron.cli.run`) in this process, which spares
    # a second interpreter's ~4 s of imports (a bad input would exit 2 here too, failing the test).
    stdin = json.dumps({"pretraincheckpoint": json.loads(base.model_dump_json()),
                        "sftdataset": json.loads(dataset.model_dump_json())})
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()
    run(main, _command(out)[3:])
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"pretraincheckpoint", "sftdataset", "sftcheckpoint"}  # inputs passed through
    resumed = SFTCheckpoint.model_validate(printed["sftcheckpoint"])
    assert {ref.type: ref.digest for ref in resumed.inputs} == {
        "sftdataset": dataset.digest, "pretraincheckpoint": base.digest
    }

    assert 2 <= resumed.metrics["resumed_from_step"] < FEW["steps"]  # really resumed mid-run
    expected = load_file(trained.model_dir / "model.safetensors")
    weights = load_file(resumed.model_dir / "model.safetensors")
    assert expected.keys() == weights.keys()
    assert all(torch.equal(expected[name], weights[name]) for name in expected)
    assert resumed.training_loss == trained.training_loss
    assert resumed.validation_loss == trained.validation_loss
    assert read_metrics(resumed.metrics_path) == read_metrics(trained.metrics_path)
    assert resumed.digest == trained.digest


@pytest.mark.slow
def test_two_processes_under_torchrun_train_like_one_with_the_same_global_batch(dataset, tmp_path):
    one = main(Config(dataset_path=dataset.path, output_dir=tmp_path / "one", steps=2, micro_batch_size=2,
                      grad_accum_steps=2, eval_every=2))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", STEP,
               "--dataset-path", str(dataset.path), "--output-dir", str(tmp_path / "two"), "--steps=2",
               "--micro-batch-size=2", "--grad-accum-steps=1", "--eval-every=2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.strip().splitlines()) == 1  # one artifact JSON for the whole job
    two = SFTCheckpoint.model_validate(json.loads(result.stdout)["sftcheckpoint"])
    assert two.metrics["world_size"] == 2
    for a, b in zip(read_metrics(one.metrics_path), read_metrics(two.metrics_path), strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    assert two.validation_loss == pytest.approx(one.validation_loss, rel=1e-5)


# ---------------------------------------------------------------------------------------------------
# Refusals, before any training
# ---------------------------------------------------------------------------------------------------


def _checkpoint_with_tokenizer(root: Path, vocab_size: int) -> PretrainCheckpoint:
    model_dir = root / "model"
    train_tokenizer(chatterbot_texts(), vocab_size, model_dir, chat_template=NANO2_CHAT_TEMPLATE)
    build_model(build_config("tiny", len(load_tokenizer(model_dir))), seed=0).save_pretrained(model_dir)
    (root / "metrics.jsonl").write_text('{"step": 1, "loss": 6.0}\n')
    return PretrainCheckpoint(path=root, model_dir=model_dir, metrics_path=root / "metrics.jsonl",
                              training_loss=6.0, validation_loss=None, steps=1).save()


def test_patience_anneals_the_rate_to_its_floor_then_ends_the_run_and_a_resume_ends_it_there(dataset, tmp_path):
    """--patience 2, validating every 2 steps of 20, at lr 1e-12: the validation loss barely moves, so patience
    fires within a few validations. Which one depends on the last bits of the loss (a weight at zero moves
    by ~1e-12, and the loss's rounding with the thread count), so the test finds it in the recorded losses by
    the rule --patience states, then checks what follows: the rate anneals over the next 20% of the steps (4)
    and the run ends there; resumed from a checkpoint inside the anneal, it ends at the same step."""
    settings = dict(dataset_path=dataset.path, steps=20, eval_every=2, checkpoint_every=2, patience=2, lr=1e-12,
                    micro_batch_size=2)
    ended = main(Config(output_dir=tmp_path / "whole", **settings))
    records = read_metrics(ended.metrics_path)
    best, without_gain, fired = None, 0, None
    for record in records:
        if "val_loss" not in record:
            continue
        if best is None or record["val_loss"] < best:
            best, without_gain = record["val_loss"], 0
        else:
            without_gain += 1
        if without_gain == 2:
            fired = record["step"]
            break
    assert fired is not None and fired <= 14, f"patience should fire by step 14 at lr 1e-12: {records}"
    assert ended.steps == fired + 4 and ended.metrics["stopped_early"] is True
    assert [r["step"] for r in records] == list(range(1, fired + 5))
    lrs = [r["lr"] / 1e-12 for r in records]
    start, floor = lrs[fired], Config.min_lr_ratio  # the step after it keeps the rate the schedule gave it
    assert start > floor and lrs[fired:] == pytest.approx([start + (floor - start) * k / 3 for k in range(4)])

    # A run killed during the anneal (its last checkpoint, model and artifact gone) resumes into the same end.
    resumed_dir = tmp_path / "resumed"
    main(Config(output_dir=resumed_dir, **settings))
    shutil.rmtree(resumed_dir / "checkpoints" / f"step_{fired + 4:06d}")
    shutil.rmtree(resumed_dir / "model")
    (resumed_dir / "metadata.json").unlink()
    resumed = main(Config(output_dir=resumed_dir, **settings))
    assert resumed.metrics["resumed_from_step"] == fired + 2 and resumed.steps == fired + 4
    assert read_metrics(resumed.metrics_path) == records


def test_refuses_a_checkpoint_without_chat_tokens(dataset, tmp_path):
    plain = make_pretrain_checkpoint(tmp_path / "plain", chat_tokens=False)
    config = Config(dataset_path=dataset.path, checkpoint_path=plain.path, output_dir=tmp_path / "out")
    with pytest.raises(NemotronError, match=r"no chat special token\(s\) <\|im_start\|>, <\|im_end\|>"):
        main(config)
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_refuses_a_checkpoint_whose_vocabulary_differs_from_the_dataset(dataset, tmp_path):
    other = _checkpoint_with_tokenizer(tmp_path / "other", vocab_size=900)
    config = Config(dataset_path=dataset.path, checkpoint_path=other.path, output_dir=tmp_path / "out")
    with pytest.raises(NemotronError, match="does not match the tokenizer of dataset .* vocabularies differ"):
        main(config)


def test_refuses_inputs_of_another_scale_and_resuming_with_other_settings(dataset, trained, tmp_path):
    with pytest.raises(NemotronError, match="made at scale 'tiny' but this run is 'small'"):
        main(Config(dataset_path=dataset.path, output_dir=tmp_path / "small", scale="small"))
    changed = replace(Config(**trained.config), output_dir=tmp_path / "copy", lr=5e-4)
    (tmp_path / "copy").mkdir()
    os.symlink(trained.path / "checkpoints", tmp_path / "copy" / "checkpoints")
    with pytest.raises(NemotronError, match="other settings lr; re-run with the same ones"):
        main(changed)
