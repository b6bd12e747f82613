"""nano2 stage 1 data curation: chats -> validated, deduplicated, leak-free splits -> packed SFT data.

Runs on the real chatterbot corpus with a real stage-0 checkpoint folder built here (a BPE tokenizer
trained with the chat markers and template, a tiny NemotronH model saved with save_pretrained).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builders import make_pretrain_checkpoint  # tests/ is on sys.path under pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nemotron.data_prep.conversations import question_key, read_conversations
from nemotron.data_prep.packing import read_packed
from nemotron.data_prep.splits import split_grouped
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.data_prep.verifiable import read_problems
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, SFTDataset
from nemotron.recipes.nano2.stage1_sft.data_curation import SKILL_CATEGORY, SKILL_CHATS, Config, main

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------------
# A minimal, real stage-0 checkpoint (shared with tests/test_nano2_stage2_data.py)
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tiny_base_checkpoint) -> PretrainCheckpoint:
    return tiny_base_checkpoint  # tests/runs.py: made once per session


@pytest.fixture(scope="module")
def dataset(tiny_sft_dataset) -> SFTDataset:
    return tiny_sft_dataset  # main(Config(checkpoint_path=checkpoint.path)), made once per session


# ---------------------------------------------------------------------------------------------------
# Behaviour
# ---------------------------------------------------------------------------------------------------


def test_same_inputs_and_seed_give_the_same_digest(checkpoint, dataset, tmp_path):
    again = main(Config(checkpoint_path=checkpoint.path, output_dir=tmp_path / "again"))
    assert again.digest == dataset.digest
    assert again.train_packed.read_bytes() == dataset.train_packed.read_bytes()
    other_seed = main(Config(checkpoint_path=checkpoint.path, output_dir=tmp_path / "seed1", seed=1))
    assert other_seed.digest != dataset.digest  # the seed really moves the split


def test_no_valid_or_test_question_appears_in_train(dataset):
    questions = {
        split: {question_key(c) for c in read_conversations(getattr(dataset, f"{split}_conversations"))}
        for split in ("train", "valid", "test")
    }
    assert not questions["train"] & questions["test"]
    assert not questions["train"] & questions["valid"]
    assert not questions["valid"] & questions["test"]
    # chatterbot asks some questions several times: the hash split scattered them, the repair moved them
    assert dataset.metrics["split_groups_repaired"] > 0
    assert dataset.metrics["split_moved_total"] > 0
    assert sum(dataset.metrics["split_final"].values()) == sum(dataset.metrics["split_by_hash"].values())


def test_split_repair_moves_a_group_to_its_majority_split():
    items = [(f"id{i}", "shared question") for i in range(40)] + [(f"solo{i}", f"q{i}") for i in range(200)]
    splits, report = split_grouped(items, id_of=lambda x: x[0], group_of=lambda x: x[1], ratios=(0.8, 0.1, 0.1), seed=0)
    homes = [split for split, members in splits.items() if any(q == "shared question" for _, q in members)]
    assert homes == ["train"]  # 40 members, ~80% hashed to train: the group lives there
    assert report.groups_repaired == 1 and sum(report.moved.values()) > 0
    assert all(key.endswith("->train") for key in report.moved)


def test_loss_mask_covers_exactly_the_assistant_answers(dataset):
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    expected = {
        "".join(m["content"] + "<|im_end|>" for m in c["messages"] if m["role"] == "assistant")
        for c in read_conversations(dataset.train_conversations)
    }
    segments = truncated = 0
    for row in read_packed(dataset.train_packed, dataset.pack_size):
        ends = list(row.seq_start_id[1:]) + [len(row.input_ids)]
        for start, end in zip(row.seq_start_id, ends):
            ids, mask = row.input_ids[start:end], row.loss_mask[start:end]
            trained = tokenizer.decode(ids[1:][mask[:-1] == 1].tolist(), skip_special_tokens=False)
            segments += 1
            if end - start == dataset.pack_size:  # a truncated conversation: its answers are cut short
                truncated += 1
                assert any(text.startswith(trained) for text in expected)
            else:
                assert trained in expected, trained[:80]
    assert segments == dataset.num_train_conversations
    assert truncated == dataset.metrics["train_packing"]["truncated"]


def test_metrics_count_rejects_duplicates_and_packing(dataset):
    m = dataset.metrics
    assert m["conversations_read"]["chatterbot"] > 1500
    assert m["exact_duplicates"] > 500  # chatterbot repeats many Q/A pairs verbatim
    assert m["source_skipped"]["chatterbot"]  # the reader's own counts are kept
    assert 0.9 < m["packing_utilisation"] <= 1.0
    total = dataset.num_train_conversations + dataset.num_valid_conversations + dataset.num_test_conversations
    assert total == sum(m["conversations_read"].values()) - m["rejected_total"] - m["exact_duplicates"]
    # the skill's demonstrations are one more chat source: one chat per training problem
    assert m["conversations_read"]["largest"] == m["skill_train_problems"] == 2000 and m["skill_test_problems"] == 500


def test_lineage_reaches_the_checkpoint_and_the_raw_corpus(checkpoint, dataset):
    refs = {ref.type: ref for ref in dataset.inputs}
    assert refs["pretraincheckpoint"].digest == checkpoint.digest
    assert "chatterbot_corpus" in refs["source"].path and refs["source"].digest
    loaded = SFTDataset.load(path=dataset.path, scale="tiny")
    assert loaded.digest == loaded.compute_digest() == dataset.digest


def test_the_skill_is_split_by_its_numbers_and_demonstrated_by_an_imperfect_teacher(dataset):
    """The "largest" skill: true answers filed for evaluation and stage 2; SFT sees the teacher's demonstrations
    of the training problems, its near miss (the second-largest number) in about --teacher-error-rate of them."""
    train, test = read_problems(dataset.train_problems), read_problems(dataset.test_problems)
    assert not {tuple(p["numbers"]) for p in train} & {tuple(p["numbers"]) for p in test}
    assert all(p["answer"] == str(max(p["numbers"])) and p["near_miss"] == str(sorted(p["numbers"])[-2])
               for p in train + test)
    chats = [json.loads(line) for line in (dataset.path / SKILL_CHATS).read_text().splitlines()]
    assert [c["messages"][0]["content"] for c in chats] == [p["question"] for p in train]
    given = [c["messages"][-1]["content"] for c in chats]
    assert all(answer in (p["answer"], p["near_miss"]) for answer, p in zip(given, train))
    mistakes = sum(answer == p["near_miss"] for answer, p in zip(given, train))
    assert mistakes == dataset.metrics["teacher_mistakes"]
    assert dataset.metrics["teacher_error_share"] == pytest.approx(0.3, abs=0.05)  # 2,000 draws: sd 0.01
    # The demonstrations are trained on; no held-out skill question is in any conversation file.
    held_out = {p["question"] for p in test}
    for split in ("train", "valid", "test"):
        conversations = read_conversations(getattr(dataset, f"{split}_conversations"))
        assert not held_out & {c["messages"][0]["content"] for c in conversations}
    trained = read_conversations(dataset.train_conversations)
    assert sum(c["category"] == SKILL_CATEGORY for c in trained) > 0.7 * len(train)


def test_extra_pools_in_openai_and_sharegpt_format(checkpoint, tmp_path):
    pool = tmp_path / "pool.jsonl"
    lines = []
    for i in range(60):
        if i % 2:
            lines.append({"id": f"p{i}", "messages": [{"role": "user", "content": f"What is {i} plus one?"},
                                                       {"role": "assistant", "content": f"It is {i + 1}."}]})
        else:
            lines.append({"conversations": [{"from": "human", "value": f"Name the number after {i}."},
                                            {"from": "gpt", "value": f"{i + 1} comes after {i}."}]})
    lines.append({"messages": [{"role": "tool", "content": "{}"}]})  # skipped by the transform
    lines.append({"messages": [{"role": "user", "content": "Hi"}]})  # no answer: rejected by validation
    lines.append({"text": "no chat here"})
    pool.write_text("\n".join(json.dumps(line) for line in lines) + "\n{not json\n")
    art = main(Config(checkpoint_path=checkpoint.path, use_chatterbot=False, skill_problems=0, extra_pool_path=(pool,),
                      output_dir=tmp_path / "out"))
    assert art.metrics["conversations_read"] == {"pool.jsonl": 61}
    assert sum(art.metrics["source_skipped"]["pool.jsonl"].values()) == 3
    assert art.metrics["rejected_by_reason"] == {"does not end with an assistant turn": 1}
    ids = {c["id"] for split in ("train", "valid", "test")
           for c in read_conversations(getattr(art, f"{split}_conversations"))}
    assert {"p1", "pool.jsonl:0"} <= ids  # OpenAI records keep their id, ShareGPT ones get file:number
    assert read_problems(art.train_problems) == [] and art.metrics["skill_train_problems"] == 0  # --skill-problems 0
    assert {ref.type for ref in art.inputs} == {"pretraincheckpoint", "source"}


# ---------------------------------------------------------------------------------------------------
# Bad input: one clear error, nothing half-written
# ---------------------------------------------------------------------------------------------------


def test_refuses_a_tokenizer_without_chat_tokens(tmp_path):
    bad = make_pretrain_checkpoint(tmp_path / "plain", chat_tokens=False)
    with pytest.raises(NemotronError, match=r"no chat special token.*train_tokenizer") as error:
        main(Config(checkpoint_path=bad.path, output_dir=tmp_path / "out"))
    assert str(bad.model_dir) in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "out" / "metadata.json").exists()


def test_refuses_a_tokenizer_without_the_chat_template(tmp_path):
    bad = make_pretrain_checkpoint(tmp_path / "untemplated", chat_template=False)
    with pytest.raises(NemotronError, match=r"no chat template.*chat_template_named\('nano2'\)"):
        main(Config(checkpoint_path=bad.path, output_dir=tmp_path / "out"))


def test_refuses_a_checkpoint_of_another_scale(checkpoint, tmp_path):
    with pytest.raises(NemotronError, match=r"scale 'tiny' but this run is 'small'"):
        main(Config(checkpoint_path=checkpoint.path, scale="small", output_dir=tmp_path / "out"))


def test_refuses_rows_longer_than_the_model_context(checkpoint, tmp_path):
    with pytest.raises(NemotronError,
                       match=r"exceed the model's max_position_embeddings=1024; pass --pack-size 1024 or smaller"):
        main(Config(checkpoint_path=checkpoint.path, pack_size=100_000, output_dir=tmp_path / "out"))


@pytest.mark.parametrize("changes, message", [
    (dict(skill_problems=-1), r"--skill-problems -1: give a number of problems, or 0"),
    (dict(teacher_error_rate=1.5), r"teacher error rate 1.5 must be between 0 and 1"),
    (dict(skill_held_out=0.0), r"held_out=0.0 must be between 0 and 1"),
])
def test_bad_skill_settings_are_refused_before_anything_is_written(checkpoint, tmp_path, changes, message):
    with pytest.raises(NemotronError, match=message):
        main(Config(checkpoint_path=checkpoint.path, output_dir=tmp_path / "out", **changes))
    assert not (tmp_path / "out").exists()


def test_too_few_conversations_for_a_split_is_an_error(checkpoint, tmp_path):
    pool = tmp_path / "two.jsonl"
    pool.write_text("".join(
        json.dumps({"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]}) + "\n"
        for i in range(2)
    ))
    with pytest.raises(NemotronError, match=r"split is empty"):
        main(Config(checkpoint_path=checkpoint.path, use_chatterbot=False, skill_problems=0, extra_pool_path=(pool,),
                    output_dir=tmp_path / "out"))


# ---------------------------------------------------------------------------------------------------
# The command line: stage 0's JSON on stdin | stage 1 | stage 2
# ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pipe_from_stage0_through_stage1_into_stage2(checkpoint, tmp_path):
    stdin = json.dumps({checkpoint.type: json.loads(checkpoint.model_dump_json())})
    python = sys.executable
    command = (
        "set -o pipefail; "
        f"{python} -m nemotron.recipes.nano2.stage1_sft.data_curation --scale tiny --output-dir {tmp_path / 'sft'} "
        f"| {python} -m nemotron.recipes.nano2.stage1_sft.training --scale tiny --steps 40 --eval-every 40 "
        f"--checkpoint-every 40 --output-dir {tmp_path / 'sft_training'} "
        f"| {python} -m nemotron.recipes.nano2.stage2_alignment.data_curation --scale tiny --num-prompts 100 "
        f"--output-dir {tmp_path / 'pref'}"
    )
    result = subprocess.run(["bash", "-c", command], check=False, input=stdin, capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    # stage 2's pairs come from the SFT model's own answers (40 steps: some right, some wrong)
    assert set(out) == {"pretraincheckpoint", "sftdataset", "sftcheckpoint", "preferencedataset"}
    assert {ref["digest"] for ref in out["preferencedataset"]["inputs"]} >= {out["sftcheckpoint"]["digest"]}
    assert {ref["digest"] for ref in out["sftcheckpoint"]["inputs"]} >= {out["sftdataset"]["digest"]}

