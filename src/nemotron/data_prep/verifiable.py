"""A task whose answers a program can check: seeded multi-digit addition with worked steps, and its rewards.

Reinforcement learning from verifiable rewards (RLVR; DeepSeek-R1, arXiv:2501.12948; Nemotron 3 Nano's
RL stage, arXiv:2512.20848 section 4) needs prompts whose completions a checker can score without a
judge model. This module makes such a task small enough for a CPU:

- `addition_problems(n, seed, digits)`: "What is 47 + 38?" with a worked solution, column by column
  with carries, as a nano3 assistant turn (`reasoning_content` + `content`); the same seed gives the
  same problems. `split_problems` keeps train and held-out problems disjoint by the numbers asked.
- `reward(completion, answer)`: what a GRPO step optimises, from the text alone:
  1.0 for the correct final answer, plus FORMAT_BONUS when the completion is well formed (closed its
  `</think>` and gave exactly one integer after it), so a policy is first pulled towards the format
  and then towards the right number.
- `read_problems(path, limit)`: the problems a curation step wrote (one JSON object per line), capped.
- `score(reward_fn, completions, answers)`: calls any reward function, and turns an exception inside it
  into one NemotronError naming the function and the completion, instead of a traceback mid-run.

torch-free: data curation uses it.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nemotron.errors import NemotronError

FORMAT_BONUS = 0.1
_INTEGER = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def question(self) -> str:
        return f"What is {self.a} + {self.b}?"

    @property
    def answer(self) -> str:
        return str(self.a + self.b)

    @property
    def reasoning(self) -> str:
        """Column addition, right to left, naming each carry: the worked steps SFT teaches."""
        steps, carry = [], 0
        da, db = str(self.a)[::-1], str(self.b)[::-1]
        for place in range(max(len(da), len(db))):
            x = int(da[place]) if place < len(da) else 0
            y = int(db[place]) if place < len(db) else 0
            total = x + y + carry
            carried = f" + {carry}" if carry else ""
            steps.append(f"{x} + {y}{carried} = {total}, write {total % 10}" + (", carry 1" if total >= 10 else ""))
            carry = total // 10
        if carry:
            steps.append("write the carry 1")
        return "; ".join(steps) + f". So {self.a} + {self.b} = {self.answer}."

    def messages(self, with_reasoning: bool = True) -> list[dict]:
        """The problem as a nano3 conversation: the question and the worked answer (reasoning optional)."""
        turn = {"role": "assistant", "content": self.answer}
        if with_reasoning:
            turn["reasoning_content"] = self.reasoning
        return [{"role": "user", "content": self.question}, turn]


def addition_problems(n: int, seed: int, digits: int = 2) -> list[Problem]:
    """`n` distinct seeded problems with operands of `digits` digits (deterministic for a seed)."""
    if digits < 1 or n < 1:
        raise NemotronError(f"addition_problems: need n >= 1 and digits >= 1, got n={n}, digits={digits}")
    low, high = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    if n > (high - low + 1) ** 2:
        raise NemotronError(f"addition_problems: only {(high - low + 1) ** 2} distinct {digits}-digit problems "
                            f"exist, asked for {n}; lower n or raise digits")
    rng, seen, problems = random.Random(seed), set(), []
    while len(problems) < n:
        problem = Problem(rng.randint(low, high), rng.randint(low, high))
        if problem not in seen:
            seen.add(problem)
            problems.append(problem)
    return problems


def split_problems(problems: Sequence[Problem], held_out: float, seed: int) -> tuple[list[Problem], list[Problem]]:
    """(train, held-out): a seeded share of the problems, so no held-out question is ever trained on."""
    if not 0 < held_out < 1:
        raise NemotronError(f"held_out={held_out} must be between 0 and 1 (a share of the problems)")
    order = list(problems)
    random.Random(seed).shuffle(order)
    cut = max(1, round(len(order) * held_out))
    return order[cut:], order[:cut]


def read_problems(path: Path, limit: int | None = None) -> list[dict]:
    """The first `limit` problems (all when None) of a problems JSONL written by nano3 stage-1 curation:
    dicts with "question" and "answer" (and the operands)."""
    problems = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return problems[:limit] if limit else problems


def final_answer(completion: str) -> str | None:
    """The answer a completion gives: the one integer after `</think>`; None if it is not well formed
    (the thoughts never closed, or no single integer follows)."""
    if "</think>" not in completion:
        return None
    numbers = _INTEGER.findall(completion.rsplit("</think>", 1)[1])
    return numbers[0] if len(numbers) == 1 else None


def reward(completion: str, answer: str) -> float:
    """1.0 for the correct answer + FORMAT_BONUS for a well-formed completion (see the module docstring)."""
    given = final_answer(completion)
    if given is None:
        return 0.0
    return FORMAT_BONUS + (1.0 if given == answer else 0.0)


def check_reward_function(reward_fn: Callable[[str, str], float]) -> None:
    """Refuse, before any work, a reward function that cannot score text: it is called once on a small
    well-formed completion and must return a finite number, so a broken `--reward-function` is one clear
    line at the start of a run, not a crash after the first generation."""
    score(reward_fn, ["a probe\n</think>\n0"], ["0"])


def score(reward_fn: Callable[[str, str], float], completions: Sequence[str], answers: Sequence[str]) -> list[float]:
    """`reward_fn(completion, answer)` for each pair, as floats; a raise or a non-number is one clear line."""
    name = getattr(reward_fn, "__qualname__", repr(reward_fn))
    rewards = []
    for index, (completion, answer) in enumerate(zip(completions, answers, strict=True)):
        try:
            value = reward_fn(completion, answer)
        except Exception as error:  # noqa: BLE001 (any failure of user code becomes one line)
            raise NemotronError(f"reward function {name} raised {type(error).__name__}: {error} on completion "
                                f"{index} ({completion[:40]!r}); fix the function so it returns a number for "
                                "any text") from None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise NemotronError(f"reward function {name} returned {value!r} for completion {index}; it must return "
                                "a finite number")
        rewards.append(float(value))
    return rewards
