"""The chat templates by name: the one list a `chat_template="nano2"` setting is looked up in.

Stage-0 data curation saves the named template's Jinja text with the tokenizer it trains (and hashes
it into its artifact); the SFT pipeline and its packed-Parquet shard writer tokenize each chat with
the named template's exact loss mask; a step's Config takes a `ChatTemplateName`. Adding a format is
one module in this package and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from nemotron.data_prep.chat import nano2, nano3, records
from nemotron.errors import NemotronError

ChatTemplateName = Literal["nano2", "nano3"]


@dataclass(frozen=True)
class ChatTemplate:
    """A chat format as the library uses it.

    jinja: the template saved in the tokenizer folder (what `apply_chat_template` renders at inference).
    tokenize_conversation: `(tokenizer, messages, loss_on=..., conversation_id=...)` -> (ids, loss mask),
        loss_on "assistant" (what the format trains) or "all".
    tokenize_prompt: `(tokenizer, messages)` -> the ids a model generates its next assistant turn from.
    settings: the keyword settings `tokenize_conversation` takes beyond those (nano3: `train_reasoning`).
    tokenize_record: `(tokenizer, conversation)` -> (ids, loss mask) of a post-training record converted
        by `chat.records`, masked by its own `loss_mode`; None where the converter sets no loss mode.
    """

    name: str
    jinja: str
    tokenize_conversation: Callable[..., tuple[list[int], list[int]]]
    tokenize_prompt: Callable[..., list[int]]
    settings: tuple[str, ...] = ()
    tokenize_record: Callable[..., tuple[list[int], list[int]]] | None = None


CHAT_TEMPLATES: dict[str, ChatTemplate] = {
    "nano2": ChatTemplate("nano2", nano2.NANO2_CHAT_TEMPLATE, nano2.tokenize_conversation, nano2.tokenize_prompt),
    "nano3": ChatTemplate("nano3", nano3.NANO3_CHAT_TEMPLATE, nano3.tokenize_nano3_conversation,
                          nano3.tokenize_nano3_prompt, ("train_reasoning",), records.tokenize_nano3_record),
}
assert tuple(CHAT_TEMPLATES) == get_args(ChatTemplateName), "the Literal and the registry must name the same"


def chat_template_named(name: str) -> ChatTemplate:
    """The registered template `name`; an unknown name is refused with the list of known ones."""
    if name not in CHAT_TEMPLATES:
        raise NemotronError(f"unknown chat template {name!r}; use one of {', '.join(CHAT_TEMPLATES)}")
    return CHAT_TEMPLATES[name]
