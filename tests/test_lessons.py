"""A stage's lesson (`nemotron.evaluation.lessons`): the paired gain over the same held-out items."""

from __future__ import annotations

import json
import math

import pytest

from nemotron.errors import NemotronError
from nemotron.evaluation.lessons import (
    LESSON_FIELDS,
    changed_answers,
    flipped,
    lesson,
    lesson_items,
    pooled_lesson,
    verdict,
)


def test_the_gain_is_the_mean_paired_difference_with_its_standard_error():
    record = lesson("exact match", [0, 1, 0, 0], [1, 1, 0.5, 0])  # differences 1, 0, 0.5, 0
    assert tuple(record) == LESSON_FIELDS
    assert (record["before"], record["after"], record["gain"], record["n"]) == (0.25, 0.625, 0.375, 4)
    spread = math.sqrt(((1 - 0.375) ** 2 + 2 * 0.375**2 + 0.125**2) / 3)
    assert record["standard_error"] == pytest.approx(spread / 2)


def test_pairing_cancels_what_the_items_share():
    """Items of very different difficulty, each improved by about the same amount: an unpaired standard
    error would drown the gain in the spread between items; the paired one does not."""
    before = [1.0, 5.0, 9.0, 3.0]
    record = lesson("loss", before, [b - 0.5 + 0.01 * i for i, b in enumerate(before)], higher_is_better=False)
    assert record["gain"] == pytest.approx(0.485) and record["standard_error"] < 0.01
    assert verdict(record) == "helped: gain > 2 SE"


def test_for_a_lower_is_better_measure_a_fall_is_a_gain():
    record = lesson("loss", [6.0, 6.2], [4.0, 4.1], higher_is_better=False)
    assert record["gain"] == pytest.approx(2.05) and record["after"] < record["before"]
    hurt = lesson("loss", [4.0, 4.1, 4.0], [6.0, 6.2, 6.1], higher_is_better=False)
    assert hurt["gain"] < 0 and verdict(hurt) == "hurt: loss > 2 SE"


def test_a_gain_within_two_standard_errors_is_no_clear_change():
    assert verdict(lesson("reward", [0, 1, 0, 1], [1, 0, 1, 0])) == "no clear change"  # gain 0
    assert verdict(lesson("reward", [0, 0, 0, 0], [0, 0, 0, 0])) == "no clear change"  # nothing moved
    assert verdict(lesson("reward", [0, 0, 1, 0], [1, 0, 1, 0])) == "no clear change"  # +0.25 ± 0.25


def test_flipped_items_are_the_first_k_in_item_order():
    before = [False, True, False, True, False, False]
    after = [True, False, True, True, False, True]
    assert flipped(before, after, k=2) == ([0, 2], [1])
    rows = [{"question": f"q{i}"} for i in range(6)]
    changed = changed_answers(before, after, rows, k=2)
    assert (changed["num_fixed"], changed["num_broken"]) == (3, 1)
    assert changed["fixed"] == [rows[0], rows[2]] and changed["broken"] == [rows[1]]


def test_mismatched_empty_or_missing_scores_are_one_clear_error():
    with pytest.raises(NemotronError, match="one value per held-out item"):
        lesson("m", [1, 2], [1, 2, 3])
    with pytest.raises(NemotronError, match="no held-out items"):
        lesson("m", [], [])
    with pytest.raises(NemotronError, match="not finite"):
        lesson("m", [1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(NemotronError, match="compare the same held-out items"):
        flipped([True], [True, False])


def test_the_kept_items_give_back_the_lesson_and_compare_two_runs_item_for_item():
    """An artifact keeps `lesson_items` (JSON): the lesson recomputes from them exactly, whatever the per-item
    values were (bools, numpy floats), and two runs of a stage compare paired through their "after" values."""
    import numpy as np

    base, run_a, run_b = [False] * 6, [True, True, True, True, False, True], [True, False, True, True, False, False]
    items = json.loads(json.dumps(lesson_items(base, run_a)))
    assert items == {"before": [0.0] * 6, "after": [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]}
    assert lesson("m", **items) == lesson("m", base, run_a)
    losses = np.array([2.5, 3.25, 1.125], dtype=np.float32)
    kept = json.loads(json.dumps(lesson_items(losses, losses * 0.5)))
    assert lesson("nll", **kept, higher_is_better=False) == lesson("nll", losses, losses * 0.5, higher_is_better=False)
    change = lesson("m", items["after"], lesson_items(base, run_b)["after"])  # run b against run a, paired
    assert change["gain"] == pytest.approx(-2 / 6) and verdict(change) == "no clear change"  # 2 of 6 flipped



def test_a_pooled_lesson_weighs_every_token_the_same_with_the_ratio_standard_error():
    """Per-item sums over different token counts: before and after are sums over all tokens (a one-token item
    weighs a tenth of a ten-token one), and the standard error is the ratio estimator's, which is the plain
    paired one when every item has the same count."""
    import numpy as np

    before, after, counts = [20.0, 3.0, 9.0], [10.0, 2.0, 6.0], [10, 1, 4]
    record = pooled_lesson("nll", before, after, counts)
    assert tuple(record) == LESSON_FIELDS
    assert (record["before"], record["after"], record["gain"], record["n"]) == pytest.approx((32 / 15, 18 / 15,
                                                                                              14 / 15, 3))
    residuals = np.array([10.0, 1.0, 3.0]) - 14 / 15 * np.array(counts)
    assert record["standard_error"] == pytest.approx(math.sqrt(3 / 2 * (residuals**2).sum()) / 15)
    even = pooled_lesson("nll", [4.0, 6.0, 3.0], [2.0, 2.0, 2.0], [2, 2, 2])  # per token: 2, 3, 1.5 -> 1, 1, 1
    plain = lesson("nll", [2.0, 3.0, 1.5], [1.0, 1.0, 1.0], higher_is_better=False)
    assert even == pytest.approx(plain)
    with pytest.raises(NemotronError, match="token counts"):
        pooled_lesson("nll", before, after, [1, 2])
