"""nano2 stage 2 data curation: preference pairs from the SFT model's own answers, judged by the checker
(and user pairs).

The SFT model is real: stage-1 training run here for 40 steps on the session's tiny SFT dataset (its skill
chats included), enough for its samples to hold right and wrong answers to the "largest" problems.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nemotron.data_prep.preference import judged_pairs, read_pairs, reference_pairs
from nemotron.data_prep.verifiable import Largest, is_right, only_integer, read_problems
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.artifacts import PreferenceDataset, SFTCheckpoint
from nemotron.recipes.nano2.stage1_sft import training as sft_training
from nemotron.recipes.nano2.stage2_alignment.data_curation import Config, main, sample_answers

PROMPTS = 100  # training problems the SFT model answers (tiny's default is 600)


@pytest.fixture(scope="module", autouse=True)
def restore_threads():
    threads = torch.get_num_threads()  # the steps set their own thread counts
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def sft(tiny_sft_dataset):
    return tiny_sft_dataset  # stage-1 curation from a tiny stage-0 checkpoint, made once per session (tests/runs.py)


@pytest.fixture(scope="module")
def sft_checkpoint(sft, tiny_base_checkpoint, tmp_path_factory) -> SFTCheckpoint:
    """40 real SFT steps (~4 s): its samples are right for some problems and wrong for others."""
    out = tmp_path_factory.mktemp("sft") / "training"
    return sft_training.main(sft_training.Config(dataset_path=sft.path, checkpoint_path=tiny_base_checkpoint.path,
                                                 output_dir=out, steps=40, eval_every=40, checkpoint_every=40))


def config(sft_checkpoint, out, **changes) -> Config:
    return Config(**{"checkpoint_path": sft_checkpoint.path, "num_prompts": PROMPTS, "output_dir": out, **changes})


@pytest.fixture(scope="module")
def pairs(sft_checkpoint, tmp_path_factory) -> PreferenceDataset:
    return main(config(sft_checkpoint, tmp_path_factory.mktemp("pref")))


# ---------------------------------------------------------------------------------------------------
# judged_pairs and reference_pairs, on hand-written answers
# ---------------------------------------------------------------------------------------------------


def test_judged_pairs_choose_a_right_answer_and_prefer_a_wrong_number_as_rejected():
    problems = [Largest(numbers).record() for numbers in ((3, 9, 8), (1, 9, 2), (4, 9, 6), (7, 9, 8), (2, 9, 0))]
    samples = [
        ["8", "9", "9"],  # the near miss, then right
        ["9", "It is 9."],  # all right: no pair
        ["6", "four", "eight"],  # all wrong: no pair
        ["I think 7 or 9", "7", "9"],  # the first wrong answer names two numbers; "7" names one
        ["none of them", "9"],  # no wrong answer names a single number
    ]
    made, counts = judged_pairs(problems, samples, is_right)
    assert counts == {"near_miss": 1, "all_right": 1, "all_wrong": 1, "other_number": 1, "no_single_number": 1}
    assert [(p["chosen"], p["rejected"], p["rejected_kind"]) for p in made] == [
        ("9", "8", "near_miss"), ("9", "7", "other_number"), ("9", "none of them", "no_single_number")]
    first = made[0]
    assert first["prompt"] == [{"role": "user", "content": "Which is the largest: 3, 9, 8?"}]
    assert first["id"] == first["prompt"][0]["content"] and first["category"] == "skill"
    with pytest.raises(NemotronError, match="5 problems and 4 groups of samples"):
        judged_pairs(problems, samples[:4], is_right)


def test_reference_pairs_put_the_true_answer_against_the_teachers_near_miss():
    problems = [Largest((3, 8, 5)).record(), Largest((0, 6, 7, 2), phrasing=3).record()]
    assert [(p["prompt"][0]["content"], p["chosen"], p["rejected"], p["rejected_kind"])
            for p in reference_pairs(problems)] == [
        ("Which is the largest: 3, 8, 5?", "8", "5", "near_miss"), ("Largest of 0, 6, 7, 2?", "7", "6", "near_miss")]


# ---------------------------------------------------------------------------------------------------
# The step: the SFT model's own answers, judged
# ---------------------------------------------------------------------------------------------------


def test_same_inputs_and_seed_give_the_same_digest(sft_checkpoint, pairs, tmp_path):
    again = main(config(sft_checkpoint, tmp_path / "again"))
    assert again.digest == pairs.digest
    assert again.train_pairs.read_bytes() == pairs.train_pairs.read_bytes()
    other = main(config(sft_checkpoint, tmp_path / "s1", seed=1))  # other samples, another validation slice
    assert other.digest != pairs.digest and other.train_pairs.read_bytes() != pairs.train_pairs.read_bytes()


def test_training_pairs_are_the_sft_models_own_answers_judged_by_the_checker(sft, sft_checkpoint, pairs):
    problems = read_problems(sft.train_problems, PROMPTS)
    answers = sample_answers(sft_checkpoint.model_dir, pairs_tokenizer(pairs), problems, config(sft_checkpoint, None))
    assert [len(group) for group in answers] == [4] * PROMPTS
    expected, counts = judged_pairs(problems, answers, is_right)
    # every problem sampled is counted: a pair by the kind of its rejected answer, or all right / all wrong
    assert pairs.metrics["judged"] == dict(sorted(counts.items())) and sum(counts.values()) == PROMPTS
    assert {"near_miss", "other_number", "all_wrong"} <= set(counts)  # 40 SFT steps: the teacher's mistake too
    written = read_pairs(pairs.train_pairs) + read_pairs(pairs.valid_pairs)
    assert sorted(map(json.dumps, written)) == sorted(map(json.dumps, expected))
    assert pairs.metrics["train_pairs_source"] == "judged samples"
    by_question = {p["question"]: p for p in problems}
    for pair in written:
        problem = by_question[pair["prompt"][-1]["content"]]
        assert is_right(pair["chosen"], problem["answer"]) and not is_right(pair["rejected"], problem["answer"])
        given = only_integer(pair["rejected"])
        assert pair["rejected_kind"] == ("no_single_number" if given is None else
                                         "near_miss" if given == problem["near_miss"] else "other_number")


def pairs_tokenizer(pairs: PreferenceDataset):
    from nemotron.data_prep.tokenizer import load_tokenizer

    return load_tokenizer(pairs.tokenizer_dir)


def test_held_out_pairs_are_the_held_out_problems_never_trained_on(sft, pairs):
    held_out = read_problems(sft.test_problems)
    assert read_pairs(pairs.test_pairs) == reference_pairs(held_out) and pairs.num_test_pairs == len(held_out)
    trained = {p["prompt"][-1]["content"] for p in read_pairs(pairs.train_pairs)}
    assert not trained & {p["question"] for p in held_out}
    assert pairs.metrics["train_pairs_removed_held_out_question"] == 0


def test_lineage_records_the_sft_checkpoint_and_its_dataset(sft, sft_checkpoint, pairs):
    assert [(ref.type, ref.digest) for ref in pairs.inputs] == [("sftcheckpoint", sft_checkpoint.digest),
                                                               ("sftdataset", sft.digest)]
    assert pairs.tokenizer_dir == sft.tokenizer_dir
    assert PreferenceDataset.load(path=pairs.path, scale="tiny").digest == pairs.digest


def test_training_pairs_are_tokenized_length_filtered_and_split_for_dpo(sft, sft_checkpoint, pairs, tmp_path):
    """Curation prepares exactly what DPO training consumes: no tokenizer work is left for training."""
    from nemotron.data_prep.preference import read_tokenized_pairs, tokenize_pairs

    train, valid = read_pairs(pairs.train_pairs), read_jsonl_records(pairs.valid_pairs)
    train_tokens, valid_tokens = read_tokenized_pairs(pairs.train_tokens), read_tokenized_pairs(pairs.valid_tokens)
    assert len(train) == len(train_tokens[0]) == pairs.num_train_pairs
    assert len(valid) == len(valid_tokens[0]) == pairs.num_valid_pairs == round(0.05 * (len(train) + len(valid)))
    # The tokens are the text pairs, line for line, in the nano2 chat format of the SFT tokenizer.
    assert tuple(map(list, tokenize_pairs(pairs_tokenizer(pairs), train))) == train_tokens
    assert pairs.max_length == 128 and pairs.metrics["pairs_skipped_too_long"] == 0  # short questions and answers
    # Validation pairs are never trained on.
    assert not {p["id"] for p in train} & {p["id"] for p in valid}
    # A shorter --max-length drops (and counts) exactly the pairs longer than it, never cuts one.
    lengths = [len(p) + max(len(c), len(r)) for p, c, r in zip(*tokenize_pairs(pairs_tokenizer(pairs), train + valid))]
    limit = sorted(lengths)[len(lengths) // 2]
    shorter = main(config(sft_checkpoint, tmp_path / "short", max_length=limit, validation_share=0))
    assert shorter.num_valid_pairs == 0 and shorter.num_train_pairs == sum(n <= limit for n in lengths)
    assert shorter.metrics["pairs_skipped_too_long"] == sum(n > limit for n in lengths) > 0
    assert all(len(p) + max(len(c), len(r)) <= limit for p, c, r in zip(*read_tokenized_pairs(shorter.train_tokens)))


def read_jsonl_records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_answers_that_never_differ_make_no_pair_and_are_one_clear_error(sft_checkpoint, tmp_path):
    """Sampled near temperature 0, a model answers each problem the same way every time: all right or all wrong."""
    with pytest.raises(NemotronError, match=r"none of the 20 problems got both a right and a wrong answer from "
                                            r".*'all_wrong': \d+.*raise --samples-per-prompt or give --pairs-path"):
        main(config(sft_checkpoint, tmp_path / "out", num_prompts=20, temperature=1e-4))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("changes", [dict(samples_per_prompt=1), dict(temperature=0.0)])
def test_sampling_that_cannot_make_a_pair_is_refused(sft_checkpoint, tmp_path, changes):
    with pytest.raises(NemotronError, match="a pair needs at least 2 answers per problem, sampled at a temperature"):
        main(config(sft_checkpoint, tmp_path / "out", **changes))
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------
# Given pairs (--pairs-path)
# ---------------------------------------------------------------------------------------------------


def test_given_pairs_replace_the_judged_ones_and_lose_held_out_questions(sft, sft_checkpoint, tmp_path):
    held_out_question = read_problems(sft.test_problems)[0]["question"]
    given = tmp_path / "given.jsonl"
    given.write_text(
        json.dumps({"prompt": "Who wrote Hamlet?", "chosen": "Shakespeare.", "rejected": "Dickens."}) + "\n"
        + json.dumps({"prompt": [{"role": "user", "content": held_out_question}],
                      "chosen": [{"role": "assistant", "content": "A good answer."}],
                      "rejected": [{"role": "assistant", "content": "A bad one."}]}) + "\n"
    )
    art = main(config(sft_checkpoint, tmp_path / "out", pairs_path=given))
    assert art.num_train_pairs == 1 and art.metrics["train_pairs_removed_held_out_question"] == 1
    assert read_pairs(art.train_pairs)[0]["chosen"] == "Shakespeare."
    assert art.metrics["train_pairs_source"] == "given" and art.metrics["judged"] == {}
    assert any(ref.type == "source" and ref.path.endswith("given.jsonl") for ref in art.inputs)


@pytest.mark.parametrize("side", ["chosen", "rejected"])
def test_an_empty_answer_is_refused_with_file_and_line(sft_checkpoint, tmp_path, side):
    given = tmp_path / "pairs.jsonl"
    bad = {"prompt": "Hi?", "chosen": "Hello.", "rejected": "Bye."} | {side: "   "}
    given.write_text(json.dumps({"prompt": "Q?", "chosen": "A.", "rejected": "B."}) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(NemotronError, match=rf"{given}:3: empty or missing '{side}'") as error:
        main(config(sft_checkpoint, tmp_path / "out", pairs_path=given))
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out" / "metadata.json").exists()


def test_refuses_a_checkpoint_of_another_scale(sft_checkpoint, tmp_path):
    with pytest.raises(NemotronError, match=r"sftcheckpoint was made at scale 'tiny' but this run is 'medium'"):
        main(config(sft_checkpoint, tmp_path / "out", scale="medium"))
