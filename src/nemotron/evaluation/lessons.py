"""A stage's lesson: what it changed on held-out items, with the noise beside it, in one place.

Every evaluation step of the recipes scores the stage's model AND the model it started from (for
stage 0: a unigram baseline) on the same held-out items, one number per item (a window's loss, a
question's exact match, a pair's preference). `lesson(measure, before, after)` turns the two arrays into
the record every evaluation artifact keeps as `metrics["lesson"]`:

    {"measure": str, "before": float, "after": float, "gain": float, "standard_error": float, "n": int}

`before` and `after` are the means over the items; `gain` is positive when the stage helped (after -
before for a higher-is-better measure, before - after for a lower-is-better one); the standard error is
the paired one, from the per-item differences (the same items, so most item-to-item variation cancels):
std(difference, ddof=1) / sqrt(n). `pooled_lesson(measure, before_sums, after_sums, counts)` is the same record
for a measure pooled over the items' tokens (a mean NLL per token: every token weighs the same, not every
item), its paired standard error that of a ratio of sums. `verdict(lesson)` reads it in words, and
`flipped(...)` picks, by a fixed rule (the first `k` in item order), the held-out items whose correctness
this stage changed: the answers it fixed and the ones it broke; `changed_chances(...)` does the same for
a lesson that is a probability (the items whose chance of a right answer moved most).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from nemotron.errors import NemotronError

LESSON_FIELDS = ("measure", "before", "after", "gain", "standard_error", "n")


def lesson(measure: str, before: Sequence[float], after: Sequence[float], *, higher_is_better: bool = True) -> dict:
    """The lesson record of two per-item arrays over the same held-out items (paired standard error)."""
    before_values = np.asarray(before, dtype=np.float64)
    after_values = np.asarray(after, dtype=np.float64)
    if before_values.shape != after_values.shape or before_values.ndim != 1:
        raise NemotronError(f"lesson {measure!r}: before has shape {before_values.shape} and after "
                            f"{after_values.shape}; pass one value per held-out item for both models")
    n = len(before_values)
    if n == 0:
        raise NemotronError(f"lesson {measure!r}: no held-out items were scored")
    if not (np.isfinite(before_values).all() and np.isfinite(after_values).all()):
        raise NemotronError(f"lesson {measure!r}: a per-item value is not finite (NaN or inf); "
                            "every held-out item must have a score")
    difference = after_values - before_values if higher_is_better else before_values - after_values
    standard_error = float(difference.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    return {
        "measure": measure,
        "before": float(before_values.mean()),
        "after": float(after_values.mean()),
        "gain": float(difference.mean()),
        "standard_error": standard_error,
        "n": n,
    }


def pooled_lesson(measure: str, before_sums: Sequence[float], after_sums: Sequence[float], counts: Sequence[int],
                  *, higher_is_better: bool = False) -> dict:
    """The lesson record of a per-token measure pooled over items (item i: the two models' sums over its
    `counts[i]` tokens): before and after are sum / total count, so a short item weighs as little as its
    tokens. The paired standard error is the ratio estimator's (the delta method, as for a cluster sample):
    with d_i the item's summed difference and g the gain, sqrt(n / (n - 1) * sum((d_i - g * count_i)^2)) /
    sum(count_i)."""
    weights = np.asarray(counts, dtype=np.float64)
    record = lesson(measure, before_sums, after_sums, higher_is_better=higher_is_better)  # checks the shapes
    if len(weights) != record["n"] or weights.sum() <= 0:
        raise NemotronError(f"lesson {measure!r}: {len(weights)} token counts for {record['n']} items, "
                            f"{weights.sum():g} tokens in all; pass each item's scored tokens")
    before, after = np.asarray(before_sums, dtype=np.float64), np.asarray(after_sums, dtype=np.float64)
    difference = after - before if higher_is_better else before - after
    gain = float(difference.sum() / weights.sum())
    n = record["n"]
    spread = float(np.sum((difference - gain * weights) ** 2))
    return {**record, "before": float(before.sum() / weights.sum()), "after": float(after.sum() / weights.sum()),
            "gain": gain, "standard_error": math.sqrt(n / (n - 1) * spread) / float(weights.sum()) if n > 1 else 0.0}


def lesson_items(before: Sequence[float], after: Sequence[float]) -> dict:
    """The per-item values a lesson was computed from, as an artifact keeps them (`metrics["lesson_items"]`), so
    that two runs of one stage can be compared item for item: `lesson(measure, one["after"], other["after"])`
    is their paired difference, and `verdict` reads it (`benchmarks/bench_sft_length.py` judges so whether SFT's
    length changes its result)."""
    return {"before": [float(value) for value in before], "after": [float(value) for value in after]}


def verdict(record: dict) -> str:
    """helped (gain above two standard errors), hurt (below minus two), else no clear change."""
    gain, error = record["gain"], record["standard_error"]
    if gain > 2 * error and gain > 0:
        return "helped: gain > 2 SE"
    if gain < -2 * error and gain < 0:
        return "hurt: loss > 2 SE"
    return "no clear change"


def flipped(before_correct: Sequence[bool], after_correct: Sequence[bool], k: int = 5) -> tuple[list[int], list[int]]:
    """(fixed, broken): the first `k` item indices, in item order, that this stage made right / made wrong."""
    if len(before_correct) != len(after_correct):
        raise NemotronError(f"{len(before_correct)} items before and {len(after_correct)} after; "
                            "compare the same held-out items")
    pairs = list(zip(before_correct, after_correct))
    fixed = [i for i, (b, a) in enumerate(pairs) if a and not b]
    broken = [i for i, (b, a) in enumerate(pairs) if b and not a]
    return fixed[:k], broken[:k]


def changed_answers(before_correct: Sequence[bool], after_correct: Sequence[bool], rows: Sequence[dict],
                    k: int = 5) -> dict:
    """What an artifact records for the report card's answers table: how many items were fixed and broken,
    and the first `k` of each (the row of each, e.g. {"question", "expected", "before", "after"})."""
    fixed, broken = flipped(before_correct, after_correct, k=len(rows))
    return {"rule": f"the first {k} held-out items, in item order, whose correctness changed",
            "num_fixed": len(fixed), "num_broken": len(broken),
            "fixed": [rows[i] for i in fixed[:k]], "broken": [rows[i] for i in broken[:k]]}


def changed_chances(before: Sequence[float], after: Sequence[float], rows: Sequence[dict], k: int = 5,
                    by: float = 0.1) -> dict:
    """The answers table of a stage whose lesson is a probability (the chance that a sampled answer is right):
    how many held-out items it raised by more than `by` ("fixed") and lowered by more than `by` ("broken"),
    and the `k` it raised most and the `k` it lowered most (ties in item order), their rows."""
    if len(before) != len(after) or len(before) != len(rows):
        raise NemotronError(f"{len(before)} items before, {len(after)} after and {len(rows)} rows; "
                            "compare the same held-out items")
    change = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    order = np.argsort(-change, kind="stable")
    raised = [int(i) for i in order if change[i] > by]
    lowered = [int(i) for i in order[::-1] if change[i] < -by]
    return {"rule": f"the {k} held-out items whose chance of a right answer rose most, and the {k} where it fell "
                    f"most (\"fixed\": up by more than {by:g}; \"broken\": down by more than {by:g})",
            "num_fixed": len(raised), "num_broken": len(lowered),
            "fixed": [rows[i] for i in raised[:k]], "broken": [rows[i] for i in lowered[:k]]}
