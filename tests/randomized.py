"""Seeded random cases against a real peer: how many, which seed failed, and where the first difference is.

Each randomized test has two tiers over the same case generator: a fast tier (a few hundred cases, in
`make test-fast`) and a deep tier marked slow (thousands). `<NAME>_CASES` sets the deep tier's count,
`<NAME>_SEED` replays a single case. A failure names its seed, so it can be replayed alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence


def seeds(name: str, count: int) -> range | list[int]:
    """The seeds to run: `<NAME>_SEED` alone when set, else 0..count-1."""
    replay = os.environ.get(f"{name}_SEED")
    return [int(replay)] if replay else range(count)


def deep_count(name: str, default: int) -> int:
    return int(os.environ.get(f"{name}_CASES", default))


def check_every_seed(name: str, count: int, check: Callable[[int], None]) -> None:
    """Run `check(seed)` for every seed; the first failure is re-raised with its seed and how to replay it."""
    for seed in seeds(name, count):
        try:
            check(seed)
        except AssertionError as error:
            raise AssertionError(f"seed {seed} (replay with {name}_SEED={seed}): {error}") from None


def first_difference(ours: Sequence, theirs: Sequence, what: str = "item") -> str | None:
    """None when equal, else the first differing position with both values and both lengths."""
    for position, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return f"{what} {position}: ours {a!r}, theirs {b!r} (lengths {len(ours)}, {len(theirs)})"
    if len(ours) != len(theirs):
        return f"lengths differ: ours {len(ours)}, theirs {len(theirs)} (equal up to {min(len(ours), len(theirs))})"
    return None
