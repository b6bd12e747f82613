"""Tasks whose answers a program can check, the imperfect teacher that demonstrates them, and the checks.

Reinforcement learning from verifiable rewards (RLVR; DeepSeek-R1, arXiv:2501.12948; Nemotron 3 Nano's
RL stage, arXiv:2512.20848 section 4) and preference data judged by a verifier need prompts whose
answers a program can check, with no judge model. Two such tasks, one per recipe, small enough for a CPU:

- `Addition` (nano3): "What is 47 + 38?" with a worked solution, column by column with carries, as a
  nano3 assistant turn (`reasoning_content` + `content`);
- `Largest` (nano2): "Which is the largest: 3, 8, 5?", answered with one number.

Each problem is asked in one of several phrasings and spacings (`PHRASINGS`, drawn per problem from the
seed), so a learner's own wording in the chat resembles one the model was trained on. `addition_problems`
and `largest_problems` make distinct seeded problems; `split_problems` keeps train and held-out problems
disjoint by the numbers asked (not the wording).

**The teacher** (`teacher_messages`). SFT learns from demonstrations, and real demonstrations come from
imperfect teachers (people, or a larger model). Ours makes ONE plausible mistake in a stated share of its
answers (`error_rate`, drawn per problem from the seed), the kind a hurried person makes:
- Addition, a dropped carry: it writes "carry 1" and then leaves the carry out of the next column (or
  never writes the final carry digit); the rest of its working is right;
- Largest, a near miss: it answers the second-largest number.
SFT imitates its teacher, mistakes included; the checker tells right from wrong, which is what stage 2
uses to fix them (nano2: DPO on pairs of the SFT model's own samples; nano3: GRPO's reward).

Checks, from the text alone:
- `reward(completion, answer)` (nano3, reasoning on): 1.0 for the correct final answer, plus FORMAT_BONUS
  when the completion is well formed (closed its `</think>` and gave exactly one integer after it), so a
  policy is first pulled towards the format and then towards the right number;
- `is_right(completion, answer)` (nano2): the completion's one integer is the answer.
- `read_problems(path, limit)`: the problems a curation step wrote (one JSON object per line), capped;
  `score(reward_fn, completions, answers)`: any reward function, an exception in it one NemotronError.

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

from nemotron import atomic
from nemotron.errors import NemotronError

FORMAT_BONUS = 0.1
_INTEGER = re.compile(r"-?\d+")

# How a problem may be asked; `phrasing` indexes these (0 is the canonical wording). The answers and
# the worked steps never change with the wording.
PHRASINGS = {
    "addition": ("What is {a} + {b}?", "What is {a}+{b}?", "What's {a} plus {b}?", "{a} + {b} = ?", "Add {a} and {b}.",
                 "How much is {a} + {b}?", "Compute {a} + {b}", "what is {a} + {b}"),
    "largest": ("Which is the largest: {numbers}?", "What is the largest number in {numbers}?",
                "Which number is biggest: {numbers}?", "Largest of {numbers}?", "Find the largest number: {numbers}",
                "What's the biggest of {numbers}?", "which is largest {numbers}"),
}
SEPARATORS = (", ", " ", ",")  # how a Largest problem's numbers are listed
# Tokens a model may write to answer a Largest problem (a number and <|im_end|>, a few spare): what stage-2
# curation samples and stage-2 evaluation generates, so the pairs are made of the answers evaluation sees.
SKILL_ANSWER_TOKENS = 6


# The kinds of wrong answer to an Addition, as `Addition.mistake` names them.
ADDITION_MISTAKES = ("dropped_carry", "added_carry", "other")


@dataclass(frozen=True)
class Addition:
    a: int
    b: int
    phrasing: int = 0

    @property
    def key(self) -> tuple:
        """What makes two problems the same problem: the numbers, not the wording."""
        return ("addition", self.a, self.b)

    @property
    def question(self) -> str:
        return PHRASINGS["addition"][self.phrasing].format(a=self.a, b=self.b)

    @property
    def answer(self) -> str:
        return str(self.a + self.b)

    @property
    def carries(self) -> int:
        """How many carries the column addition makes (each a place a dropped carry can happen)."""
        return self.worked()[0].count(", carry 1")

    @property
    def reasoning(self) -> str:
        """Column addition, right to left, naming each carry: the worked steps SFT teaches."""
        return self.worked()[0]

    def worked(self, drop: int = 0) -> tuple[str, str]:
        """(the worked steps, the answer they reach); `drop` = k > 0 forgets the k-th carry (1-based): the
        teacher writes it ("carry 1", or a final carry it never writes down) and leaves it out."""
        steps, carry, digits, seen = [], 0, [], 0
        da, db = str(self.a)[::-1], str(self.b)[::-1]
        for place in range(max(len(da), len(db))):
            x = int(da[place]) if place < len(da) else 0
            y = int(db[place]) if place < len(db) else 0
            total = x + y + carry
            carried = f" + {carry}" if carry else ""
            steps.append(f"{x} + {y}{carried} = {total}, write {total % 10}" + (", carry 1" if total >= 10 else ""))
            digits.append(total % 10)
            carry = total // 10
            if carry:
                seen += 1
                carry = 0 if seen == drop else carry
        if carry:
            steps.append("write the carry 1")
            digits.append(1)
        answer = str(int("".join(map(str, reversed(digits)))))
        return "; ".join(steps) + f". So {self.a} + {self.b} = {answer}.", answer

    @property
    def dropped_carry_answers(self) -> set[str]:
        """Every answer the teacher's mistake gives (one carry dropped, whichever): what a model that imitated
        the mistake writes."""
        return {self.worked(drop)[1] for drop in range(1, self.carries + 1)}

    @property
    def added_carry_answers(self) -> set[str]:
        """Every answer a carry that is not there gives: 1 carried into a column the one before it carried
        nothing into (or a leading 1 after the last column), which adds 10^k to the sum (86 + 90 -> 186,
        11 + 15 -> 36): the mistake RL was seen to teach, the mirror of the teacher's dropped carry."""
        steps = self.worked()[0].split(". So ")[0].split("; ")
        carried = [", carry 1" in step for step in steps if not step.startswith("write the carry")]
        right = self.a + self.b
        return {str(right + 10**place) for place in range(1, len(carried) + 1) if not carried[place - 1]}

    def mistake(self, answer: str | None) -> str | None:
        """What kind of answer `answer` is: None when right, else "dropped_carry" (the teacher's mistake),
        "added_carry" (a carry that is not there) or "other" (anything else, no answer included)."""
        if answer == self.answer:
            return None
        if answer in self.dropped_carry_answers:
            return "dropped_carry"
        return "added_carry" if answer in self.added_carry_answers else "other"

    def messages(self, with_reasoning: bool = True, drop: int = 0) -> list[dict]:
        """The problem as a nano3 conversation: the question and the worked answer (reasoning optional);
        `drop` as in `worked`."""
        reasoning, answer = self.worked(drop)
        turn = {"role": "assistant", "content": answer}
        if with_reasoning:
            turn["reasoning_content"] = reasoning
        return [{"role": "user", "content": self.question}, turn]

    def record(self) -> dict:
        return {"question": self.question, "answer": self.answer, "a": self.a, "b": self.b}


@dataclass(frozen=True)
class Largest:
    numbers: tuple[int, ...]
    phrasing: int = 0
    separator: int = 0

    @property
    def key(self) -> tuple:
        return ("largest", *self.numbers)

    @property
    def question(self) -> str:
        listed = SEPARATORS[self.separator].join(map(str, self.numbers))
        return PHRASINGS["largest"][self.phrasing].format(numbers=listed)

    @property
    def answer(self) -> str:
        return str(max(self.numbers))

    @property
    def near_miss(self) -> str:
        """The teacher's mistake: the second-largest number."""
        return str(sorted(self.numbers)[-2])

    def messages(self, mistake: bool = False) -> list[dict]:
        return [{"role": "user", "content": self.question},
                {"role": "assistant", "content": self.near_miss if mistake else self.answer}]

    def record(self) -> dict:
        return {"question": self.question, "answer": self.answer, "numbers": list(self.numbers),
                "near_miss": self.near_miss}


Problem = Addition | Largest


def addition_problems(n: int, seed: int, digits: int = 2) -> list[Addition]:
    """`n` distinct seeded problems with operands of `digits` digits, each in a seeded wording."""
    if digits < 1 or n < 1:
        raise NemotronError(f"addition_problems: need n >= 1 and digits >= 1, got n={n}, digits={digits}")
    low, high = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    if n > (high - low + 1) ** 2:
        raise NemotronError(f"addition_problems: only {(high - low + 1) ** 2} distinct {digits}-digit problems "
                            f"exist, asked for {n}; lower n or raise digits")
    rng = random.Random(seed)
    return _distinct(n, lambda: Addition(rng.randint(low, high), rng.randint(low, high),
                                         rng.randrange(len(PHRASINGS["addition"]))))


def largest_problems(n: int, seed: int, sizes: tuple[int, int] = (3, 6)) -> list[Largest]:
    """`n` distinct seeded lists of distinct digits, `sizes` long (inclusive), each in a seeded wording.

    The largest number is drawn first, uniformly over what the list's length allows, so "9" is not the
    answer of most problems (as it would be for lists drawn at random) and a model must read the list."""
    low, high = sizes
    if not 2 <= low <= high <= 10 or n < 1:
        raise NemotronError(f"largest_problems: need n >= 1 and 2 <= sizes <= 10, got n={n}, sizes={sizes}")
    possible = sum(math.perm(10, size) for size in range(low, high + 1))  # ordered lists of distinct digits
    if n > possible:  # refused at once, not after 100 x n draws
        raise NemotronError(f"largest_problems: {n} problems asked, but only {possible} distinct lists of "
                            f"{low}-{high} digits exist; ask for fewer, or allow longer lists")
    rng = random.Random(seed)

    def draw() -> Largest:
        size = rng.randint(low, high)
        top = rng.randint(size - 1, 9)
        numbers = rng.sample(range(top), size - 1) + [top]
        rng.shuffle(numbers)
        return Largest(tuple(numbers), rng.randrange(len(PHRASINGS["largest"])), rng.randrange(len(SEPARATORS)))

    return _distinct(n, draw)


def _distinct(n: int, draw: Callable[[], Problem]) -> list:
    """`n` problems from `draw`, none asking what an earlier one asked (however it is worded)."""
    seen, problems = set(), []
    for _ in range(100 * n):
        problem = draw()
        if problem.key not in seen:
            seen.add(problem.key)
            problems.append(problem)
            if len(problems) == n:
                return problems
    raise NemotronError(f"only {len(problems)} distinct problems found for the {n} asked; ask for fewer")


def split_problems(problems: Sequence[Problem], held_out: float, seed: int) -> tuple[list, list]:
    """(train, held-out): a seeded share of the problems, so no held-out question is ever trained on."""
    if not 0 < held_out < 1:
        raise NemotronError(f"held_out={held_out} must be between 0 and 1 (a share of the problems)")
    order = list(problems)
    random.Random(seed).shuffle(order)
    cut = max(1, round(len(order) * held_out))
    return order[cut:], order[:cut]


def teacher_messages(problem: Problem, error_rate: float, seed: int, **options) -> tuple[list[dict], str | None]:
    """The teacher's demonstration of `problem` as a conversation, and the mistake it holds (None: right).

    With probability `error_rate`, drawn per problem from `seed` and the problem itself (so a problem's
    demonstration does not change when others are added), the teacher makes its one mistake:
    "dropped_carry" (Addition with at least one carry; which carry is drawn too) or "near_miss" (Largest).
    An Addition without a carry is always right. `options` go to `Addition.messages` (`with_reasoning`)."""
    if not 0 <= error_rate <= 1:
        raise NemotronError(f"teacher error rate {error_rate} must be between 0 and 1 (a share of the answers)")
    rng = random.Random(f"{seed}:{problem.key}")
    errs = rng.random() < error_rate
    if isinstance(problem, Largest):
        return problem.messages(mistake=errs), "near_miss" if errs else None
    if errs and problem.carries:
        return problem.messages(drop=rng.randint(1, problem.carries), **options), "dropped_carry"
    return problem.messages(**options), None


def read_problems(path: Path, limit: int | None = None) -> list[dict]:
    """The first `limit` problems (all when None) of a problems JSONL written by a curation step: dicts
    with "question" and "answer" (and the numbers)."""
    problems = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return problems[:limit] if limit else problems


def write_problems(problems: Sequence[Problem], path: Path) -> None:
    """One `record()` per line, in order (what `read_problems` reads)."""
    atomic.write_text(path, "".join(json.dumps(p.record()) + "\n" for p in problems))


def final_answer(completion: str) -> str | None:
    """The answer a completion gives: the one integer after `</think>`; None if it is not well formed
    (the thoughts never closed, or no single integer follows)."""
    if "</think>" not in completion:
        return None
    return only_integer(completion.rsplit("</think>", 1)[1])


def only_integer(text: str) -> str | None:
    """The one integer in `text` ("9", "It is 9."); None when there is none or more than one."""
    numbers = _INTEGER.findall(text)
    return numbers[0] if len(numbers) == 1 else None


def is_right(completion: str, answer: str) -> bool:
    """nano2's check: the completion names exactly one number, and it is the answer."""
    return only_integer(completion) == answer


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
