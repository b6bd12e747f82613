"""Selected post-training records -> the conversation format of nano2's chat steps.

nano2's chat template (`nemotron.data_prep.chat.nano2`) speaks system / user / assistant text only:
no reasoning channel, no tool calls. So a selected record becomes a conversation by keeping what that
template can say: the developer instructions (the source's system prompt) as the system turn, the user
turns, and each assistant `final` answer; `analysis` reasoning is dropped. A record with tool calls or
tool results cannot be expressed at all: it is skipped and counted (`tool calls or tool turns`), never
silently lost. The conversation's `id` is the record id, its category the record's `meta_domain`, its
source `post_training/<dataset>/<split>`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from nemotron.data_prep.post_training.schema import read_records
from nemotron.errors import NemotronError

TOOL_USE = "tool calls or tool turns"
INSTRUCTIONS = "# Instructions\n\n"


def record_to_conversation(record: dict[str, Any]) -> dict[str, Any] | None:
    """The nano2 conversation of one normalized record, or None when it uses tools."""
    turns = []
    for message in record["messages"]:
        role, content = message["role"], message["content"]
        if role == "tool" or message.get("recipient"):
            return None
        if role == "developer":
            if content.startswith(INSTRUCTIONS):
                turns.append({"role": "system", "content": content[len(INSTRUCTIONS):]})
        elif role == "user":
            turns.append({"role": "user", "content": content})
        elif role == "assistant" and message.get("channel") == "final":
            turns.append({"role": "assistant", "content": content})
        elif role == "assistant" and message.get("channel") == "commentary":
            return None  # a preamble only happens beside tool calls
    return {"id": record["id"], "category": record["meta_domain"],
            "source": f"post_training/{record['dataset']}/{record['split']}", "messages": turns}


def selected_conversations(path: Path) -> tuple[list[dict[str, Any]], Counter]:
    """Conversations of a selected-records Parquet file (or a folder of them), and the skips by reason."""
    path = Path(path)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise NemotronError(f"{path}: no selected records (Parquet); pass the selected.parquet of the "
                            "post-training pipeline's embed_select or score step")
    conversations, skipped = [], Counter()
    for record in read_records(files):
        conversation = record_to_conversation(record)
        if conversation is None:
            skipped[TOOL_USE] += 1
        else:
            conversations.append(conversation)
    return conversations, skipped
