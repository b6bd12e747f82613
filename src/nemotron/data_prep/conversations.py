"""Chat conversations for SFT: gather them from pools, validate, deduplicate, read and write them.

A conversation is one JSON record, the shape every nano2 chat step reads and writes:

    {"id": "chatterbot/ai/0", "category": "ai", "source": "chatterbot",
     "messages": [{"role": "user", "content": "What is AI?"}, {"role": "assistant", "content": "..."}]}

What this module does:
- `pool_conversation(record, file, number)`: one record of a JSONL pool of chats in OpenAI
  (`{"messages": [...]}`) or ShareGPT (`{"conversations": [{"from", "value"}]}`) format, normalized
  through the JSONL transforms of `nemotron.data_prep.transforms`, or why it cannot be a conversation
  (the stage reader, `stages.read.ReadStage(mode="conversation")`, counts those by reason).
- `chatterbot_pool()`: the offline chatterbot corpus (via `nemotron.data_prep.sources.read_chatterbot`).
- `conversation_problem(conversation)` / `filter_conversations(...)`: the checks a training chat must
  pass (known roles, non-blank text, starts with a user turn, ends with the assistant answer we train
  on), with rejects counted by reason, as SFT data pipelines (NeMo Curator, the Nemotron post-training
  data) report what each filter removed instead of dropping silently.
- `dedup_conversations(...)`: exact dedup on the normalized text of all turns; the first copy wins.
  Chat corpora repeat themselves (chatterbot lists the same Q/A many times); duplicates only make a
  model memorise them (Lee et al., 2022, "Deduplicating Training Data Makes Language Models Better").
- `question_key(conversation)`: the normalized first user message. Two conversations with the same
  key ask the same question, which is what must never cross the train / held-out boundary
  (see `nemotron.data_prep.splits`).
- `check_chat_tokenizer(tokenizer, where, template)`: refuse a tokenizer that cannot speak the named chat format.
- `read_conversations` / `write_conversations`: canonical JSONL, so equal data gives equal bytes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nemotron.data_prep.chat.nano2 import CHAT_ROLES
from nemotron.data_prep.chat.templates import chat_template_named
from nemotron.data_prep.dedup import normalize
from nemotron.data_prep.sources import read_chatterbot
from nemotron.data_prep.tokenizer import IM_END_TOKEN, IM_START_TOKEN
from nemotron.data_prep.transforms import (
    JsonlCounts,
    apply_transforms,
    openai_chat,
    read_jsonl,
    sharegpt_to_messages,
    write_jsonl,
)
from nemotron.errors import NemotronError

Conversation = dict[str, Any]
FIELDS = ("id", "category", "source", "messages")
WORD = re.compile(r"\w+")
MALFORMED = "malformed JSON line"  # a pool line that is not a JSON object (a reject reason)


# ---------------------------------------------------------------------------------------------------
# Pools: where conversations come from
# ---------------------------------------------------------------------------------------------------


def chatterbot_folder() -> Path:
    """The folder of chatterbot YAML files (for lineage: `source_ref` hashes what we read)."""
    spec = importlib.util.find_spec("chatterbot_corpus")
    if spec is None or not spec.submodule_search_locations:
        raise NemotronError("the chatterbot corpus is missing; install it with `pip install chatterbot-corpus==1.3.3`")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "english"


def chatterbot_pool() -> tuple[list[Conversation], Counter[str]]:
    """Every chatterbot conversation, and the reader's counts of what it left out or changed, by reason."""
    conversations, skipped = read_chatterbot()
    pool = [{**conversation, "source": "chatterbot"} for conversation in conversations]
    return pool, Counter(skipped)


def pool_conversation(record: dict[str, Any], file: str, number: int) -> tuple[Conversation | None, str | None]:
    """One pool record as a conversation, or (None, why it cannot be one).

    The format is detected per record: a "messages" list goes through `transforms.openai_chat`, a
    "conversations" list through `transforms.sharegpt_to_messages`. The id is the record's "id", else
    "<file>:<number>"; the category is the record's "category", else the file's stem; the source is
    the file's name.
    """
    to_chat = {"messages": [openai_chat()], "conversations": [sharegpt_to_messages()]}
    format_key = next((key for key in to_chat if isinstance(record.get(key), list)), None)
    if format_key is None:
        return None, "no 'messages' or 'conversations' list"
    chat, skipped_by = apply_transforms(record, to_chat[format_key])
    if chat is None:
        return None, f"skipped by {skipped_by}"
    return {"id": str(record.get("id", f"{file}:{number}")), "category": str(record.get("category", Path(file).stem)),
            "source": file, "messages": chat["messages"]}, None


# ---------------------------------------------------------------------------------------------------
# Validation and dedup
# ---------------------------------------------------------------------------------------------------


# Every reason `conversation_problem` gives, in a fixed order (a signature row stores its index).
PROBLEMS = ("no messages", "unknown role", "empty message", "does not start with a user turn",
            "does not end with an assistant turn", "two turns in a row from the same role")


def conversation_problem(conversation: Conversation) -> str | None:
    """Why `conversation` cannot be an SFT example (a short reason, the key of the reject count), or None."""
    messages = conversation.get("messages")
    if not isinstance(messages, list) or not messages:
        return "no messages"
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES:
            return "unknown role"
        if not isinstance(message.get("content"), str) or not message["content"].strip():
            return "empty message"
    roles = [message["role"] for message in messages if message["role"] != "system"]
    if not roles or roles[0] != "user":
        return "does not start with a user turn"
    if roles[-1] != "assistant":
        # The last assistant turn is the answer SFT learns and DPO's "chosen"; without it there is none.
        return "does not end with an assistant turn"
    if any(a == b for a, b in itertools.pairwise(roles)):
        return "two turns in a row from the same role"
    return None


def filter_conversations(conversations: Iterable[Conversation]) -> tuple[list[Conversation], Counter[str]]:
    """Keep the valid conversations; count the others by `conversation_problem` reason."""
    kept, rejects = [], Counter()
    for conversation in conversations:
        problem = conversation_problem(conversation)
        if problem is None:
            kept.append(conversation)
        else:
            rejects[problem] += 1
    return kept, rejects


def conversation_fingerprint(conversation: Conversation) -> str:
    """sha256 of the normalized turns (role + text): equal for copies that differ in case or spacing."""
    text = "\n".join(f"{m['role']}: {normalize(m['content'])}" for m in conversation["messages"])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def dedup_conversations(conversations: Iterable[Conversation]) -> tuple[list[Conversation], int]:
    """Drop exact duplicates (same normalized turns), keeping the first copy; returns (kept, dropped)."""
    seen: set[str] = set()
    kept, dropped = [], 0
    for conversation in conversations:
        fingerprint = conversation_fingerprint(conversation)
        if fingerprint in seen:
            dropped += 1
        else:
            seen.add(fingerprint)
            kept.append(conversation)
    return kept, dropped


def question_key(conversation: Conversation) -> str:
    """The first user message, lowercased, as its words only: "What's AI?" and "what's  AI" match."""
    first = next(m["content"] for m in conversation["messages"] if m["role"] == "user")
    return " ".join(WORD.findall(normalize(first)))


# ---------------------------------------------------------------------------------------------------
# The tokenizer a chat dataset needs
# ---------------------------------------------------------------------------------------------------


def check_chat_tokenizer(tokenizer: Any, where: Path | str, template: str = "nano2") -> None:
    """Refuse a tokenizer without the ChatML markers or without the chat template named `template`.

    Both are needed downstream: the markers are the turn boundaries the loss mask is built on, and the
    template travels with the model so inference (`apply_chat_template`) renders exactly what SFT saw.
    """
    jinja = chat_template_named(template).jinja
    special = set(tokenizer.all_special_tokens)
    missing = [token for token in (IM_START_TOKEN, IM_END_TOKEN) if token not in special]
    if missing:
        raise NemotronError(
            f"{where}: the tokenizer has no chat special token(s) {', '.join(missing)}; re-train it with "
            "nemotron.data_prep.tokenizer.train_tokenizer (stage-0 data curation reserves them)"
        )
    if not tokenizer.chat_template:
        raise NemotronError(
            f"{where}: the tokenizer has no chat template; save it with train_tokenizer(..., "
            f"chat_template=chat_template_named({template!r}).jinja) (stage-0 data curation does)"
        )
    if tokenizer.chat_template != jinja:
        raise NemotronError(
            f"{where}: the tokenizer's chat template is not the {template} template, so inference would render "
            f"chats differently from training; set tokenizer.chat_template = chat_template_named({template!r}).jinja "
            "and save it, or name the template the tokenizer was saved with"
        )


# ---------------------------------------------------------------------------------------------------
# Conversation JSONL
# ---------------------------------------------------------------------------------------------------


def write_conversations(conversations: list[Conversation], path: Path) -> JsonlCounts:
    """Write conversations as canonical JSONL (sorted keys, UTF-8), atomically."""
    if not conversations:
        raise NemotronError(f"no conversations to write to {path}; the split is empty, add data")
    return write_jsonl(({name: c[name] for name in FIELDS} for c in conversations), path)


def read_conversations(path: Path) -> list[Conversation]:
    """Read a conversation JSONL written by `write_conversations`; a bad record is an error naming it."""
    records, _ = read_jsonl(path, strict=True)
    for number, record in enumerate(records, start=1):
        missing = [name for name in FIELDS if name not in record]
        problem = f"missing field(s) {', '.join(missing)}" if missing else conversation_problem(record)
        if problem:
            raise NemotronError(
                f"{path}: record {number} ({record.get('id', '?')}): {problem}; "
                "re-create the file with the stage-1 data curation step"
            )
    if not records:
        raise NemotronError(f"{path}: no conversations; re-create it with the stage-1 data curation step")
    return records
