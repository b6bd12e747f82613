"""Preference pairs for DPO: build them from a model's own answers judged by a checker; write and read JSONL.

A preference pair says "for this prompt, this answer is better than that one". DPO (Rafailov et al.,
2023) trains on exactly that, with no reward model. One pair is one JSONL record:

    {"id": "largest/17", "category": "skill",
     "prompt": [{"role": "user", "content": "Largest of 4,3,7,0?"}],   # the chat up to the answer
     "chosen": "7",                                                     # an answer the checker accepts
     "rejected": "4",                                                   # one it refuses
     "rejected_kind": "near_miss"}

Real preference data is judged samples: the model being aligned answers each prompt several times, and a
judge (people, a reward model, or, for checkable tasks, a verifier) ranks the answers. Nemotron's alignment
data is built that way (on-policy: the policy's own answers, so the pairs are about the mistakes IT makes).
`judged_pairs(problems, samples, check)` does it with a program as the judge (`nemotron.data_prep.verifiable`):
chosen, a sampled answer the checker accepts; rejected, one it refuses, its kind recorded. `reference_pairs`
builds the held-out pairs evaluation scores: the true answer against the teacher's mistake.

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
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nemotron.data_prep.chat.nano2 import CHAT_ROLES, tokenize_prompt
from nemotron.data_prep.dedup import normalize
from nemotron.data_prep.tokenizer import IM_END_ID
from nemotron.data_prep.transforms import JsonlCounts, write_jsonl
from nemotron.data_prep.verifiable import only_integer
from nemotron.errors import NemotronError

Pair = dict[str, Any]
REJECTED_KINDS = ("other_answer", "shuffled", "truncated")
PAIR_FIELDS = ("id", "category", "prompt", "chosen", "rejected", "rejected_kind")


# ---------------------------------------------------------------------------------------------------
# Building pairs from a model's own answers, judged by a checker
# ---------------------------------------------------------------------------------------------------


def judged_pairs(
    problems: Sequence[dict], samples: Sequence[Sequence[str]], check: Callable[[str, str], bool],
) -> tuple[list[Pair], Counter]:
    """On-policy preference pairs: each problem's sampled answers (`samples[i]`, the model's own), judged by
    `check(answer_text, problem["answer"])`. The first right answer is chosen; the rejected one is the first
    wrong answer that names a number (the kind of mistake a verifier exists to catch), else the first wrong
    one. A problem whose samples are all right or all wrong gives no pair: the returned Counter says how many
    (`all_right`, `all_wrong`) and how many pairs each kind of rejected answer gave (`near_miss`: the
    teacher's mistake, the second-largest number; `other_number`; `no_single_number`)."""
    if len(problems) != len(samples):
        raise NemotronError(f"{len(problems)} problems and {len(samples)} groups of samples; give one group each")
    pairs, counts = [], Counter()
    for problem, answers in zip(problems, samples):
        right = [a for a in answers if check(a, problem["answer"])]
        wrong = [a for a in answers if not check(a, problem["answer"])]
        if not right or not wrong:
            counts["all_right" if right else "all_wrong"] += 1
            continue
        rejected = next((a for a in wrong if only_integer(a) is not None), wrong[0])
        given = only_integer(rejected)
        kind = ("near_miss" if given == problem.get("near_miss") else "other_number") if given else "no_single_number"
        counts[kind] += 1
        pairs.append({"id": problem.get("id", problem["question"]), "category": "skill",
                      "prompt": [{"role": "user", "content": problem["question"]}],
                      "chosen": right[0], "rejected": rejected, "rejected_kind": kind})
    return pairs, counts


def reference_pairs(problems: Sequence[dict]) -> list[Pair]:
    """Held-out pairs of each problem's true answer (chosen) against the teacher's mistake (rejected: the
    near miss), for preference accuracy: does a model prefer the right answer to what its teacher wrote?"""
    return [{"id": problem.get("id", problem["question"]), "category": "skill",
             "prompt": [{"role": "user", "content": problem["question"]}],
             "chosen": problem["answer"], "rejected": problem["near_miss"], "rejected_kind": "near_miss"}
            for problem in problems]


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
