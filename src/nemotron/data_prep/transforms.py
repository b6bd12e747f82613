"""JSONL records and the small transforms that reshape them (SFT, chat, preference data).

What this module does:
- Transforms are factories: `sft(...)`, `openai_chat(...)`, `sharegpt(...)` (chats as ShareGPT
  `conversations`), `sharegpt_to_messages(...)` (ShareGPT chats as OpenAI messages), `passthrough()`,
  `select(fields)`, `rename(mapping)` each return a function `record -> record | None`. `None`
  means "skip this record" (it does not fit the expected shape); skips are counted per transform,
  never silent. Transforms compose as a list applied left to right, the way Megatron-Bridge /
  NeMo-RL data configs chain per-record preprocessors.
- `read_jsonl(path, strict=False)`: one JSON object per line. A malformed line (bad JSON, bad UTF-8,
  not an object) is reported with file and line number; by default it is skipped with a warning on
  stderr and counted (the count goes into an artifact's metrics), with `strict=True` the first one
  raises NemotronError.
- `write_jsonl(records, path, transforms)` and `convert_jsonl(src, dst, transforms)`: apply
  transforms, write atomically, return `JsonlCounts`.
- `parse_line(raw)` and `canonical_json(record, where)`: one line in, one line out, the two halves
  every JSONL reader and writer of the library shares (the stage reader, the jsonl and packed formats).

Output is canonical so equal data gives equal bytes: UTF-8 (not \\u-escaped), keys sorted, compact
separators, one "\\n" per record, NaN/Infinity refused (they are not JSON). Sorting keys means two
sources holding the same records with fields in a different order produce the same file and the
same artifact digest; the cost is that fields are no longer in their source order.

Chat messages are normalized to the OpenAI shape `{"messages": [{"role", "content"}, ...]}` with roles
system / user / assistant, the input that `nemotron.data_prep.chat.nano2` renders.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.errors import NemotronError
from nemotron.progress import progress_bar

Record = dict[str, Any]
Transform = Callable[[Record], Record | None]

# Role names seen in the wild, mapped to the three roles our chat template knows.
OPENAI_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
SHAREGPT_SPEAKERS = {"system": "system", "user": "human", "assistant": "gpt"}  # what ShareGPT writes
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "model": "assistant",
}
MAX_WARNINGS = 10  # malformed lines reported one by one on stderr; the rest only counted


def _named(function: Transform, name: str) -> Transform:
    """Give a transform a readable name: it keys the skip counts in JsonlCounts.skipped_by."""
    function.__name__ = function.__qualname__ = name
    return function


# ---------------------------------------------------------------------------------------------------
# Transforms
# ---------------------------------------------------------------------------------------------------


def passthrough() -> Transform:
    """Keep every record as it is (a shallow copy, so later transforms cannot alter the source)."""
    return _named(lambda record: dict(record), "passthrough()")


def select(fields: Sequence[str]) -> Transform:
    """Keep only `fields`, in that order; a record missing any of them is skipped."""
    fields = list(fields)

    def transform(record: Record) -> Record | None:
        if any(name not in record for name in fields):
            return None
        return {name: record[name] for name in fields}

    return _named(transform, f"select({','.join(fields)})")


def rename(mapping: Mapping[str, str]) -> Transform:
    """Rename fields old -> new, keep the rest; a record missing an `old` field is skipped."""
    mapping = dict(mapping)

    def transform(record: Record) -> Record | None:
        if any(old not in record for old in mapping):
            return None
        return {mapping.get(name, name): value for name, value in record.items()}

    return _named(transform, f"rename({','.join(f'{old}->{new}' for old, new in mapping.items())})")


def sft(input_field: str = "input", output_field: str = "output") -> Transform:
    """Prompt/response pairs -> {"input", "output"}, the SFT JSONL shape of NeMo / Megatron-Bridge.

    Skipped: a missing, non-string or blank input or output.
    """

    def transform(record: Record) -> Record | None:
        prompt, response = record.get(input_field), record.get(output_field)
        if not _is_text(prompt) or not _is_text(response):
            return None
        return {"input": prompt, "output": response}

    return _named(transform, f"sft({input_field},{output_field})")


def openai_chat(messages_field: str = "messages", keep: Sequence[str] = ()) -> Transform:
    """OpenAI-style chats -> {"messages": [{"role", "content"}, ...]} (+ the `keep` fields present).

    Accepts content as a string or as a list of parts ({"type": "text", "text": ...}, joined);
    "developer" becomes "system"; extra message keys (name, ...) are dropped. Skipped: no messages,
    a role we cannot train on (tool, function), or a message without text (e.g. a bare tool call).
    """

    def transform(record: Record) -> Record | None:
        messages = record.get(messages_field)
        if not isinstance(messages, list) or not messages:
            return None
        normalized = []
        for message in messages:
            if not isinstance(message, dict):
                return None
            role = OPENAI_ROLES.get(message.get("role"))
            content = _text_of(message.get("content"))
            if role is None or content is None:
                return None
            normalized.append({"role": role, "content": content})
        return _with_kept(record, keep, {"messages": normalized})

    return _named(transform, f"openai_chat({messages_field})")


def sharegpt_to_messages(conversations_field: str = "conversations", keep: Sequence[str] = ()) -> Transform:
    """ShareGPT chats {"conversations": [{"from": "human", "value": ...}, ...]} -> OpenAI messages.

    "human"/"user" -> user, "gpt"/"assistant"/"chatgpt"/"model" -> assistant, "system" -> system.
    Skipped: no turns, another speaker (e.g. "function_call", "observation") or a blank turn.
    """

    def transform(record: Record) -> Record | None:
        turns = record.get(conversations_field)
        if not isinstance(turns, list) or not turns:
            return None
        messages = []
        for turn in turns:
            if not isinstance(turn, dict):
                return None
            role = SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
            content = turn.get("value")
            if role is None or not _is_text(content):
                return None
            messages.append({"role": role, "content": content})
        return _with_kept(record, keep, {"messages": messages})

    return _named(transform, f"sharegpt_to_messages({conversations_field})")


def sharegpt(conversations_field: str = "conversations", keep: Sequence[str] = ()) -> Transform:
    """Chats -> ShareGPT {"conversations": [{"from": "system" | "human" | "gpt", "value": ...}, ...]}.

    The field holds ShareGPT turns (speakers as `sharegpt_to_messages` reads them) or OpenAI messages
    (as `openai_chat` reads them); skipped where both would skip.
    """
    turns, messages = sharegpt_to_messages(conversations_field), openai_chat(conversations_field)

    def transform(record: Record) -> Record | None:
        chat = turns(record) or messages(record)
        if chat is None:
            return None
        conversations = [{"from": SHAREGPT_SPEAKERS[m["role"]], "value": m["content"]} for m in chat["messages"]]
        return _with_kept(record, keep, {"conversations": conversations})

    return _named(transform, f"sharegpt({conversations_field})")


def rl_record(messages_field: str = "messages") -> Transform:
    """An RL prompt record: its chat in `messages_field` normalized as `openai_chat` does, written as
    `messages`, and every other field (`answer`, `id`, what a reward needs) kept as it is."""
    chat = openai_chat(messages_field)

    def transform(record: Record) -> Record | None:
        normalized = chat(record)
        if normalized is None:
            return None
        return {**{k: v for k, v in record.items() if k != messages_field}, "messages": normalized["messages"]}

    return _named(transform, f"rl_record({messages_field})")


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _text_of(content: Any) -> str | None:
    """A message's text: the string itself, or the text parts of a content list joined; None if blank."""
    if isinstance(content, list):
        parts = [
            part.get("text") for part in content if isinstance(part, dict) and part.get("type") == "text"
        ]
        content = "".join(part for part in parts if isinstance(part, str))
    return content if _is_text(content) else None


def _with_kept(record: Record, keep: Sequence[str], result: Record) -> Record:
    for name in keep:
        if name in record:
            result[name] = record[name]
    return result


def apply_transforms(record: Record, transforms: Sequence[Transform]) -> tuple[Record | None, str | None]:
    """Run `transforms` left to right; returns (result, None) or (None, name of the one that skipped)."""
    for transform in transforms:
        record = transform(record)
        if record is None:
            return None, getattr(transform, "__name__", repr(transform))
    return record, None


# ---------------------------------------------------------------------------------------------------
# Reading and writing JSONL
# ---------------------------------------------------------------------------------------------------


@dataclass
class JsonlCounts:
    """What a JSONL conversion did; `as_metrics()` goes straight into an artifact's metrics."""

    read: int = 0  # records that reached the transforms
    written: int = 0
    skipped: int = 0  # records a transform returned None for
    malformed: int = 0  # input lines that were not a JSON object
    skipped_by: dict[str, int] = field(default_factory=dict)

    def as_metrics(self) -> dict[str, Any]:
        return asdict(self)


def read_jsonl(path: Path | str, strict: bool = False) -> tuple[list[Record], int]:
    """All JSON objects in `path`, one per line (blank lines ignored), and the malformed-line count."""
    path = Path(path)
    if not path.is_file():
        raise NemotronError(f"JSONL file not found: {path}; check the path")
    records: list[Record] = []
    malformed = 0
    with path.open("rb") as lines:  # bytes, so one bad UTF-8 line is one malformed line, not a crash
        for line_number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            record, problem = parse_line(raw)
            if problem is None:
                records.append(record)
                continue
            if strict:
                raise NemotronError(
                    f"{path}:{line_number}: malformed JSONL line ({problem}); fix the line, "
                    "or read with strict=False to skip and count malformed lines"
                )
            malformed += 1
            if malformed <= MAX_WARNINGS:
                print(
                    f"warning: {path}:{line_number}: skipped malformed JSONL line ({problem})",
                    file=sys.stderr,
                )
    if malformed > MAX_WARNINGS:
        print(f"warning: {path}: {malformed} malformed lines skipped in total", file=sys.stderr)
    return records, malformed


def parse_line(raw: bytes) -> tuple[Record | None, str | None]:
    """One JSONL line -> (the object, None), or (None, what is wrong with it): not UTF-8, not JSON, not
    an object. The one line parser of every JSONL reader (`read_jsonl`, the stage reader, the formats)."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not valid UTF-8"
    except json.JSONDecodeError as error:
        return None, f"invalid JSON: {error.msg} at column {error.colno}"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, expected an object"
    return value, None


def write_jsonl(
    records: Iterable[Record], path: Path | str, transforms: Sequence[Transform] = ()
) -> JsonlCounts:
    """Apply `transforms` to each record and write the survivors as canonical JSONL, atomically.

    Raises NemotronError (and writes nothing) when records came in but every one was skipped:
    that is almost always a wrong field name, and an empty dataset would only fail later.
    """
    path = Path(path)
    counts = JsonlCounts()
    skipped_by: Counter[str] = Counter()
    with atomic.output_file(path, "w") as out:  # published only if the block ends without an error
        for record in progress_bar(records, desc=f"writing {path.name}", unit="rec", delay=2.0):
            counts.read += 1
            result, skipped_by_name = apply_transforms(record, transforms)
            if result is None:
                skipped_by[skipped_by_name] += 1
                continue
            out.write(canonical_json(result, where=f"{path}, record {counts.read - 1}") + "\n")
            counts.written += 1
        counts.skipped_by = dict(sorted(skipped_by.items()))
        counts.skipped = sum(skipped_by.values())
        if counts.read and not counts.written:
            raise NemotronError(
                f"all {counts.read} records for {path} were skipped by transforms {counts.skipped_by}; "
                "check the field names the transforms expect"
            )
    return counts


def convert_jsonl(
    source: Path | str, destination: Path | str, transforms: Sequence[Transform] = (), strict: bool = False
) -> JsonlCounts:
    """read_jsonl + write_jsonl: the counts include the malformed lines of `source`."""
    records, malformed = read_jsonl(source, strict=strict)
    counts = write_jsonl(records, destination, transforms)
    counts.malformed = malformed
    return counts


def canonical_json(record: Record, where: str) -> str:
    """The record as one canonical JSONL line (UTF-8, keys sorted, compact, no NaN: the module docstring
    says why); a value JSON cannot hold is an error naming `where`."""
    try:
        return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise NemotronError(
            f"{where}: cannot be written as JSON ({error}); make every value a str, int, finite float, "
            "bool, None, list or dict"
        ) from error
