"""The checkable skills and their imperfect teacher (`nemotron.data_prep.verifiable`): nano3's sums with a
dropped carry, nano2's "which is the largest" with its near miss, the checks, the problems' files.
(The sums' worked steps and GRPO's reward are tested in tests/test_nano3_grpo.py.)"""

from __future__ import annotations

from collections import Counter

import pytest

from nemotron.data_prep import verifiable
from nemotron.data_prep.verifiable import Addition, Largest
from nemotron.errors import NemotronError

# ---------------------------------------------------------------------------------------------------
# Addition: the teacher's dropped carry, on sums worked by hand
# ---------------------------------------------------------------------------------------------------


def test_a_dropped_carry_gives_the_answer_worked_by_hand():
    # 47 + 38: 7 + 8 = 15, carry 1 (dropped): 4 + 3 = 7 -> 75
    assert Addition(47, 38).carries == 1
    assert Addition(47, 38).worked(1) == ("7 + 8 = 15, write 5, carry 1; 4 + 3 = 7, write 7. So 47 + 38 = 75.", "75")
    assert Addition(47, 38).dropped_carry_answers == {"75"}
    # 95 + 17: carries in both columns; dropping the first gives 9 + 1 = 10 -> 102, the second (the final
    # carry, never written down) 12
    problem = Addition(95, 17)
    assert problem.carries == 2 and problem.worked(0)[1] == problem.answer == "112"
    assert problem.worked(1) == ("5 + 7 = 12, write 2, carry 1; 9 + 1 = 10, write 0, carry 1; write the carry 1. "
                                 "So 95 + 17 = 102.", "102")
    assert problem.worked(2) == ("5 + 7 = 12, write 2, carry 1; 9 + 1 + 1 = 11, write 1, carry 1. So 95 + 17 = 12.",
                                 "12")
    assert problem.dropped_carry_answers == {"102", "12"}
    # no carry: nothing to drop
    assert Addition(12, 30).carries == 0 and Addition(12, 30).dropped_carry_answers == set()
    # the demonstration holds the mistake's working and answer
    messages = problem.messages(drop=2)
    assert messages[1] == {"role": "assistant", "content": "12", "reasoning_content": problem.worked(2)[0]}
    assert "reasoning_content" not in problem.messages(with_reasoning=False, drop=1)[1]


def test_an_added_carry_and_every_other_mistake_are_told_apart_from_a_dropped_one():
    """The wrong answers RL was seen to teach (86 + 90 -> 186, 11 + 15 -> 36, 40 + 16 -> 66): a carry into a
    column the one before carried nothing into, worked by hand; each wrong answer gets one kind."""
    # 86 + 90: 6 + 0 = 6 (no carry), 8 + 9 = 17 (carry): a carry into the tens gives 186; the hundreds already
    # get one
    assert Addition(86, 90).added_carry_answers == {"186"}
    # 11 + 15 = 26 carries nothing: into the tens 36, or a leading 1 after the last column 126
    assert Addition(11, 15).added_carry_answers == {"36", "126"}
    assert Addition(40, 16).added_carry_answers == {"66", "156"}
    assert Addition(99, 1).added_carry_answers == set()  # every column carries: nothing to add
    problem = Addition(47, 38)  # 85; the teacher's dropped carry gives 75
    assert [problem.mistake(answer) for answer in ("85", "75", "185", "84", None)] == [
        None, "dropped_carry", "added_carry", "other", "other"]
    assert {Addition(11, 15).mistake(a) for a in ("36", "126")} == {"added_carry"}
    assert set(verifiable.ADDITION_MISTAKES) == {"dropped_carry", "added_carry", "other"}


def test_a_sum_is_asked_in_several_wordings_with_the_same_answer():
    problems = verifiable.addition_problems(400, seed=0)
    assert {p.phrasing for p in problems} == set(range(len(verifiable.PHRASINGS["addition"])))
    assert len({p.key for p in problems}) == 400  # distinct by the numbers, whatever the wording
    for p in problems:
        assert str(p.a) in p.question and str(p.b) in p.question and p.answer == str(p.a + p.b)
        assert p.reasoning.endswith(f"So {p.a} + {p.b} = {p.answer}.")
    assert Addition(47, 38).question == "What is 47 + 38?"  # phrasing 0: the canonical one


# ---------------------------------------------------------------------------------------------------
# Largest: nano2's skill
# ---------------------------------------------------------------------------------------------------


def test_largest_problems_are_seeded_distinct_and_vary_their_wording():
    problems = verifiable.largest_problems(2000, seed=0)
    assert problems == verifiable.largest_problems(2000, seed=0) != verifiable.largest_problems(2000, seed=1)
    assert problems[:500] == verifiable.largest_problems(500, seed=0)  # more problems add to the same ones
    assert len({p.key for p in problems}) == 2000
    for p in problems:
        assert 3 <= len(p.numbers) <= 6 and len(set(p.numbers)) == len(p.numbers)
        assert p.answer == str(max(p.numbers)) and p.near_miss == str(sorted(p.numbers)[-2])
        assert verifiable.only_integer(p.question) is None  # the list is in the question, not one number
    assert {p.phrasing for p in problems} == set(range(len(verifiable.PHRASINGS["largest"])))
    assert {p.separator for p in problems} == set(range(len(verifiable.SEPARATORS)))
    assert Largest((3, 8, 5)).question == "Which is the largest: 3, 8, 5?"
    assert Largest((3, 8, 5), phrasing=3, separator=2).question == "Largest of 3,8,5?"


def test_the_largest_number_is_spread_so_a_model_must_read_the_list():
    answers = Counter(p.answer for p in verifiable.largest_problems(2000, seed=0))
    # Random lists of 3-6 digits hold a 9 about 40% of the time; drawing the largest first spreads it.
    assert answers["9"] / 2000 < 0.25
    assert all(0.1 < answers[str(top)] / 2000 < 0.25 for top in range(5, 10))
    assert set(answers) >= {"3", "4", "5", "6", "7", "8", "9"}


@pytest.mark.parametrize("n, sizes, message", [
    (0, (3, 6), "need n >= 1"),
    (10, (1, 3), "2 <= sizes <= 10"),
    (10, (5, 4), "2 <= sizes <= 10"),
    (100, (2, 2), "only 90 distinct lists of 2-2 digits exist"),
])
def test_impossible_largest_problems_are_refused_at_once(n, sizes, message):
    with pytest.raises(NemotronError, match=message):
        verifiable.largest_problems(n, seed=0, sizes=sizes)


def test_split_problems_keeps_the_numbers_of_held_out_problems_out_of_train():
    problems = verifiable.largest_problems(500, seed=0)
    train, held_out = verifiable.split_problems(problems, 0.2, seed=0)
    assert len(held_out) == 100 and len(train) == 400
    assert not {p.key for p in train} & {p.key for p in held_out}
    assert verifiable.split_problems(problems, 0.2, seed=0) == (train, held_out)


# ---------------------------------------------------------------------------------------------------
# The teacher: one plausible mistake in a stated share of its demonstrations
# ---------------------------------------------------------------------------------------------------


def test_the_teacher_answers_the_near_miss_in_about_its_error_rate():
    problems = verifiable.largest_problems(4000, seed=0)
    demonstrations = [verifiable.teacher_messages(p, 0.3, seed=0) for p in problems]
    for p, (messages, mistake) in zip(problems, demonstrations):
        assert messages[0] == {"role": "user", "content": p.question}
        assert messages[1]["content"] == (p.near_miss if mistake == "near_miss" else p.answer)
        assert mistake in (None, "near_miss")
    share = sum(mistake is not None for _, mistake in demonstrations) / len(problems)
    assert share == pytest.approx(0.3, abs=0.03)  # 4,000 draws: standard deviation 0.007


def test_the_teacher_drops_one_carry_and_is_always_right_without_one():
    problems = verifiable.addition_problems(3000, seed=0)
    mistakes = Counter()
    for p in problems:
        messages, mistake = verifiable.teacher_messages(p, 0.35, seed=0)
        turn = messages[1]
        if mistake is None:
            assert (turn["reasoning_content"], turn["content"]) == p.worked()
        else:
            assert mistake == "dropped_carry" and p.carries > 0
            assert turn["content"] in p.dropped_carry_answers and turn["content"] != p.answer
            assert (turn["reasoning_content"], turn["content"]) in {p.worked(k) for k in range(1, p.carries + 1)}
        mistakes[p.carries > 0, mistake is not None] += 1
    assert mistakes[False, True] == 0 and mistakes[False, False] > 0  # no carry, no mistake
    with_carry = mistakes[True, True] + mistakes[True, False]
    assert mistakes[True, True] / with_carry == pytest.approx(0.35, abs=0.04)


def test_a_problems_demonstration_depends_on_it_and_the_seed_alone():
    problems = verifiable.largest_problems(300, seed=0)
    first = [verifiable.teacher_messages(p, 0.3, seed=0) for p in problems]
    alone = [verifiable.teacher_messages(p, 0.3, seed=0) for p in reversed(problems[:100])]
    assert alone[::-1] == first[:100]  # the same whatever else is demonstrated, in any order
    reworded = [verifiable.teacher_messages(Largest(p.numbers), 0.3, seed=0)[1] for p in problems]
    assert reworded == [mistake for _, mistake in first]  # the numbers decide, not the wording
    other_seed = [verifiable.teacher_messages(p, 0.3, seed=1)[1] for p in problems]
    assert other_seed != [mistake for _, mistake in first]


def test_the_error_rate_bounds():
    largest, sums = verifiable.largest_problems(200, seed=0), verifiable.addition_problems(200, seed=0)
    assert all(verifiable.teacher_messages(p, 0.0, seed=0)[1] is None for p in largest + sums)
    assert all(verifiable.teacher_messages(p, 1.0, seed=0)[1] == "near_miss" for p in largest)
    assert all((verifiable.teacher_messages(p, 1.0, seed=0)[1] is None) == (p.carries == 0) for p in sums)
    with pytest.raises(NemotronError, match="teacher error rate 1.2 must be between 0 and 1"):
        verifiable.teacher_messages(largest[0], 1.2, seed=0)


# ---------------------------------------------------------------------------------------------------
# The checks and the problems' files
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, integer", [
    ("9", "9"), ("It is 9.", "9"), (" -3 ", "-3"), ("9 or 8", None), ("", None), ("nine", None), ("3, 8, 5", None),
])
def test_only_integer_is_the_one_number_a_text_names(text, integer):
    assert verifiable.only_integer(text) == integer


@pytest.mark.parametrize("completion, right", [
    ("9", True), ("The largest is 9.", True), ("9, not 8", False), ("19", False), ("8", False), ("", False),
])
def test_is_right_accepts_exactly_one_number_equal_to_the_answer(completion, right):
    assert verifiable.is_right(completion, "9") is right


def test_problems_written_are_read_back_in_order_with_their_true_answers(tmp_path):
    problems = verifiable.largest_problems(20, seed=0)
    verifiable.write_problems(problems, tmp_path / "problems.jsonl")
    records = verifiable.read_problems(tmp_path / "problems.jsonl")
    assert records == [p.record() for p in problems]
    assert records[0] == {"question": problems[0].question, "answer": problems[0].answer,
                          "numbers": list(problems[0].numbers), "near_miss": problems[0].near_miss}
    assert verifiable.read_problems(tmp_path / "problems.jsonl", limit=5) == records[:5]
    verifiable.write_problems([Addition(47, 38)], tmp_path / "sums.jsonl")
    assert verifiable.read_problems(tmp_path / "sums.jsonl") == [
        {"question": "What is 47 + 38?", "answer": "85", "a": 47, "b": 38}]
