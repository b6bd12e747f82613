"""Normalized post-training records -> the conversations of a chat template, one converter per template.

A normalized record (`nemotron.data_prep.post_training.schema`) holds its conversation as Harmony
messages: the developer instructions (the source's system prompt and its tool declarations), user
turns, assistant `analysis` (reasoning), `commentary` (a preamble, or a tool call to `functions.NAME`
with JSON arguments), `final` (the answer), and tool results. Each template says what it can of that:

nano2 (`record_to_nano2`; `nemotron.data_prep.chat.nano2`) speaks system / user / assistant text only:
the instructions become the system turn, each `final` an assistant turn, reasoning is dropped, and a
record with tool calls or tool results cannot be expressed at all (counted as `tool calls or tool turns`).

nano3 (`record_to_nano3`; `nemotron.data_prep.chat.nano3`) has a reasoning block and tool calls:
- the developer message becomes the system turn: the instructions, then its `# Tools` section as text
  (our nano3 template does not reproduce the published one's `tools=` block, so the declarations travel
  in the system turn, as that module says);
- the assistant messages between two user or tool turns become assistant turns: `analysis` ->
  `reasoning_content`, a `final` or preamble -> `content`, each call -> a `tool_calls` entry with its
  arguments parsed into a dict; a `final` closes a turn, and a second reasoning block or a second text
  opens the next one (the template renders consecutive assistant turns);
- each tool result -> a `tool` message (the template's `<tool_response>` blocks in one user turn);
- the Harmony system message (model identity, reasoning effort) is Harmony's own header: nano3 switches
  reasoning with the generation prompt instead, so it is not carried over.
The template keeps multi-turn history as it does for every chat: assistant turns before the last user
message lose their reasoning. Records it cannot express are counted by reason (`Inexpressible`):
tool arguments that are not a JSON object (the template renders one `<parameter=KEY>` per key), or a
`final_only` record that ends in a tool call (it has no final answer to train).

Loss masks follow the record's `loss_mode` (`tokenize_nano3_record`):
- `assistant_all`: every assistant token the rendering holds (reasoning, answers and tool calls, and
  the answers of history turns as the template renders them), each turn's `<|im_end|>` included;
- `final_only`: the final answer of the last assistant turn and its `<|im_end|>` only (proof dialogues
  whose earlier attempts failed to compile: those attempts, and the reasoning, are context).
The generation prompt (`<|im_start|>assistant\\n` and the opening `<think>\\n` or `<think></think>`) is
never a target, as in `chat.nano3.tokenize_nano3_conversation`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nemotron.data_prep.chat.nano3 import THINK_OFF, nano3_pieces
from nemotron.data_prep.chat.pieces import ANSWER, PROMPT, REASONING, Piece, encode_pieces
from nemotron.data_prep.tokenizer import IM_END_TOKEN
from nemotron.errors import NemotronError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TOOL_USE = "tool calls or tool turns"
INSTRUCTIONS = "# Instructions\n\n"
LOSS_MODES = ("assistant_all", "final_only")
TARGET, CONTEXT = "target", "context"


class Inexpressible(Exception):
    """A record the template cannot say; `reason` is the count key."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _about(record: dict[str, Any]) -> dict[str, Any]:
    return {"id": record["id"], "category": record["meta_domain"],
            "source": f"post_training/{record['dataset']}/{record['split']}"}


# ---------------------------------------------------------------------------------------------------
# nano2: system / user / assistant text
# ---------------------------------------------------------------------------------------------------


def record_to_nano2(record: dict[str, Any]) -> dict[str, Any]:
    """The nano2 conversation of one normalized record; `Inexpressible` when it uses tools."""
    turns = []
    for message in record["messages"]:
        role, content = message["role"], message["content"]
        if role == "tool" or message.get("recipient"):
            raise Inexpressible(TOOL_USE)
        if role == "developer":
            if content.startswith(INSTRUCTIONS):
                turns.append({"role": "system", "content": content[len(INSTRUCTIONS):]})
        elif role == "user":
            turns.append({"role": "user", "content": content})
        elif role == "assistant" and message.get("channel") == "final":
            turns.append({"role": "assistant", "content": content})
        elif role == "assistant" and message.get("channel") == "commentary":
            raise Inexpressible(TOOL_USE)  # a preamble only happens beside tool calls
    return {**_about(record), "messages": turns}


# ---------------------------------------------------------------------------------------------------
# nano3: reasoning, tool calls, loss modes
# ---------------------------------------------------------------------------------------------------


def _tool_call(message: dict[str, Any]) -> dict[str, Any]:
    try:
        arguments = json.loads(message["content"])
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise Inexpressible("tool arguments not a JSON object")
    return {"type": "function", "function": {"name": message["recipient"].removeprefix("functions."),
                                             "arguments": arguments}}


def record_to_nano3(record: dict[str, Any]) -> dict[str, Any]:
    """The nano3 conversation of one normalized record (with its `loss_mode`), or `Inexpressible`."""
    loss_mode = record.get("loss_mode")
    if loss_mode not in LOSS_MODES:
        raise Inexpressible(f"unknown loss_mode {loss_mode!r}")
    system, turns, open_turn = None, [], None
    for message in record["messages"]:
        role, content, channel = message["role"], message["content"] or "", message.get("channel")
        if role == "system":
            continue  # Harmony's header: identity and reasoning effort (nano3 switches with its prompt)
        if role == "developer":
            system = content.removeprefix(INSTRUCTIONS)
            continue
        if role in ("user", "tool"):
            turns.append({"role": role, "content": content})
            open_turn = None
            continue
        if message.get("recipient"):  # a call joins the open turn
            starts = open_turn is None
        elif channel == "analysis":  # reasoning opens a turn unless the open one has nothing yet
            starts = open_turn is None or len(open_turn) > 1
        else:  # one text per turn, before its calls
            starts = open_turn is None or "content" in open_turn or "tool_calls" in open_turn
        if starts:
            open_turn = {"role": "assistant"}
            turns.append(open_turn)
        if message.get("recipient"):
            open_turn.setdefault("tool_calls", []).append(_tool_call(message))
        elif channel == "analysis":
            open_turn["reasoning_content"] = content
        else:
            open_turn["content"] = content
            if channel == "final":
                open_turn = None
    messages = ([{"role": "system", "content": system}] if system is not None else []) + turns
    if loss_mode == "final_only" and messages[-1].get("tool_calls"):
        raise Inexpressible("final_only record ends with a tool call")
    return {**_about(record), "messages": messages, "loss_mode": loss_mode}


def nano3_record_pieces(messages: list[dict], loss_mode: str) -> list[Piece]:
    """The nano3 rendering as pieces of kind TARGET or CONTEXT under `loss_mode` (see the module docstring).

    Starts from `nano3_pieces` (which trains the turns after the last user message) and adds, for
    `assistant_all`, the history turns: what follows their `<think></think>`, and their `<|im_end|>`.
    Markers stay markers: only the kind changes.
    """
    if loss_mode not in LOSS_MODES:
        raise NemotronError(f"loss_mode {loss_mode!r}: use one of {', '.join(LOSS_MODES)}")
    pieces = nano3_pieces(messages)

    def is_header(piece: Piece) -> bool:
        return piece.text == "assistant\n" and piece.kind == PROMPT and not piece.is_marker

    def as_(piece: Piece, kind: str) -> Piece:
        return piece._replace(kind=kind)

    last_header = max(i for i, piece in enumerate(pieces) if is_header(piece))
    out: list[Piece] = []
    history_end = None
    for index, piece in enumerate(pieces):
        if loss_mode == "final_only":
            out.append(as_(piece, TARGET if piece.kind == ANSWER and index > last_header else CONTEXT))
        elif index == history_end:
            out.append(as_(piece, TARGET))
        elif (is_header(pieces[index - 1]) and piece.kind == PROMPT and not piece.is_marker
              and pieces[index + 1].is_marker and pieces[index + 1].text == IM_END_TOKEN):
            # a history turn: `<think></think>` (context) + the rest (a target)
            out += [Piece(THINK_OFF, CONTEXT), Piece(piece.text[len(THINK_OFF):], TARGET)]
            history_end = index + 1
        else:
            out.append(as_(piece, TARGET if piece.kind in (REASONING, ANSWER) else CONTEXT))
    return [piece for piece in out if piece.text]


def tokenize_nano3_record(
    tokenizer: PreTrainedTokenizerBase, conversation: dict[str, Any],
) -> tuple[list[int], list[int]]:
    """(input ids, 0/1 loss mask) of a `record_to_nano3` conversation, masked by its `loss_mode`."""
    pieces = nano3_record_pieces(conversation["messages"], conversation["loss_mode"])
    return encode_pieces(tokenizer, pieces, {TARGET: 1, CONTEXT: 0})


# ---------------------------------------------------------------------------------------------------
# The converters by template name (a selection file's records -> conversations:
# `post_training.selection.selected_conversations`)
# ---------------------------------------------------------------------------------------------------

CONVERTERS = {"nano2": record_to_nano2, "nano3": record_to_nano3}
