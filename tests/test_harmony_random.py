"""Harmony render and parse vs openai-harmony 0.0.8 on seeded random conversations (issue 22).

The hand-written cases in test_harmony.py pin the format; these check it far off that path: random
tool schemas (nested objects, arrays, anyOf, enums, nullable and list types, defaults, titles,
examples), developer instructions, every system content option we render, 1-3 turns with analysis,
preambles, tool calls (`<|constrain|>json`, plain `json`, no content type) and tool results,
`auto_drop_analysis` on and off, and contents that are exactly, start with, end with or contain each
marker. Every case must give the reference's token ids, text, and parse.

    fast tier: HARMONY_CASES_FAST conversations (default 200), part of `make test-fast`
    deep tier: HARMONY_CASES conversations (default 5000), marked slow

A failure names the seed (rerun one case with `HARMONY_SEED=<seed>`) and the first difference.
"""

from __future__ import annotations

import difflib
import json
import os
import random
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from nemotron.data_prep.chat.harmony import (
    CALL,
    CHANNEL,
    CHANNELS,
    CONSTRAIN,
    DEFAULT_MODEL_IDENTITY,
    END,
    MESSAGE,
    RETURN,
    SPECIAL_TOKEN_IDS,
    START,
    HarmonyMessage,
    developer_content,
    kept_messages,
    parse,
    render,
    render_ids,
    system_content,
)
from test_harmony import reference  # noqa: F401  (the session fixture: openai-harmony, offline)

MARKERS = [START, MESSAGE, END, CALL, RETURN, CHANNEL, CONSTRAIN, "<|endoftext|>", "<|startoftext|>"]
WORDS = ["the", "Lyon", "Zürich", "42", "  ", "\n", "\n\n", "日本語", "émoji 🙂", "{", "}", '"', "to=x", "json",
         "analysis", "final", "<|", "|>", "<", "|", "\t", "€"]


# ---------------------------------------------------------------------------------------------------
# Random inputs
# ---------------------------------------------------------------------------------------------------


def random_text(rng: random.Random, allow_empty: bool = True) -> str:
    """Plain text, or a text that is, starts with, ends with or holds a marker (1 case in 3)."""
    words = [rng.choice(WORDS) if rng.random() < 0.5 else rng.choice(["a", "b", "word", "city"])
             for _ in range(rng.randint(0 if allow_empty else 1, 8))]
    text = " ".join(words)
    if rng.random() < 1 / 3:
        marker = rng.choice(MARKERS)
        middle = len(text) // 2
        text = rng.choice([marker, marker + text, text + marker, text[:middle] + marker + text[middle:]])
    return text or ("" if allow_empty else "x")


def random_schema(rng: random.Random, depth: int = 0) -> dict:
    kinds = ["string", "enum", "number", "integer", "boolean", "array", "list_type", "any_of"]
    kinds += ["object"] if depth < 2 else []
    kind = rng.choice(kinds)
    if kind == "enum":
        schema = {"type": "string", "enum": rng.sample(["c", "f", "k", "auto", "none"], rng.randint(1, 3))}
    elif kind == "array":
        schema = {"type": "array"} | ({"items": random_schema(rng, depth + 1)} if rng.random() < 0.8 else {})
    elif kind == "list_type":
        schema = {"type": rng.sample(["string", "integer", "number", "boolean", "null"], rng.randint(1, 3))}
    elif kind == "any_of":
        schema = {"anyOf": [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    elif kind == "object":
        properties = {f"p{i}_{rng.choice(['city', 'unit', 'days', 'x'])}": random_schema(rng, depth + 1)
                      for i in range(rng.randint(0, 4))}
        schema = {"type": "object", "properties": properties}
        if properties and rng.random() < 0.7:
            schema["required"] = rng.sample(sorted(properties), rng.randint(1, len(properties)))
    else:
        schema = {"type": kind}
    if rng.random() < 0.3:
        schema["description"] = random_text(rng, allow_empty=False).replace("\n", " ")
    if rng.random() < 0.2:
        schema["title"] = rng.choice(["Unit", "City name", "Options"])
    if rng.random() < 0.2:
        schema["nullable"] = True
    if rng.random() < 0.15:
        schema["examples"] = rng.sample(["Lyon", "Paris", 3, "x y"], rng.randint(1, 2))
    if rng.random() < 0.25:
        enum = schema.get("enum")
        schema["default"] = rng.choice(enum) if enum else rng.choice(["c", 3, 2.5, True, None, [1, 2], {"a": 1}])
    return schema


def random_tools(rng: random.Random) -> list[dict]:
    tools = []
    for index in range(rng.randint(1, 3)):
        function = {"name": f"tool_{index}_{rng.choice(['weather', 'search', 'ping'])}"}
        function["description"] = "\n".join(random_text(rng, allow_empty=False).replace("\n", " ")
                                            for _ in range(rng.randint(1, 2)))
        if rng.random() < 0.8:
            function["parameters"] = random_schema(rng) | {"type": "object"} if rng.random() < 0.3 else {
                "type": "object", "properties": {f"a{i}": random_schema(rng, 1) for i in range(rng.randint(0, 4))}}
        tools.append({"type": "function", "function": function})
    return tools


def random_arguments(rng: random.Random) -> str:
    value = {f"a{i}": rng.choice([random_text(rng), rng.randint(-5, 5), [1, "x"], None])
             for i in range(rng.randint(0, 3))}
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5)
    return text if rng.random() < 0.85 else random_text(rng)  # a model may emit arguments that are not JSON


@dataclass
class Case:
    ours: list[HarmonyMessage]
    theirs: Any  # the same conversation as an openai_harmony.Conversation
    auto_drop_analysis: bool
    tools: list[dict]


def random_conversation(rng: random.Random, oh) -> Case:
    ours, theirs = [], []

    def add(role, content, name=None, channel=None, recipient=None, content_type=None):
        ours.append(HarmonyMessage(role, content, name=name, channel=channel, recipient=recipient,
                                   content_type=content_type))
        message = oh.Message.from_author_and_content(oh.Author(role=oh.Role(role), name=name), content)
        message = message.with_channel(channel) if channel else message
        message = message.with_recipient(recipient) if recipient else message
        theirs.append(message.with_content_type(content_type) if content_type else message)

    tools = random_tools(rng) if rng.random() < 0.6 else []
    if rng.random() < 0.85:
        effort = rng.choice(["low", "medium", "high"])
        identity = rng.choice([None, "", "You are a careful assistant.", DEFAULT_MODEL_IDENTITY])
        cutoff, date = rng.choice([None, "", "2024-06"]), rng.choice([None, "2025-08-05"])
        channels = rng.choice([CHANNELS, CHANNELS, ("analysis", "final"), ("final",), None])
        required = rng.random() < 0.7
        ours.append(HarmonyMessage("system", system_content(effort, bool(tools), identity, cutoff, date, channels,
                                                            required)))
        config = oh.ChannelConfig(valid_channels=list(channels), channel_required=required) if channels else None
        content = oh.SystemContent(model_identity=identity, knowledge_cutoff=cutoff, conversation_start_date=date,
                                   reasoning_effort=oh.ReasoningEffort(effort.capitalize()), channel_config=config)
        theirs.append(oh.Message.from_role_and_content(oh.Role.SYSTEM, content))
    instructions = random_text(rng) if rng.random() < 0.6 else None
    if tools or instructions is not None:
        ours.append(HarmonyMessage("developer", developer_content(instructions, tools)))
        content = oh.DeveloperContent.new()
        content = content.with_instructions(instructions) if instructions is not None else content
        if tools:
            content = content.with_function_tools([
                oh.ToolDescription.new(t["function"]["name"], t["function"]["description"],
                                       parameters=t["function"].get("parameters")) for t in tools])
        theirs.append(oh.Message.from_role_and_content(oh.Role.DEVELOPER, content))
    names = [f"functions.{t['function']['name']}" for t in tools] or ["functions.lookup", "browser.search"]
    turns = rng.randint(1, 3)
    for turn in range(turns):
        add("user", random_text(rng), name=rng.choice([None, None, "alice"]))
        for _ in range(rng.randint(0, 2)):  # reasoning, a preamble, tool calls and their results
            step = rng.choice(["analysis", "preamble", "call"])
            if step == "analysis":
                add("assistant", random_text(rng), channel="analysis")
            elif step == "preamble":
                add("assistant", random_text(rng), channel="commentary")
            else:
                tool = rng.choice(names)
                add("assistant", random_arguments(rng), channel=rng.choice(["commentary", "analysis"]), recipient=tool,
                    content_type=rng.choice([f"{CONSTRAIN}json", "json", None]))
                if turn < turns - 1 or rng.random() < 0.8:
                    add("tool", random_text(rng), name=tool, channel="commentary", recipient="assistant")
        if rng.random() < 0.5:
            add("assistant", random_text(rng), channel="analysis")
        if turn < turns - 1 or rng.random() < 0.85:
            add("assistant", random_text(rng), channel="final")
    return Case(ours, oh.Conversation.from_messages(theirs), rng.random() < 0.5, tools)


# ---------------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------------


def first_difference(ours: list[int], theirs: list[int], decode) -> str:
    """The first block where two id lists differ, each token decoded on its own (so the special token
    `<|end|>` reads as one piece and the text `<|end|>` as several), with the text before it."""
    opcode = next(op for op in difflib.SequenceMatcher(None, ours, theirs, autojunk=False).get_opcodes()
                  if op[0] != "equal")
    _, i1, i2, j1, j2 = opcode
    tokens = lambda ids: [(token, decode([token])) for token in ids[:12]]  # noqa: E731
    return (f"token {i1}, after {decode(ours[max(0, i1 - 8):i1])!r}:\n  ours   {tokens(ours[i1:i2])}"
            f"\n  theirs {tokens(theirs[j1:j2])}")


def check_case(seed: int, oh, encoding) -> None:
    case = random_conversation(random.Random(seed), oh)
    ours, auto_drop = case.ours, case.auto_drop_analysis
    config = oh.RenderConversationConfig(auto_drop_analysis=auto_drop)
    where = f"seed {seed} (rerun: HARMONY_SEED={seed}), auto_drop_analysis={auto_drop}"
    for training in (True, False):
        expected = (encoding.render_conversation_for_training(case.theirs, config) if training
                    else encoding.render_conversation(case.theirs, config))
        got = render_ids(ours, training=training, auto_drop_analysis=auto_drop)
        assert got == expected, f"{where}, training={training}: {first_difference(got, expected, encoding.decode_utf8)}"
        assert render(ours, training, auto_drop) == encoding.decode_utf8(expected), where
    kept = kept_messages(ours, auto_drop)
    # The reference parser reads our ids back into the same messages (markers in content stay text);
    # it renders a named user as `user:alice` but refuses that header when parsing, so those are skipped.
    if not any(m.role == "user" and m.name for m in kept):
        parsed = encoding.parse_messages_from_completion_tokens(render_ids(ours, auto_drop_analysis=auto_drop), None)
        assert [(m.author.role.value, m.author.name, m.channel, m.recipient, m.content_type, m.content[0].text)
                for m in parsed] == [(m.role, m.name, m.channel, m.recipient, m.content_type, m.content)
                                     for m in kept], where
    # Our text parser reads back every render whose contents hold no marker (text cannot tell them apart).
    if not any(marker in m.content for m in kept for marker in SPECIAL_TOKEN_IDS):
        assert parse(render(ours, auto_drop_analysis=auto_drop)) == kept, where


def seeds(variable: str, default: int, first: int) -> range:
    """The tier's seeds (`first`, `first + 1`, ...), or the one seed HARMONY_SEED names."""
    if os.environ.get("HARMONY_SEED"):
        seed = int(os.environ["HARMONY_SEED"])
        return range(seed, seed + 1)
    return range(first, first + int(os.environ.get(variable, default)))


def test_random_conversations_match_openai_harmony(reference):  # noqa: F811
    oh, encoding = reference
    for seed in seeds("HARMONY_CASES_FAST", 200, first=0):
        check_case(seed, oh, encoding)


@pytest.mark.slow
def test_many_random_conversations_match_openai_harmony(reference):  # noqa: F811
    oh, encoding = reference
    cases = seeds("HARMONY_CASES", 5000, first=1_000_000)
    for seed in cases:
        check_case(seed, oh, encoding)
    print(f"harmony: {len(cases)} random conversations match openai-harmony 0.0.8", file=sys.stderr)


def test_the_generator_covers_the_case_mix(reference):  # noqa: F811
    """The random cases reach what they claim to: each marker as a whole content, tool calls and
    results, anyOf / list types / nullable / defaults / titles in schemas, both analysis settings."""
    oh, _ = reference
    seen = set()
    for seed in range(300):
        case = random_conversation(random.Random(seed), oh)
        seen |= {f"drop={case.auto_drop_analysis}"} | {m.role for m in case.ours}
        seen |= {f"whole:{m.content}" for m in case.ours if m.content in MARKERS}
        seen |= {f"type:{m.content_type}" for m in case.ours if m.is_tool_call}
        schemas = json.dumps(case.tools)
        seen |= {key for key in ('"anyOf"', '"nullable"', '"default"', '"title"', '"enum"', '"type": ["', '"items"',
                                 '"examples"') if key in schemas}
    wanted = {"drop=True", "drop=False", "tool", "system", "developer", "user", "assistant", f"type:{CONSTRAIN}json",
              "type:json", "type:None", '"anyOf"', '"nullable"', '"default"', '"title"', '"enum"', '"type": ["',
              '"items"', '"examples"'} | {f"whole:{marker}" for marker in MARKERS}
    assert wanted <= seen, sorted(wanted - seen)
