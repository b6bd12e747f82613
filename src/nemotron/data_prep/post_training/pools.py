"""Candidate pools: named, readable predicates over the normalized schema.

A pool is a subset of normalized records that one selection policy will look at (score, keep the
middle of the NLL distribution, diversify). Pools may overlap: a tool-calling math solution with a
long reasoning trace is in `tool_use` and in `reasoning`. Adding a pool is writing one predicate:

    from nemotron.data_prep.post_training.pools import pool

    @pool("short_chat", "chat answers under 200 characters")
    def short_chat(record):
        return record["meta_domain"] == "chat" and len(record["text"]) - record["completion_start"] < 200

(put it in a module and pass `--pool-modules my_pools` to the pools step, which imports it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nemotron.errors import NemotronError

Record = dict[str, Any]


@dataclass(frozen=True)
class Pool:
    name: str
    description: str
    predicate: Callable[[Record], bool]


POOLS: dict[str, Pool] = {}


def pool(name: str, description: str) -> Callable[[Callable[[Record], bool]], Callable[[Record], bool]]:
    """Register `predicate` as the pool `name` (a decorator)."""

    def register(predicate: Callable[[Record], bool]) -> Callable[[Record], bool]:
        POOLS[name] = Pool(name, description, predicate)
        return predicate

    return register


@pool("high_correctness", "meta_correctness >= 0.9 (verified, matching, or judge-kept)")
def high_correctness(record: Record) -> bool:
    return record["meta_correctness"] is not None and record["meta_correctness"] >= 0.9


@pool("tool_use", "at least one tool call")
def tool_use(record: Record) -> bool:
    return record["meta_tool_use"]["calls"] > 0


@pool("reasoning", "has an analysis (reasoning) message")
def reasoning(record: Record) -> bool:
    return record["meta_reasoning"]["present"]


@pool("proof", "Lean 4 proofs")
def proof(record: Record) -> bool:
    return record["meta_domain"] == "math_proofs"


@pool("hard", "meta_difficulty_bin == high")
def hard(record: Record) -> bool:
    return record["meta_difficulty_bin"] == "high"


@pool("multi_turn", "more than one user turn")
def multi_turn(record: Record) -> bool:
    return record["meta_num_turns"] > 1


def load_pool_modules(modules: tuple[str, ...]) -> None:
    """Import the user's modules that register more pools."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise NemotronError(f"cannot import pool module {name!r} ({error}); is it on PYTHONPATH?") from None


def resolve_pools(names: tuple[str, ...]) -> list[Pool]:
    """The named pools (all registered ones when `names` is empty), or an error naming the unknown one."""
    unknown = [name for name in names if name not in POOLS]
    if unknown:
        raise NemotronError(f"unknown pool(s) {', '.join(unknown)}; known: {', '.join(sorted(POOLS))} "
                            "(add one with @pool in a module passed to --pool-modules)")
    return [POOLS[name] for name in (names or sorted(POOLS))]
