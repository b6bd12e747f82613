"""Multiple-choice evaluation by log-likelihood, the way lm-evaluation-harness scores MMLU-style tasks.

What this module does:
- `build_mc_items(qa_pairs, num_distractors=3, seed)`: turn question/answer pairs into multiple-choice
  items. The true answer competes with distractors drawn (seeded) from the answers of *other* questions;
  a distractor is never the true answer's text nor any answer given elsewhere to the same question.
- `loglikelihood(model, tokenizer, requests)`: for each (context, continuation) pair, the summed
  log-probability of the continuation tokens given the context, and how many tokens that was.
- `mc_accuracy(model, tokenizer, items, render_context=...)`: the model "answers" by picking the choice
  with the highest score; returns accuracy, length-normalised accuracy and per-item details.

How we mirror lm-evaluation-harness 0.4.13 (`lm_eval/api/model.py::TemplateLM._encode_pair` and
`lm_eval/api/task.py::ConfigurableTask.process_results` for `multiple_choice`):
- Tokenization: encode `context + continuation` as one string, encode `context` alone, and take the
  continuation tokens to be the whole encoding past the context's length, so tokens that merge across
  the boundary are scored the way the model would see them. Unlike lm-eval we do *not* move trailing
  whitespace from the context into the continuation: our chat contexts end in the template's
  `<|im_start|>assistant\n`, and that newline must stay in the context so that exactly the answer and
  its `<|im_end|>` are scored (the tokens SFT trains on). Put word-boundary spaces in the continuation.
  Render functions may also return token ids, used as given: the way to score exactly the tokenization
  SFT trained on (`tokenize_prompt(...)` for the context, answer ids + `<|im_end|>` for the choice).
- `accuracy` is lm-eval's `acc`: argmax of the summed log-probability.
- `accuracy_norm` is lm-eval's `acc_norm`: argmax of the summed log-probability divided by the *number of
  characters of the choice text* (not tokens; lm-eval 0.4.13 uses `len(choice)`). Summed log-probs favour
  short answers, since every extra token can only lower the sum; dividing by length removes most of
  that bias, and characters (unlike tokens) do not depend on the tokenizer.
- `accuracy_mutual_info` is lm-eval's `acc_mutual_info` (Holtzman et al., 2021, "Surface Form
  Competition"): argmax of log p(choice | context) - log p(choice | unconditional context), computed only
  when `mc_accuracy` is given an `unconditional_context` (lm-eval 0.4.13's is empty, the BOS/EOS token
  alone: pass `[EOS_ID]` to reproduce it, as tests/test_nano2_evaluation.py does). It removes each
  answer's prior probability, so it asks whether the *question* made the answer more likely. A small
  chat model mostly learns which answers are typical; raw `acc` then stays at chance (measured in the
  stage-1 evaluation docstring) while this score shows the question/answer association it did learn.
Ties go to the first choice (numpy argmax), as in lm-eval.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from nemotron.errors import NemotronError
from nemotron.training.logprobs import Rendered, loglikelihood


@dataclass(frozen=True)
class MCItem:
    """One question with its choices; `choices[answer_index]` is the true answer."""

    question: str
    choices: tuple[str, ...]
    answer_index: int


@dataclass(frozen=True)
class MCItemResult:
    item: MCItem
    logprobs: tuple[float, ...]  # summed log-prob of each choice's continuation tokens
    num_tokens: tuple[int, ...]  # how many continuation tokens each choice had
    predicted: int  # argmax of logprobs
    predicted_norm: int  # argmax of logprobs / len(choice text)
    predicted_mutual_info: int | None = None  # argmax of logprobs - unconditional logprobs, if scored

    @property
    def correct(self) -> bool:
        return self.predicted == self.item.answer_index

    @property
    def correct_norm(self) -> bool:
        return self.predicted_norm == self.item.answer_index


@dataclass(frozen=True)
class MCResult:
    accuracy: float  # lm-eval `acc`
    accuracy_norm: float  # lm-eval `acc_norm` (character-length normalised)
    chance: float  # expected accuracy of guessing uniformly: mean of 1 / number of choices
    items: list[MCItemResult] = field(repr=False)
    accuracy_mutual_info: float | None = None  # lm-eval `acc_mutual_info`, if an unconditional context was given

    def metrics(self, prefix: str = "mc") -> dict[str, float]:
        """The numbers an artifact records, e.g. {"mc_accuracy": .., "mc_accuracy_norm": .., ...}."""
        return {
            f"{prefix}_accuracy": self.accuracy,
            f"{prefix}_accuracy_norm": self.accuracy_norm,
            f"{prefix}_chance": self.chance,
            f"{prefix}_num_items": float(len(self.items)),
        } | ({} if self.accuracy_mutual_info is None else {f"{prefix}_accuracy_mutual_info": self.accuracy_mutual_info})


def build_mc_items(
    qa_pairs: Sequence[tuple[str, str]], num_distractors: int = 3, seed: int = 0
) -> list[MCItem]:
    """One item per (question, answer) pair: the answer plus `num_distractors` other answers, shuffled.

    Distractors are distinct answer texts of other pairs, compared after stripping whitespace. Answers that
    any pair gives to the same question are excluded, since they would be correct too (chat corpora often
    list several answers for one question). Same pairs + seed -> same items.
    """
    if num_distractors < 1:
        raise NemotronError(f"num_distractors={num_distractors} must be at least 1")
    correct_answers: dict[str, set[str]] = {}
    pool: dict[str, str] = {}  # stripped text -> first spelling seen; insertion order keeps it deterministic
    for i, (question, answer) in enumerate(qa_pairs):
        if not question.strip() or not answer.strip():
            raise NemotronError(f"qa pair {i} has an empty question or answer; drop it before building items")
        correct_answers.setdefault(question.strip(), set()).add(answer.strip())
        pool.setdefault(answer.strip(), answer)

    rng = random.Random(seed)
    items = []
    for i, (question, answer) in enumerate(qa_pairs):
        excluded = correct_answers[question.strip()]
        candidates = [text for key, text in pool.items() if key not in excluded]
        if len(candidates) < num_distractors:
            raise NemotronError(
                f"qa pair {i} ({question[:40]!r}) has only {len(candidates)} possible distractors but "
                f"num_distractors={num_distractors}; pass more pairs with other answers or fewer distractors"
            )
        choices = rng.sample(candidates, num_distractors)
        answer_index = rng.randrange(num_distractors + 1)
        choices.insert(answer_index, answer)
        items.append(MCItem(question=question, choices=tuple(choices), answer_index=answer_index))
    return items




def mc_accuracy(
    model: torch.nn.Module,
    tokenizer,
    items: Sequence[MCItem],
    render_context: Callable[[str], Rendered],
    render_choice: Callable[[str], Rendered] = lambda choice: choice,
    *,
    unconditional_context: Rendered | None = None,
    batch_size: int = 8,
) -> MCResult:
    """Score every choice of every item as a continuation of `render_context(question)`.

    Each render function returns text or token ids (see `encode_pair`). `render_choice` turns a choice
    into the scored continuation, e.g. `lambda answer: answer + "<|im_end|>"` after a chat-template
    context. Length normalisation always uses the plain choice text. With `unconditional_context`, each
    distinct choice is also scored after it, for `accuracy_mutual_info`.
    """
    if not items:
        raise NemotronError("no multiple-choice items to evaluate; build some with build_mc_items")
    for i, item in enumerate(items):
        if not all(item.choices) or not 0 <= item.answer_index < len(item.choices):
            raise NemotronError(
                f"multiple-choice item {i} has an empty choice or answer_index {item.answer_index} outside "
                f"its {len(item.choices)} choices; fix the item or rebuild it with build_mc_items"
            )
    requests = [
        (render_context(item.question), render_choice(choice)) for item in items for choice in item.choices
    ]
    scores = iter(loglikelihood(model, tokenizer, requests, batch_size=batch_size))
    prior: dict[str, float] = {}  # choice text -> log p(choice | unconditional context)
    if unconditional_context is not None:
        distinct = list(dict.fromkeys(choice for item in items for choice in item.choices))
        prior_requests = [(unconditional_context, render_choice(choice)) for choice in distinct]
        prior_scores = loglikelihood(model, tokenizer, prior_requests, batch_size=batch_size)
        prior = {choice: logprob for choice, (logprob, _) in zip(distinct, prior_scores)}
    results = []
    for item in items:
        item_scores = [next(scores) for _ in item.choices]
        logprobs = np.array([logprob for logprob, _ in item_scores])
        char_lengths = np.array([len(choice) for choice in item.choices], dtype=np.float64)
        results.append(
            MCItemResult(
                item=item,
                logprobs=tuple(float(x) for x in logprobs),
                num_tokens=tuple(n for _, n in item_scores),
                predicted=int(np.argmax(logprobs)),
                predicted_norm=int(np.argmax(logprobs / char_lengths)),
                predicted_mutual_info=(
                    int(np.argmax(logprobs - np.array([prior[c] for c in item.choices]))) if prior else None
                ),
            )
        )
    return MCResult(
        accuracy=float(np.mean([r.correct for r in results])),
        accuracy_norm=float(np.mean([r.correct_norm for r in results])),
        chance=float(np.mean([1.0 / len(item.choices) for item in items])),
        items=results,
        accuracy_mutual_info=(
            float(np.mean([r.predicted_mutual_info == r.item.answer_index for r in results])) if prior else None
        ),
    )
