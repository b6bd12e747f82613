"""Preference pairs for DPO: build them from chat conversations, write and read them as JSONL.

A preference pair says "for this prompt, this answer is better than that one". DPO (Rafailov et al.,
2023) trains on exactly that, with no reward model. One pair is one JSONL record:

    {"id": "chatterbot/ai/0", "category": "ai",
     "prompt": [{"role": "user", "content": "What is AI?"}],      # the chat up to the answer
     "chosen": "Artificial Intelligence is ...",                  # the reference answer
     "rejected": "Intelligence the is Artificial ...",            # a plausible wrong answer
     "rejected_kind": "shuffled"}

Where real preference data comes from human or LLM-judge rankings of sampled answers (HH-RLHF,
UltraFeedback, the Nemotron alignment data), we have neither offline, so `build_pairs` makes the
rejected answer by rule, seeded per pair, with the rule recorded in `rejected_kind`:
- "other_answer": the final answer of another conversation of the same category. It is fluent and on
  topic but answers a different question, the hardest kind of negative here (a model must read the
  prompt to tell). Answers given anywhere to the same question are excluded (they would be correct).
- "shuffled": the chosen answer's words in a shuffled order: right vocabulary, wrong language.
- "truncated": the chosen answer cut after 25-75% of its words: a model must learn to finish.
Rule-made negatives are easy to tell apart, which is what a tiny model can learn in minutes; for
real alignment pass judged pairs instead (stage 2's `--pairs-path`). A rejected answer is never the
chosen one (compared after normalizing case and spacing).

`read_pairs(path)` reads any preference JSONL (ours, or a user's in the same shape; TRL's
conversational shape with message lists for prompt/chosen/rejected is accepted too) and refuses a
record with an empty chosen or rejected answer, naming the file and line.

What DPO trains on is the pairs tokenized in the nano2 chat format: `tokenize_pairs` (prompt ids
ending in the generation prompt, each answer ending in `<|im_end|>`), `split_pairs` (drop pairs longer
than a maximum length, counted; hold out a seeded validation slice) and `write_tokenized_pairs` /
`read_tokenized_pairs` (JSONL of id lists). Data curation does all of it, so training only consumes.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nemotron.data_prep.chat.nano2 import CHAT_ROLES, tokenize_prompt
from nemotron.data_prep.conversations import Conversation, question_key
from nemotron.data_prep.dedup import normalize
from nemotron.data_prep.tokenizer import IM_END_ID
from nemotron.data_prep.transforms import JsonlCounts, write_jsonl
from nemotron.errors import NemotronError

Pair = dict[str, Any]
REJECTED_KINDS = ("other_answer", "shuffled", "truncated")
WORD_SPAN = re.compile(r"\S+")
PAIR_FIELDS = ("id", "category", "prompt", "chosen", "rejected", "rejected_kind")


# ---------------------------------------------------------------------------------------------------
# Building pairs from conversations
# ---------------------------------------------------------------------------------------------------


def build_pairs(
    conversations: Sequence[Conversation], seed: int, other_answer_share: float = 0.5, per_conversation: int = 1
) -> list[Pair]:
    """Pairs of a conversation's final assistant answer (chosen) against a rejected answer.

    The kind is drawn per pair (seeded by seed and conversation id, so a pair does not change when
    other conversations are added): "other_answer" with probability `other_answer_share`, else one
    of the two corruptions. When the drawn kind is impossible (no other answer in the category, a
    one-word answer cannot be shuffled) the other kinds are tried; a conversation for which none
    works gets no pair (a one-word answer, alone in its category).

    `per_conversation` > 1 adds pairs of the next kinds in the same drawn order (up to one per kind),
    ids `<conversation id>/<kind>`; the first pair of every conversation is the one `per_conversation=1`
    gives, so held-out pairs built with 1 are the same whatever the training pairs use.
    """
    if not 0.0 <= other_answer_share <= 1.0:
        raise NemotronError(f"other_answer_share={other_answer_share} must be between 0 and 1")
    if not 1 <= per_conversation <= len(REJECTED_KINDS):
        raise NemotronError(
            f"pairs per conversation {per_conversation} must be 1 to {len(REJECTED_KINDS)} (one per rejected kind)"
        )
    answers_by_category, correct_by_question = _answer_pools(conversations)
    pairs = []
    for conversation in conversations:
        rng = random.Random(f"{seed}:{conversation['id']}")
        chosen = conversation["messages"][-1]["content"]
        excluded = correct_by_question[question_key(conversation)] | {normalize(chosen)}
        corruptions = ["shuffled", "truncated"]
        rng.shuffle(corruptions)
        first_other = rng.random() < other_answer_share
        kinds = ["other_answer", *corruptions] if first_other else [*corruptions, "other_answer"]
        made = 0
        for kind in kinds:
            if kind == "other_answer":
                candidates = [a for a in answers_by_category[conversation["category"]] if normalize(a) not in excluded]
                rejected = rng.choice(candidates) if candidates else None
            else:
                rejected = shuffle_words(chosen, rng) if kind == "shuffled" else truncate_words(chosen, rng)
            if rejected is None or normalize(rejected) == normalize(chosen):
                continue
            pairs.append(
                {
                    "id": conversation["id"] if made == 0 else f"{conversation['id']}/{kind}",
                    "category": conversation["category"],
                    "prompt": conversation["messages"][:-1],
                    "chosen": chosen,
                    "rejected": rejected,
                    "rejected_kind": kind,
                }
            )
            made += 1
            if made == per_conversation:
                break
    return pairs


def _answer_pools(conversations: Sequence[Conversation]) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """Distinct final answers per category (first spelling, input order) and correct answers per question."""
    by_category: dict[str, dict[str, str]] = defaultdict(dict)
    correct: dict[str, set[str]] = defaultdict(set)
    for conversation in conversations:
        answer = conversation["messages"][-1]["content"]
        by_category[conversation["category"]].setdefault(normalize(answer), answer)
        correct[question_key(conversation)].add(normalize(answer))
    return {category: list(answers.values()) for category, answers in by_category.items()}, correct


def shuffle_words(text: str, rng: random.Random) -> str | None:
    """The words of `text` in a new order (never the original one); None with fewer than 2 distinct words."""
    words = text.split()
    if len(set(words)) < 2:
        return None
    shuffled = words[:]
    rng.shuffle(shuffled)
    if shuffled == words:  # a rotation of >= 2 distinct words always differs from the original
        shuffled = words[1:] + words[:1]
    return " ".join(shuffled)


def truncate_words(text: str, rng: random.Random) -> str | None:
    """`text` cut after 25-75% of its words (at least one word kept, one cut); None below 2 words.

    The cut is made in the original string, so the rejected answer is an exact prefix of the chosen one.
    """
    word_ends = [match.end() for match in WORD_SPAN.finditer(text)]
    if len(word_ends) < 2:
        return None
    keep = rng.randint(max(1, len(word_ends) // 4), max(1, (3 * len(word_ends)) // 4))
    return text[: word_ends[min(keep, len(word_ends) - 1) - 1]]


# ---------------------------------------------------------------------------------------------------
# Preference JSONL
# ---------------------------------------------------------------------------------------------------


def write_pairs(pairs: list[Pair], path: Path) -> JsonlCounts:
    """Write pairs as canonical JSONL (sorted keys, UTF-8), atomically; an empty list is an error."""
    if not pairs:
        raise NemotronError(f"no preference pairs to write to {path}; the source split is empty, add data")
    return write_jsonl(({name: pair[name] for name in PAIR_FIELDS} for pair in pairs), path)


def read_pairs(path: Path | str) -> list[Pair]:
    """Read and validate a preference JSONL; any bad record is one NemotronError naming file and line.

    Accepted per line: "prompt" as a string (one user turn) or a message list ending in a user turn;
    "chosen" / "rejected" as strings or as message lists whose last message is the assistant answer.
    Optional "id" (default "<file>:<line>"), "category" (default ""), "rejected_kind" (default "given").
    """
    path = Path(path)
    if not path.is_file():
        raise NemotronError(f"preference JSONL not found: {path}; check --pairs-path")
    pairs = []
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if raw.strip():
                pairs.append(_parse_pair(raw, f"{path}:{number}", default_id=f"{path.name}:{number}"))
    if not pairs:
        raise NemotronError(f"{path}: no preference pairs in the file; give one JSON object per line")
    return pairs


def _parse_pair(raw: bytes, where: str, default_id: str) -> Pair:
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NemotronError(f"{where}: not a valid UTF-8 JSON line ({error}); fix or remove the line") from None
    if not isinstance(record, dict):
        raise NemotronError(f"{where}: expected a JSON object with prompt, chosen and rejected")
    chosen = _answer_text(record.get("chosen"), "chosen", where)
    rejected = _answer_text(record.get("rejected"), "rejected", where)
    if normalize(chosen) == normalize(rejected):
        raise NemotronError(
            f"{where}: chosen and rejected are the same answer, so the pair teaches nothing; fix or drop it"
        )
    return {
        "id": str(record.get("id", default_id)),
        "category": str(record.get("category", "")),
        "prompt": _prompt_messages(record.get("prompt"), where),
        "chosen": chosen,
        "rejected": rejected,
        "rejected_kind": str(record.get("rejected_kind", "given")),
    }


def _prompt_messages(prompt: Any, where: str) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not prompt:
        raise NemotronError(f"{where}: 'prompt' must be a non-empty string or list of messages; fill it in")
    for index, message in enumerate(prompt):
        if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES:
            raise NemotronError(f"{where}: prompt message {index} needs a role in {', '.join(CHAT_ROLES)}")
        if not isinstance(message.get("content"), str) or not message["content"].strip():
            raise NemotronError(f"{where}: prompt message {index} ({message['role']}) is empty; fill it in")
    if prompt[-1]["role"] != "user":
        raise NemotronError(f"{where}: the prompt must end with a user turn (the answer comes next)")
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def _answer_text(answer: Any, name: str, where: str) -> str:
    if isinstance(answer, list) and answer and isinstance(answer[-1], dict):
        answer = answer[-1].get("content")  # TRL conversational: [{"role": "assistant", "content": ...}]
    if not isinstance(answer, str) or not answer.strip():
        raise NemotronError(
            f"{where}: empty or missing {name!r} answer; every pair needs a non-empty chosen and rejected answer"
        )
    return answer


# --------------------------------------------------------------------------------------------------
# tokenized pairs: what DPO trains on
# --------------------------------------------------------------------------------------------------


def answer_ids(tokenizer, answer: str) -> list[int]:
    """An assistant answer as SFT trained on it: its text (special-token strings not matched) + `<|im_end|>`."""
    ids = tokenizer(answer, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return [*ids, IM_END_ID]


def tokenize_pairs(tokenizer, pairs: Sequence[dict]) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    """(prompt ids, chosen ids, rejected ids) of preference pairs `{"prompt": messages, "chosen", "rejected"}`.

    The prompt ends in the generation prompt and each answer ends in `<|im_end|>`: scoring a pair is
    then scoring two assistant turns exactly as SFT and DPO train them.
    """
    prompts = [tokenize_prompt(tokenizer, pair["prompt"]) for pair in pairs]
    chosen = [answer_ids(tokenizer, pair["chosen"]) for pair in pairs]
    rejected = [answer_ids(tokenizer, pair["rejected"]) for pair in pairs]
    return prompts, chosen, rejected


TokenizedPairs = tuple[list[list[int]], list[list[int]], list[list[int]]]  # (prompts, chosen, rejected)


def split_pairs(
    tokens: TokenizedPairs, max_length: int, validation_share: float, seed: int
) -> tuple[list[int], list[int]]:
    """(train indices, validation indices) of the pairs that fit in `max_length` tokens.

    A pair's length is its prompt plus the longer answer. Pairs that do not fit are left out (the
    caller counts them), never cut: cutting a chosen answer can make it look like a "truncated"
    rejected one. The validation slice is a seeded permutation of the fitting pairs.
    """
    if not 0 <= validation_share < 1:
        raise NemotronError(f"--validation-share {validation_share} must be in [0, 1); 0.05 holds out 5%")
    lengths = [len(p) + max(len(c), len(r)) for p, c, r in zip(*tokens)]
    fitting = [i for i, length in enumerate(lengths) if length <= max_length]
    order = np.random.default_rng(seed).permutation(len(fitting))
    held_out = round(validation_share * len(fitting))
    return sorted(fitting[i] for i in order[held_out:]), sorted(fitting[i] for i in order[:held_out])


def write_tokenized_pairs(pairs: list[Pair], tokens: TokenizedPairs, ids: list[int], path: Path) -> JsonlCounts:
    """Write pairs `ids` as `{"id", "prompt_ids", "chosen_ids", "rejected_ids"}` JSONL, atomically."""
    prompts, chosen, rejected = tokens
    records = ({"id": pairs[i]["id"], "prompt_ids": prompts[i], "chosen_ids": chosen[i], "rejected_ids": rejected[i]}
               for i in ids)
    return write_jsonl(records, path)


def read_tokenized_pairs(path: Path | str) -> TokenizedPairs:
    """(prompts, chosen, rejected) token id lists from a tokenized-pairs JSONL file."""
    prompts, chosen, rejected = [], [], []
    with Path(path).open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            try:
                record = json.loads(raw)
                prompts.append(record["prompt_ids"])
                chosen.append(record["chosen_ids"])
                rejected.append(record["rejected_ids"])
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise NemotronError(f"{path}:{number}: not a tokenized pair ({error}); re-run stage-2 data "
                                    "curation") from None
    return prompts, chosen, rejected
