"""The JSONL transforms under the names and call signatures of NVIDIA's data-prep design.

That design (the Nemotron cookbook's `data_prep` README) shows

    from nemotron.data_prep.formats.transforms import sft, openai_chat, sharegpt, passthrough, select, rename

with keyword arguments naming source fields: `sft(input="instruction", output="response", system=...)`,
`openai_chat(messages=...)`, `sharegpt(conversations=...)`, `select("id", "text")`,
`rename(input="question", output="answer")` (new name = source field). Each function here takes that
call and builds the transform of `nemotron.data_prep.transforms`, which holds the logic once and
whose transforms apply, compose and count skips the same way (`write_jsonl`, `convert_jsonl`,
`apply_transforms`). Where ours does more than the design's, it is said below:

- `sft`: also skips a blank or non-string input or output (the design's keeps them);
- `openai_chat`: also normalizes the messages (roles system/user/assistant, content parts joined) and
  skips what a chat template cannot render (a tool turn, a message without text);
- `sharegpt`: also reads OpenAI messages in its field, and normalizes speakers to system/human/gpt;
  `sharegpt_to_messages` (not the design's) turns ShareGPT turns into the OpenAI `messages` our chat
  templates render;
- `rename`: as the design's, keeps only the renamed fields (our `transforms.rename`, old -> new, keeps
  the rest too), so it is written here;
- `nemotron_rl` (the design's extractor of `responses_create_params`) has no counterpart: our RL
  records are `{"messages", "answer"}` lines already (`data_prep.pipeline.run_rl_pipeline`).

docs/data-prep.md has the table from each of the design's names to ours.
"""

from __future__ import annotations

from nemotron.data_prep import transforms as ours
from nemotron.data_prep.transforms import Record, Transform

__all__ = ["Transform", "openai_chat", "passthrough", "rename", "select", "sft", "sharegpt", "sharegpt_to_messages"]


def sft(*, input: str = "input", output: str = "output", system: str | None = None) -> Transform:  # noqa: A002
    """Prompt/response records -> `{"input", "output"}` (+ `"system"` from the field `system`, when present)."""
    pair = ours.sft(input, output)
    if system is None:
        return pair

    def transform(record: Record) -> Record | None:
        result = pair(record)
        if result is not None and system in record:
            result["system"] = record[system]
        return result

    transform.__name__ = transform.__qualname__ = f"sft({input},{output},system={system})"
    return transform


def openai_chat(*, messages: str = "messages") -> Transform:
    """OpenAI chats in the field `messages` -> `{"messages": [...]}`, normalized."""
    return ours.openai_chat(messages_field=messages)


def sharegpt(*, conversations: str = "conversations") -> Transform:
    """The chat in the field `conversations` -> ShareGPT `{"conversations": [{"from", "value"}, ...]}`."""
    return ours.sharegpt(conversations_field=conversations)


def sharegpt_to_messages(*, conversations: str = "conversations") -> Transform:
    """ShareGPT turns in the field `conversations` -> OpenAI `{"messages": [...]}`."""
    return ours.sharegpt_to_messages(conversations_field=conversations)


def passthrough() -> Transform:
    """Every record as it is."""
    return ours.passthrough()


def select(*fields: str) -> Transform:
    """Only `fields`, in that order; a record missing one is skipped."""
    return ours.select(fields)


def rename(**new_from_old: str) -> Transform:
    """`rename(input="question")`: only the named fields, each under its new name (one source field may
    feed several); a record missing a source field is skipped."""

    def transform(record: Record) -> Record | None:
        if any(old not in record for old in new_from_old.values()):
            return None
        return {new: record[old] for new, old in new_from_old.items()}

    transform.__name__ = transform.__qualname__ = f"rename({','.join(f'{n}={o}' for n, o in new_from_old.items())})"
    return transform
