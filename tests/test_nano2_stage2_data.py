"""nano2 stage 2 data curation: preference pairs from the stage-1 conversations (and user pairs)."""

from __future__ import annotations

import json
import os
import random

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nemotron.data_prep.conversations import question_key, read_conversations
from nemotron.data_prep.dedup import normalize
from nemotron.data_prep.preference import (
    REJECTED_KINDS,
    build_pairs,
    read_pairs,
    shuffle_words,
    truncate_words,
)
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.artifacts import PreferenceDataset
from nemotron.recipes.nano2.stage1_sft import data_curation as stage1
from nemotron.recipes.nano2.stage2_alignment.data_curation import Config, main


@pytest.fixture(scope="module")
def sft(tiny_sft_dataset) -> stage1.SFTDataset:
    return tiny_sft_dataset  # stage1 curation from a tiny stage-0 checkpoint, made once per session (tests/runs.py)


@pytest.fixture(scope="module")
def pairs(sft, tmp_path_factory) -> PreferenceDataset:
    return main(Config(dataset_path=sft.path, output_dir=tmp_path_factory.mktemp("pref")))


def test_same_inputs_and_seed_give_the_same_digest(sft, pairs, tmp_path):
    again = main(Config(dataset_path=sft.path, output_dir=tmp_path / "again"))
    assert again.digest == pairs.digest
    assert again.train_pairs.read_bytes() == pairs.train_pairs.read_bytes()
    assert main(Config(dataset_path=sft.path, output_dir=tmp_path / "s1", seed=1)).digest != pairs.digest


def test_train_pairs_come_from_train_and_test_pairs_from_test(sft, pairs):
    split_ids = {
        split: {c["id"] for c in read_conversations(getattr(sft, f"{split}_conversations"))}
        for split in ("train", "test")
    }
    train, test = read_pairs(pairs.train_pairs), read_pairs(pairs.test_pairs)
    conversation = lambda pair: pair["id"] if pair["id"] in split_ids["train"] else pair["id"].rsplit("/", 1)[0]  # noqa: E731
    assert {conversation(p) for p in train} <= split_ids["train"] and {p["id"] for p in test} <= split_ids["test"]
    assert len(train) == pairs.num_train_pairs and len(test) == pairs.num_test_pairs
    train_questions = {question_key({"messages": p["prompt"]}) for p in train}
    assert not train_questions & {question_key({"messages": p["prompt"]}) for p in test}


def test_rejected_is_a_plausible_wrong_answer_never_the_chosen_one(sft, pairs):
    conversations = read_conversations(sft.train_conversations)
    answers_by_category, correct = {}, {}
    for c in conversations:
        answers_by_category.setdefault(c["category"], set()).add(c["messages"][-1]["content"])
        correct.setdefault(question_key(c), set()).add(normalize(c["messages"][-1]["content"]))
    train = read_pairs(pairs.train_pairs)
    for p in train:
        assert normalize(p["rejected"]) != normalize(p["chosen"])
        assert p["prompt"][-1]["role"] == "user"
        if p["rejected_kind"] == "other_answer":
            assert p["rejected"] in answers_by_category[p["category"]]
            assert normalize(p["rejected"]) not in correct[question_key({"messages": p["prompt"]})]
        elif p["rejected_kind"] == "shuffled":
            assert sorted(p["rejected"].split()) == sorted(p["chosen"].split())
        else:
            assert p["rejected_kind"] == "truncated" and p["chosen"].startswith(p["rejected"])
    kinds = pairs.metrics["train_rejected_kinds"]
    assert set(kinds) == set(REJECTED_KINDS) and sum(kinds.values()) == len(train)
    test_kinds = pairs.metrics["test_rejected_kinds"]  # one pair per test conversation, drawn by share
    assert test_kinds["other_answer"] > test_kinds["shuffled"]  # other_answer_share=0.5 vs 0.25 per corruption


def test_corruptions_always_differ_from_the_original():
    rng = random.Random(0)
    for _ in range(200):
        assert shuffle_words("yes yes no", rng) != "yes yes no"
        truncated = truncate_words("one two three four", rng)
        assert truncated and "one two three four".startswith(truncated) and truncated != "one two three four"
    assert shuffle_words("yes yes", rng) is None and truncate_words("yes", rng) is None


def test_given_pairs_replace_the_built_ones_and_lose_test_questions(sft, tmp_path):
    test_question = read_conversations(sft.test_conversations)[0]["messages"][0]["content"]
    given = tmp_path / "given.jsonl"
    given.write_text(
        json.dumps({"prompt": "Who wrote Hamlet?", "chosen": "Shakespeare.", "rejected": "Dickens."}) + "\n"
        + json.dumps({"prompt": [{"role": "user", "content": test_question}],
                      "chosen": [{"role": "assistant", "content": "A good answer."}],
                      "rejected": [{"role": "assistant", "content": "A bad one."}]}) + "\n"
    )
    art = main(Config(dataset_path=sft.path, pairs_path=given, output_dir=tmp_path / "out"))
    assert art.num_train_pairs == 1 and art.metrics["train_pairs_removed_test_question"] == 1
    assert read_pairs(art.train_pairs)[0]["chosen"] == "Shakespeare."
    assert art.metrics["train_rejected_kinds"] == {"given": 1}
    assert any(ref.type == "source" and ref.path.endswith("given.jsonl") for ref in art.inputs)


@pytest.mark.parametrize("side", ["chosen", "rejected"])
def test_an_empty_answer_is_refused_with_file_and_line(sft, tmp_path, side):
    given = tmp_path / "pairs.jsonl"
    bad = {"prompt": "Hi?", "chosen": "Hello.", "rejected": "Bye."} | {side: "   "}
    given.write_text(json.dumps({"prompt": "Q?", "chosen": "A.", "rejected": "B."}) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(NemotronError, match=rf"{given}:3: empty or missing '{side}'") as error:
        main(Config(dataset_path=sft.path, pairs_path=given, output_dir=tmp_path / "out"))
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out" / "metadata.json").exists()


def test_refuses_a_dataset_of_another_scale(sft, tmp_path):
    with pytest.raises(NemotronError, match=r"sftdataset was made at scale 'tiny' but this run is 'medium'"):
        main(Config(dataset_path=sft.path, scale="medium", output_dir=tmp_path / "out"))


def test_lineage_records_the_sft_dataset(sft, pairs):
    assert [(ref.type, ref.digest) for ref in pairs.inputs] == [("sftdataset", sft.digest)]
    assert pairs.tokenizer_dir == sft.tokenizer_dir
    assert PreferenceDataset.load(path=pairs.path, scale="tiny").digest == pairs.digest


def test_training_pairs_are_tokenized_length_filtered_and_split_for_dpo(sft, pairs, tmp_path):
    """Curation prepares exactly what DPO training consumes: no tokenizer work is left for training."""
    from nemotron.data_prep.preference import read_tokenized_pairs, tokenize_pairs
    from nemotron.data_prep.tokenizer import load_tokenizer

    train, valid = read_pairs(pairs.train_pairs), read_jsonl_records(pairs.valid_pairs)
    train_tokens, valid_tokens = read_tokenized_pairs(pairs.train_tokens), read_tokenized_pairs(pairs.valid_tokens)
    assert len(train) == len(train_tokens[0]) == pairs.num_train_pairs
    assert len(valid) == len(valid_tokens[0]) == pairs.num_valid_pairs == round(0.05 * (len(train) + len(valid)))
    # The tokens are the text pairs, line for line, in the nano2 chat format of the SFT tokenizer.
    assert tuple(map(list, tokenize_pairs(load_tokenizer(sft.tokenizer_dir), train))) == train_tokens
    # Every pair fits max_length (prompt + longer answer); the others were counted, not cut.
    assert pairs.max_length == 128
    assert all(len(p) + max(len(c), len(r)) <= 128 for p, c, r in zip(*train_tokens))
    skipped = pairs.metrics["pairs_skipped_too_long"]
    assert skipped > 0
    # Validation pairs are never trained on.
    assert not {p["id"] for p in train} & {p["id"] for p in valid}
    shorter = main(Config(dataset_path=sft.path, output_dir=tmp_path / "short", max_length=64, validation_share=0))
    assert shorter.num_valid_pairs == 0 and shorter.num_train_pairs < pairs.num_train_pairs
    assert shorter.metrics["pairs_skipped_too_long"] > skipped


def read_jsonl_records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_more_training_pairs_per_conversation_leave_the_held_out_pairs_unchanged(sft, pairs, tmp_path):
    one = main(Config(dataset_path=sft.path, output_dir=tmp_path / "one", train_pairs_per_conversation=1))
    more = pairs  # the default: one pair per rejected kind
    # Held-out pairs are not made easier (or different) by how the training pairs are built.
    assert more.test_pairs.read_bytes() == one.test_pairs.read_bytes()
    assert more.num_train_pairs > 2 * one.num_train_pairs
    assert more.metrics["train_conversations_without_pair"] == one.metrics["train_conversations_without_pair"]
    # Each conversation's first pair is the one of one pair per conversation; the others add new kinds.
    conversations = read_conversations(sft.train_conversations)
    single = {p["id"]: p for p in build_pairs(conversations, seed=0)}
    every = build_pairs(conversations, seed=0, per_conversation=3)
    assert len({p["id"] for p in every}) == len(every)
    extra: dict[str, list[str]] = {}
    for pair in every:
        if pair["id"] in single:
            assert pair == single[pair["id"]]
            extra[pair["id"]] = [pair["rejected_kind"]]
        else:
            conversation_id, kind = pair["id"].rsplit("/", 1)
            assert kind == pair["rejected_kind"] and kind not in extra[conversation_id]
            extra[conversation_id].append(kind)
    assert extra.keys() == single.keys()
    with pytest.raises(NemotronError, match="pairs per conversation 4 must be 1 to 3"):
        main(Config(dataset_path=sft.path, output_dir=tmp_path / "four", train_pairs_per_conversation=4))
