"""Harmony render and parse, checked against the reference implementation openai-harmony==0.0.8.

openai-harmony needs the o200k_base vocabulary file, which it would download. Offline, the session
fixture rebuilds it from the `quicktok-v1==0.4.0` wheel (`quicktok/data/o200k.vocab`: a uint32
count, then records of uint16 length, token bytes, uint32 rank) as `base64(bytes) rank` lines in rank
order, and points TIKTOKEN_ENCODINGS_BASE at it. openai-harmony checks the file's SHA-256, so a
wrong rebuild fails here instead of passing silently.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import struct
from pathlib import Path

import pytest

from nemotron.data_prep.chat.harmony import (
    HarmonyError,
    HarmonyMessage,
    developer_content,
    parse,
    render,
    render_ids,
    system_content,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
                "days": {"type": "integer", "default": 1},
                "tags": {"type": "array", "items": {"type": "string"}},
                "strict": {"type": ["boolean", "null"]},
            },
            "required": ["city"],
        },
    },
}
PING = {"type": "function", "function": {"name": "ping", "description": "Check the service.\nNo arguments."}}


def rebuild_o200k_base(folder: Path) -> Path:
    vocab = Path(importlib.util.find_spec("quicktok").submodule_search_locations[0]) / "data" / "o200k.vocab"
    data = vocab.read_bytes()
    (count,), offset, records = struct.unpack_from("<I", data, 0), 4, []
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, offset)
        token = data[offset + 2 : offset + 2 + length]
        (rank,) = struct.unpack_from("<I", data, offset + 2 + length)
        records.append((rank, token))
        offset += 2 + length + 4
    assert offset == len(data)
    path = folder / "o200k_base.tiktoken"
    path.write_text("".join(f"{base64.b64encode(token).decode()} {rank}\n" for rank, token in sorted(records)))
    return path


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiktoken")
    rebuild_o200k_base(folder)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(folder)
    import openai_harmony as oh

    return oh, oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)


def ours_and_theirs(oh, tools: bool):
    """The same conversation twice: our HarmonyMessages and openai-harmony Messages."""
    effort = oh.ReasoningEffort.HIGH
    theirs = [oh.Message.from_role_and_content(oh.Role.SYSTEM, oh.SystemContent.new().with_reasoning_effort(effort))]
    ours = [HarmonyMessage("system", system_content("high", has_function_tools=tools))]
    developer = oh.DeveloperContent.new().with_instructions("Answer briefly. Use °C.")
    if tools:
        developer = developer.with_function_tools(
            [oh.ToolDescription.new(t["function"]["name"], t["function"]["description"],
                                    parameters=t["function"].get("parameters")) for t in (WEATHER, PING)]
        )
    theirs.append(oh.Message.from_role_and_content(oh.Role.DEVELOPER, developer))
    ours.append(HarmonyMessage("developer",
                               developer_content("Answer briefly. Use °C.", [WEATHER, PING] if tools else [])))
    turns = [
        ("user", None, None, None, None, "Weather in Lyon and Zürich? 日本語 too."),
        ("assistant", "analysis", None, None, None, "Two lookups; call get_weather twice.\n"),
    ]
    if tools:
        turns += [
            ("assistant", "commentary", "functions.get_weather", "<|constrain|>json", None, '{"city": "Lyon"}'),
            ("tool", "commentary", "assistant", None, "functions.get_weather", '{"temp_c": 14}'),
            ("assistant", "commentary", "functions.get_weather", "<|constrain|>json", None, '{"city": "Zürich"}'),
            ("tool", "commentary", "assistant", None, "functions.get_weather", '{"temp_c": 9}'),
            ("assistant", "analysis", None, None, None, "Both results in; answer."),
        ]
    turns.append(("assistant", "final", None, None, None, "Lyon 14 °C, Zürich 9 °C.  "))
    for role, channel, recipient, content_type, name, content in turns:
        ours.append(HarmonyMessage(role, content, name=name, channel=channel, recipient=recipient,
                                   content_type=content_type))
        author = oh.Author(role=oh.Role(role), name=name)
        message = oh.Message.from_author_and_content(author, content).with_channel(channel)
        if recipient:
            message = message.with_recipient(recipient)
        if content_type:
            message = message.with_content_type(content_type)
        theirs.append(message)
    return ours, oh.Conversation.from_messages(theirs)


@pytest.mark.parametrize("tools", [True, False])
def test_render_matches_openai_harmony(reference, tools):
    oh, encoding = reference
    ours, theirs = ours_and_theirs(oh, tools)
    keep_analysis = oh.RenderConversationConfig(auto_drop_analysis=False)
    for training, ids in [
        (True, encoding.render_conversation_for_training(theirs, keep_analysis)),
        (False, encoding.render_conversation(theirs, keep_analysis)),
    ]:
        assert render_ids(ours, training=training) == ids
        assert render(ours, training=training) == encoding.decode_utf8(ids)
    # The reference's default drops reasoning before the first final answer; ours can too.
    default = encoding.render_conversation_for_training(theirs)
    assert render_ids(ours, auto_drop_analysis=True) == default
    assert render(ours, auto_drop_analysis=True) == encoding.decode_utf8(default)
    assert render(ours).endswith("<|return|>") and render(ours, training=False).endswith("<|end|>")
    if tools:
        assert ('<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json'
                '<|message|>{"city": "Lyon"}<|call|>') in render(ours)


@pytest.mark.parametrize("tools", [True, False])
def test_parse_gives_back_the_messages(reference, tools):
    oh, encoding = reference
    ours, theirs = ours_and_theirs(oh, tools)
    text = render(ours)
    assert parse(text) == ours
    assert parse(render(ours, training=False)) == ours
    # The reference parser reads our ids back into the same headers and contents.
    parsed = encoding.parse_messages_from_completion_tokens(render_ids(ours), role=None)
    assert [(m.author.role.value, m.author.name, m.channel, m.recipient, m.content_type, m.content[0].text)
            for m in parsed] == [(m.role, m.name, m.channel, m.recipient, m.content_type, m.content) for m in ours]


def test_special_token_ids(reference):
    _, encoding = reference
    from nemotron.data_prep.chat.harmony import SPECIAL_TOKEN_IDS, o200k_harmony

    for marker, token_id in SPECIAL_TOKEN_IDS.items():
        assert encoding.encode(marker, allowed_special="all") == [token_id]
        assert o200k_harmony().encode_single_token(marker) == token_id


@pytest.mark.parametrize(
    "text, problem",
    [
        ("<|start|>user<|message|>hi", "has no <|end|>"),
        ("<|start|>user<|message|>hi<|start|>assistant<|channel|>final<|message|>yo<|return|>", "has no <|end|>"),
        ("user<|message|>hi<|end|>", "expected <|start|>"),
        ("<|start|>user hi<|end|>", "no <|message|>"),
        ("", "empty"),
        ("<|start|>assistant<|channel|>final<|message|>hi<|call|>", "is not an assistant tool call"),
    ],
)
def test_parse_refuses_malformed_strings(text, problem):
    with pytest.raises(HarmonyError, match=problem.replace("|", r"\|")):
        parse(text)


def test_unknown_role_cannot_be_rendered():
    with pytest.raises(HarmonyError, match="unknown Harmony role 'ipython'"):
        render([HarmonyMessage("ipython", "x")])
