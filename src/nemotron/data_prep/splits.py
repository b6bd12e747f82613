"""Deterministic train / valid / test splits that never leak a held-out question into training.

Two ideas, both standard practice:

1. Split by a seeded hash of each item's id, not by shuffling. `split_of(id, ratios, seed)` maps
   sha256(seed, id) to a number in [0, 1) and cuts it at the cumulative ratios. An item's split then
   depends only on its own id and the seed: adding or removing other items never moves it, and the
   same data + seed always gives the same split (the way Megatron / NeMo data prep assigns documents).

2. Keep related items together. A chat corpus often asks one question several times with different
   answers ("Tell me a joke." x 30 in chatterbot). If one copy lands in test and another in train,
   the test measures memory, not generalisation: the contamination problem that benchmark papers
   check with n-gram overlap (GPT-3, Brown et al., 2020, appendix C). `split_grouped` first splits
   by item, then finds every group (e.g. the normalized question) that ended up in several splits
   and moves the whole group to the split that holds most of its members (ties go to the more
   held-out split: test, then valid). Majority moves as few items as possible, so the split ratios
   stay close to the ones asked for. Every move is counted, so the artifact says what happened.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from nemotron.errors import NemotronError

T = TypeVar("T")
SPLITS = ("train", "valid", "test")
# Tie-break when a group is split evenly: the held-out side wins, so a held-out set is not emptied.
HELD_OUT_RANK = {"train": 0, "valid": 1, "test": 2}


def check_ratios(ratios: Sequence[float]) -> tuple[float, float, float]:
    """(train, valid, test) shares: three non-negative numbers summing to 1."""
    if len(ratios) != 3 or any(r < 0 for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6:
        raise NemotronError(
            f"split ratios {list(ratios)} must be three non-negative shares (train, valid, test) "
            "summing to 1, e.g. 0.8 0.1 0.1"
        )
    return tuple(float(r) for r in ratios)  # type: ignore[return-value]


def split_of(item_id: str, ratios: Sequence[float], seed: int) -> str:
    """The split of one item: sha256(seed, id) as a number in [0, 1), cut at the cumulative ratios."""
    digest = hashlib.sha256(f"{seed}\0{item_id}".encode()).digest()
    position = int.from_bytes(digest[:8], "big") / 2**64
    edge = 0.0
    for split, ratio in zip(SPLITS, ratios):
        edge += ratio
        if position < edge:
            return split
    return next(split for split, ratio in zip(reversed(SPLITS), reversed(ratios)) if ratio > 0)


@dataclass
class SplitReport:
    """What `split_grouped` did; `as_metrics()` goes into an artifact's metrics."""

    by_hash: dict[str, int] = field(default_factory=dict)  # items per split before the leak repair
    final: dict[str, int] = field(default_factory=dict)  # items per split after it
    groups_repaired: int = 0  # groups that had members in more than one split
    moved: dict[str, int] = field(default_factory=dict)  # "train->test": n items moved

    def as_metrics(self) -> dict:
        return {
            "split_by_hash": self.by_hash,
            "split_final": self.final,
            "split_groups_repaired": self.groups_repaired,
            "split_moved": self.moved,
            "split_moved_total": sum(self.moved.values()),
        }


def split_grouped(
    items: Sequence[T],
    id_of: Callable[[T], str],
    group_of: Callable[[T], str],
    ratios: Sequence[float],
    seed: int,
) -> tuple[dict[str, list[T]], SplitReport]:
    """Split `items` by seeded hash of `id_of(item)`, then move groups so each lives in one split.

    Returns ({"train": [...], "valid": [...], "test": [...]}, report); each list keeps input order.
    """
    ratios = check_ratios(ratios)
    assigned = [split_of(id_of(item), ratios, seed) for item in items]
    homes, report = repair_groups(assigned, [group_of(item) for item in items])
    splits: dict[str, list[T]] = {split: [] for split in SPLITS}
    for item, home in zip(items, homes):
        splits[home].append(item)
    return splits, report


def repair_groups(assigned: Sequence[str], groups: Sequence[Hashable]) -> tuple[list[str], SplitReport]:
    """Each item's final split, given its split by hash and its group: every group that landed in
    several splits moves wholly to the one holding most of it (ties: the more held-out split).

    Needs only a split and a group key per item, so a driver can run it on signatures (hashes of the
    groups) without the items themselves (`data_prep.stages.conversations`).
    """
    report = SplitReport(by_hash=_count(assigned))
    members: dict[Hashable, Counter[str]] = defaultdict(Counter)
    for group, split in zip(groups, assigned, strict=True):
        members[group][split] += 1
    home = {
        group: max(counts, key=lambda split: (counts[split], HELD_OUT_RANK[split]))
        for group, counts in members.items()
    }
    report.groups_repaired = sum(1 for counts in members.values() if len(counts) > 1)
    homes = [home[group] for group in groups]
    moved = Counter(f"{split}->{target}" for split, target in zip(assigned, homes) if split != target)
    report.moved = dict(sorted(moved.items()))
    report.final = _count(homes)
    return homes, report


def _count(assigned: list[str]) -> dict[str, int]:
    counts = Counter(assigned)
    return {split: counts[split] for split in SPLITS}
