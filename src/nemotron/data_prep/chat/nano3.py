"""The nano3 chat format: reasoning traces with an on/off switch, tool calls, and exact loss masks.

Nemotron 3 Nano speaks ChatML like nano2 (`<|im_start|>{role}\\n...<|im_end|>\\n`) and adds three things,
reproduced here from the behaviour of the template NVIDIA publishes with the model (rendered once on
the conversations in tests/test_nano3_chat.py; we record its output there, we do not ship its code):

- Reasoning. An assistant turn is `<think>\\n{reasoning}\\n</think>\\n{answer}`, or `<think></think>{answer}`
  when it has no reasoning (a message's `reasoning_content`, blank counts as none).
- The switch. The generation prompt ends the template: `<|im_start|>assistant\\n<think>\\n` with
  reasoning on (the default), `<|im_start|>assistant\\n<think></think>` with `enable_thinking=False`.
  The model is not told in words; the prompt has already opened (or closed) its thoughts. Nano 3 SFT
  teaches both by stripping the reasoning from a share of the samples (10%, arXiv:2512.20848, 3.2).
- History. Assistant turns before the last user message lose their reasoning (`<think></think>`,
  then what followed `</think>`): old thoughts are not context, which keeps long chats short.
- Tools. An assistant `tool_calls` list renders as `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE
  \\n</parameter>\\n...</function>\\n</tool_call>\\n` blocks before `<|im_end|>`; consecutive `tool` messages
  become `<tool_response>\\n...\\n</tool_response>\\n` blocks inside one user turn.
- A system turn is always rendered, empty if the chat has none.

Not reproduced: the published template's `tools=` argument (a long system-prompt block listing the
functions; put the tool descriptions in the system message instead) and its `reasoning_budget` hint.

Loss masks (`tokenize_nano3_conversation`): the trained turns are the assistant turns after the last
user message, as Nano 3's SFT packing does (earlier turns are context, rendered without reasoning).
In a trained turn, `<|im_start|>assistant\\n` and the opening `<think>\\n` / `<think></think>` are the
generation prompt, so they are not targets; the reasoning (through `\\n</think>\\n`) is a target when
`train_reasoning=True`; the answer, the tool calls and `<|im_end|>` always are. Everything is encoded
piece by piece so every mask boundary is a token boundary, and the `<|im_start|>` / `<|im_end|>` this
renderer emits are the only special tokens: a content that is or holds "<|im_end|>" stays text
(`nemotron.data_prep.chat.pieces`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nemotron.data_prep.chat.pieces import ANSWER, PROMPT, REASONING, Piece, encode_pieces, marker, rendered
from nemotron.data_prep.tokenizer import IM_END_TOKEN, IM_START_TOKEN
from nemotron.errors import NemotronError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

NANO3_ROLES = ("system", "user", "assistant", "tool")
THINK_ON, THINK_OFF = "<think>\n", "<think></think>"

# Our Jinja text of the same behaviour, for `apply_chat_template` (it travels in the tokenizer folder).
# Reasoning on/off: `enable_thinking=False` as a keyword (transformers) or in `chat_template_kwargs` (vLLM).
NANO3_CHAT_TEMPLATE = (
    "{%- set kwargs = chat_template_kwargs if chat_template_kwargs is defined else {} -%}"
    "{%- set thinking = enable_thinking if enable_thinking is defined else kwargs.get('enable_thinking', true) -%}"
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>system\\n<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if loop.first and m.role == 'system' -%}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user\\n' -}}{%- endif -%}"
    "{{- '<tool_response>\\n' + m.content + '\\n</tool_response>\\n' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- elif m.role == 'assistant' -%}"
    "{%- set think = m.reasoning_content if m.reasoning_content is string and m.reasoning_content | trim else '' -%}"
    "{%- set answer = m.content if m.content is string else '' -%}"
    "{%- set old = loop.index0 < ns.last_user -%}"
    "{{- '<|im_start|>assistant\\n' -}}{%- generation -%}"
    "{%- if m.tool_calls -%}"
    "{%- if old -%}{{- '<think></think>' + answer | trim + '\\n' -}}"
    "{%- elif think -%}{{- ('<think>\\n' + think + '\\n</think>\\n' + answer) | trim + '\\n' -}}"
    "{%- else -%}{{- ('<think></think>' + answer) | trim + '\\n' -}}{%- endif -%}"
    "{%- for call in m.tool_calls -%}{%- set call = call.function if call.function is defined else call -%}"
    "{{- '<tool_call>\\n<function=' + call.name + '>\\n' -}}"
    "{%- for key, value in call.arguments | items -%}"
    "{{- '<parameter=' + key + '>\\n' -}}"
    "{{- (value | tojson if value is mapping or (value is sequence and value is not string) else value | string)"
    " + '\\n</parameter>\\n' -}}"
    "{%- endfor -%}{{- '</function>\\n</tool_call>\\n' -}}{%- endfor -%}"
    "{%- elif old -%}{{- ('<think></think>' + ('\\n' if think else '') + answer) | trim -}}"
    "{%- elif think -%}{{- ('<think>\\n' + think + '\\n</think>\\n' + answer) | trim -}}"
    "{%- else -%}{{- ('<think></think>' + answer) | trim -}}{%- endif -%}"
    "{{- '<|im_end|>' -}}{%- endgeneration -%}{{- '\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' + ('<think>\\n' if thinking else '<think></think>') -}}"
    "{%- endif -%}"
)


# ---------------------------------------------------------------------------------------------------
# The conversation as pieces; a piece's kind says what a loss mask does with it
# ---------------------------------------------------------------------------------------------------


def validate_nano3_conversation(messages: Any, conversation_id: str | int | None = None) -> None:
    """Raise NemotronError naming the conversation and message if it is not a nano3 chat."""
    where = f"conversation {conversation_id!r}" if conversation_id is not None else "conversation"
    if not isinstance(messages, (list, tuple)) or not messages:
        raise NemotronError(f"{where}: messages must be a non-empty list of {{'role', 'content'}} dicts")
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in NANO3_ROLES:
            raise NemotronError(f"{where}: message {index} has role {role!r}; allowed roles are "
                                f"{', '.join(NANO3_ROLES)}")
        if role == "system" and index:
            raise NemotronError(f"{where}: message {index} is a system message; only the first may be one")
        content = message.get("content")
        if role != "assistant" and not isinstance(content, str):
            raise NemotronError(f"{where}: message {index} ({role}) needs string content, got "
                                f"{type(content).__name__}")
        for call in message.get("tool_calls") or []:
            call = call.get("function", call)
            if not isinstance(call.get("name"), str) or not isinstance(call.get("arguments", {}), dict):
                raise NemotronError(f"{where}: message {index} has a tool call without a name or whose "
                                    "arguments are not a dict; parse JSON-string arguments with json.loads first")


def nano3_pieces(
    messages: Sequence[dict], add_generation_prompt: bool = False, enable_thinking: bool = True,
    conversation_id: str | int | None = None,
) -> list[Piece]:
    """The rendered chat as consecutive pieces; `rendered(pieces)` is the rendered string.

    kind: PROMPT (never a target), REASONING (a target if reasoning is trained), ANSWER (a target).
    Only assistant turns after the last user message have REASONING/ANSWER pieces.
    """
    validate_nano3_conversation(messages, conversation_id)
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    start, end = marker(IM_START_TOKEN), marker(IM_END_TOKEN)
    pieces: list[Piece] = []

    def prompt(*items: Piece | str) -> None:  # a str is text; markers come in as marker pieces
        pieces.extend(item if isinstance(item, Piece) else Piece(item) for item in items if item)

    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    prompt(start, "system\n" + system, end, "\n")
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "system":
            continue
        if role == "tool":
            if index == 0 or messages[index - 1]["role"] != "tool":
                prompt(start, "user\n")
            prompt(f"<tool_response>\n{message['content']}\n</tool_response>\n")
            if index == len(messages) - 1 or messages[index + 1]["role"] != "tool":
                prompt(end, "\n")
            continue
        if role == "user":
            prompt(start, f"user\n{message['content']}", end, "\n")
            continue
        prompt(start, "assistant\n")
        body = _assistant_body(message, old=index < last_user)
        if index < last_user:
            prompt(*(piece.text for piece in body), end, "\n")
        else:
            pieces.extend(body)
            pieces.append(marker(IM_END_TOKEN, ANSWER))
            prompt("\n")
    if add_generation_prompt:
        prompt(start, "assistant\n" + (THINK_ON if enable_thinking else THINK_OFF))
    return pieces


def _assistant_body(message: dict, old: bool) -> list[Piece]:
    """An assistant turn between `<|im_start|>assistant\\n` and `<|im_end|>`, as text pieces."""
    reasoning = message.get("reasoning_content")
    reasoning = reasoning if isinstance(reasoning, str) and reasoning.strip() else ""
    answer = message.get("content") if isinstance(message.get("content"), str) else ""
    calls = message.get("tool_calls") or []
    if old:  # history: the reasoning is dropped, what followed </think> stays
        if calls:
            return [Piece(THINK_OFF + answer.strip() + "\n" + _render_calls(calls))]
        return [Piece((THINK_OFF + ("\n" if reasoning else "") + answer).strip())]
    # The published template trims the whole turn, so trailing blanks of the answer go, leading stay.
    tail = answer.rstrip()
    if calls:
        tail = tail + "\n" if tail or not reasoning else ""
    if reasoning:
        after = "\n" if tail or calls else ""  # no newline after </think> when nothing follows
        body = [Piece(THINK_ON), Piece(reasoning + "\n</think>" + after, REASONING)]
    else:
        body = [Piece(THINK_OFF)]
    if tail or calls:
        body.append(Piece(tail + _render_calls(calls), ANSWER))
    return body


def _render_calls(calls: list[dict]) -> str:
    text = ""
    for call in calls:
        call = call.get("function", call)
        text += f"<tool_call>\n<function={call['name']}>\n"
        for key, value in call.get("arguments", {}).items():
            value = json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list, tuple)) else str(value)
            text += f"<parameter={key}>\n{value}\n</parameter>\n"
        text += "</function>\n</tool_call>\n"
    return text


def render_nano3(messages: Sequence[dict], add_generation_prompt: bool = False, enable_thinking: bool = True) -> str:
    """The chat as text in the nano3 format (equal to `apply_chat_template` with NANO3_CHAT_TEMPLATE)."""
    return rendered(nano3_pieces(messages, add_generation_prompt, enable_thinking))


# ---------------------------------------------------------------------------------------------------
# Token ids and loss masks
# ---------------------------------------------------------------------------------------------------


def tokenize_nano3_conversation(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict], train_reasoning: bool = True,
    loss_on: str = "assistant", conversation_id: str | int | None = None,
) -> tuple[list[int], list[int]]:
    """(input ids, 0/1 loss mask) of `messages` in the nano3 format; see the module docstring for the
    mask (`loss_on="all"`: every token is a target). A chat with no assistant turn after its last user
    message has nothing to train: an error."""
    if loss_on not in ("assistant", "all"):
        raise NemotronError(f"loss_on={loss_on!r} is not supported; use 'assistant' or 'all'")
    pieces = nano3_pieces(messages, conversation_id=conversation_id)
    if loss_on == "assistant" and not any(piece.kind == ANSWER for piece in pieces):
        where = f"conversation {conversation_id!r}" if conversation_id is not None else "conversation"
        raise NemotronError(f"{where}: no assistant turn after the last user message, so no token would "
                            "be trained; end the chat with an assistant message")
    everything = int(loss_on == "all")
    return encode_pieces(tokenizer, pieces, {PROMPT: everything, REASONING: int(train_reasoning) | everything,
                                             ANSWER: 1})


def tokenize_nano3_prompt(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict], enable_thinking: bool = True,
) -> list[int]:
    """Token ids to generate the next assistant turn from, reasoning on or off."""
    ids, _ = encode_pieces(tokenizer, nano3_pieces(messages, True, enable_thinking), {})
    return ids


def split_reasoning(completion: str) -> tuple[str | None, str]:
    """A generated assistant turn (after the generation prompt) -> (reasoning or None, answer).

    With reasoning on the prompt already holds `<think>\\n`, so a well-formed completion is
    `reasoning\\n</think>\\nanswer`; None means the model never closed its thoughts."""
    if "</think>" not in completion:
        return None, ""
    reasoning, _, answer = completion.partition("</think>")
    return reasoning.strip(), answer.strip()
