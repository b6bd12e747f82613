"""Post-training records in the nano3 template: the rendering equals the Jinja template's, and the loss
mask is exactly what the record's `loss_mode` names, for every dataset family of the fixtures and for
seeded random records (a failure prints its seed).

The oracle for the mask is the Jinja template itself: `{% generation %}` marks every assistant turn as
the template renders it, so `assistant_all` must train exactly those spans less each turn's opening
`<think>\\n` / `<think></think>` (the generation prompt), and `final_only` exactly the text after the
last turn's `</think>`.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from nemotron.data_prep.chat.nano3 import NANO3_CHAT_TEMPLATE, THINK_OFF, THINK_ON, render_nano3
from nemotron.data_prep.chat.records import (
    LOSS_MODES,
    TOOL_USE,
    Inexpressible,
    record_to_nano2,
    record_to_nano3,
    tokenize_nano3_record,
)
from nemotron.data_prep.post_training.records import Rejected, normalize_record
from nemotron.data_prep.post_training.schema import write_records
from nemotron.data_prep.post_training.selection import selected_conversations
from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nemotron_post_training"
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures/nemotron_post_training")
FAMILIES = ("math", "proofs", "science", "agentic", "chat")


def fixture_records() -> list[dict]:
    records = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        family = "chat" if path.stem.startswith("chat") else path.stem
        for line_number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                raw = json.loads(line)
                records.append(normalize_record(family, raw, family, path.stem, f"{path.name}:{line_number}"))
            except Rejected:
                continue  # the normalize step counts these; its own tests cover them
    return records


RECORDS = fixture_records()


# --------------------------------------------------------------------------------------------------
# seeded random records, beyond the fixtures
# --------------------------------------------------------------------------------------------------

WORDS = ["alpha", "beta", "x", "2+3", "naïve", "日本", "  ", "\n", "{", "}", "<b>", "tab\t", "\\boxed{4}", "é"]


def _text(rng: random.Random, blank_ok: bool = False) -> str:
    text = "".join(rng.choice(WORDS) + rng.choice([" ", "", "\n"]) for _ in range(rng.randint(1, 6)))
    return text if blank_ok or text.strip() else "word " + text


def _value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["str", "int", "float", "bool", "none", "list", "dict"] if depth < 2 else ["str", "int"])
    return {"str": lambda: _text(rng), "int": lambda: rng.randint(-50, 50),
            "float": lambda: rng.choice([0.5, 1.0, -2.25]),
            "bool": lambda: rng.random() < 0.5, "none": lambda: None,
            "list": lambda: [_value(rng, depth + 1) for _ in range(rng.randint(0, 2))],
            "dict": lambda: {f"k{i}": _value(rng, depth + 1) for i in range(rng.randint(0, 2))}}[kind]()


def random_raw(rng: random.Random) -> dict:
    """An Agentic-v1-shaped raw record: system prompt, turns with reasoning, tool calls and results."""
    tools = [{"type": "function", "function": {"name": name, "description": "does " + name,
                                               "parameters": {"type": "object", "properties": {}}}}
             for name in ("lookup", "compute")]
    messages = [{"role": "system", "content": _text(rng)}] if rng.random() < 0.6 else []
    for _ in range(rng.randint(1, 3)):
        messages.append({"role": "user", "content": _text(rng)})
        for _ in range(rng.choice([0, 0, 1, 2])):  # tool rounds before the answer
            calls = [{"id": f"c{len(messages)}{i}", "type": "function",
                      "function": {"name": rng.choice(["lookup", "compute"]),
                                   "arguments": json.dumps({f"a{j}": _value(rng) for j in range(rng.randint(0, 3))})}}
                     for i in range(rng.randint(1, 2))]
            turn = {"role": "assistant", "content": _text(rng) if rng.random() < 0.3 else None, "tool_calls": calls}
            if rng.random() < 0.7:
                turn["reasoning_content"] = _text(rng, blank_ok=True)
            messages.append(turn)
            messages += [{"role": "tool", "tool_call_id": call["id"], "content": _text(rng)} for call in calls]
        turn = {"role": "assistant", "content": _text(rng, blank_ok=rng.random() < 0.2)}
        if rng.random() < 0.7:
            turn["reasoning_content"] = _text(rng, blank_ok=True)
        messages.append(turn)
    return {"uuid": str(rng.random()), "messages": messages, "tools": tools, "reasoning": rng.choice(["on", "off"])}


# --------------------------------------------------------------------------------------------------
# the oracle
# --------------------------------------------------------------------------------------------------


def jinja(messages: list[dict]) -> tuple[str, list[str]]:
    """The Jinja template's text and its `{% generation %}` spans (each assistant turn as rendered)."""
    rendered, indices = render_jinja_template([messages], chat_template=NANO3_CHAT_TEMPLATE,
                                              return_assistant_tokens_mask=True)
    text = rendered[0]
    return text, [text[start:end] for start, end in indices[0]]


def expected_targets(spans: list[str], loss_mode: str) -> list[str]:
    if loss_mode == "final_only":
        last = spans[-1]
        return [last.removeprefix(THINK_OFF) if last.startswith(THINK_OFF)
                else last.rpartition("\n</think>")[2].removeprefix("\n")]
    return [span.removeprefix(THINK_ON) if span.startswith(THINK_ON) else span.removeprefix(THINK_OFF)
            for span in spans]


def trained_runs(tokenizer, ids: list[int], mask: list[int]) -> list[str]:
    runs, run = [], []
    for token, target in zip(ids, mask, strict=True):
        if target:
            run.append(token)
        elif run:
            runs.append(tokenizer.decode(run))
            run = []
    return runs + ([tokenizer.decode(run)] if run else [])


def check(tokenizer, conversation: dict, loss_mode: str) -> None:
    conversation = {**conversation, "loss_mode": loss_mode}
    text, spans = jinja(conversation["messages"])
    assert render_nano3(conversation["messages"]) == text
    assert tokenizer.apply_chat_template(conversation["messages"], tokenize=False) == text
    ids, mask = tokenize_nano3_record(tokenizer, conversation)
    assert tokenizer.decode(ids) == text
    assert trained_runs(tokenizer, ids, mask) == expected_targets(spans, loss_mode)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    rng = random.Random(0)
    corpus = [render_nano3(record_to_nano3(r)["messages"]) for r in RECORDS] * 5 + [_text(rng) for _ in range(200)]
    folder = tmp_path_factory.mktemp("tok") / "nano3"
    train_tokenizer(corpus, vocab_size=600, output_dir=folder, chat_template=NANO3_CHAT_TEMPLATE)
    return load_tokenizer(folder)


# --------------------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------------------


def test_the_fixtures_cover_every_family_tools_multi_turn_and_both_loss_modes():
    families = Counter(r["dataset"] for r in RECORDS)
    assert set(families) == set(FAMILIES), families
    conversations = [record_to_nano3(r) for r in RECORDS]
    assert any(m.get("tool_calls") for c in conversations for m in c["messages"])
    assert any(m["role"] == "tool" for c in conversations for m in c["messages"])
    assert any(sum(m["role"] == "user" for m in c["messages"]) > 1 for c in conversations)
    assert {c["loss_mode"] for c in conversations} == set(LOSS_MODES)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_renders_as_the_jinja_template_and_masks_what_its_loss_mode_names(tokenizer, family):
    for record in (r for r in RECORDS if r["dataset"] == family):
        conversation = record_to_nano3(record)
        for loss_mode in LOSS_MODES:  # the record's own mode, and the other one
            check(tokenizer, conversation, loss_mode)


def test_reasoning_and_tool_calls_are_targets_under_assistant_all_and_not_under_final_only(tokenizer):
    record = next(r for r in RECORDS if r["dataset"] == "agentic" and r["meta_tool_use"]["calls"] > 1)
    conversation = record_to_nano3(record)
    reasoning = next(m["reasoning_content"] for m in conversation["messages"] if m.get("tool_calls"))
    for loss_mode, trained in (("assistant_all", True), ("final_only", False)):
        ids, mask = tokenize_nano3_record(tokenizer, {**conversation, "loss_mode": loss_mode})
        text = "".join(trained_runs(tokenizer, ids, mask))
        assert (reasoning in text) == trained and ("<tool_call>" in text) == trained
        assert text.endswith("<|im_end|>")


def test_a_failed_proof_attempt_is_context_under_final_only(tokenizer):
    record = next(r for r in RECORDS if r["loss_mode"] == "final_only")
    conversation = record_to_nano3(record)
    first_attempt = next(m["content"] for m in conversation["messages"] if m["role"] == "assistant")
    ids, mask = tokenize_nano3_record(tokenizer, conversation)
    trained = trained_runs(tokenizer, ids, mask)
    assert len(trained) == 1 and first_attempt.strip() not in trained[0]
    assert trained[0] == conversation["messages"][-1]["content"].rstrip() + "<|im_end|>"


@pytest.mark.parametrize("seed", range(40))
def test_seeded_random_records_match_the_jinja_template(tokenizer, seed):
    rng = random.Random(seed)
    try:
        record = normalize_record(rng.choice(["agentic", "chat"]), random_raw(rng), "random", "r", str(seed))
    except Rejected as why:
        pytest.skip(f"seed {seed}: the normalize step rejects it ({why.reason})")
    conversation = record_to_nano3(record)
    for loss_mode in LOSS_MODES:
        try:
            check(tokenizer, conversation, loss_mode)
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, loss_mode {loss_mode}: {error}") from None


def test_records_the_template_cannot_express_are_counted_by_reason(tmp_path):
    agentic = [r for r in RECORDS if r["meta_tool_use"]["calls"] > 0]
    list_arguments = json.loads(json.dumps(agentic[0]))
    call = next(m for m in list_arguments["messages"] if m.get("recipient"))
    call["content"] = "[1, 2]"  # JSON, but not an object: no <parameter=KEY> to render it with
    ends_in_call = json.loads(json.dumps(agentic[0]))
    ends_in_call["messages"] = ends_in_call["messages"][: ends_in_call["messages"].index(
        next(m for m in ends_in_call["messages"] if m.get("recipient"))) + 1]
    ends_in_call["loss_mode"] = "final_only"
    unknown = {**RECORDS[0], "loss_mode": "everything"}
    path = write_records([*RECORDS, list_arguments, ends_in_call, unknown], tmp_path / "selected.parquet")
    conversations, skipped = selected_conversations(path, "nano3")
    assert skipped == {"tool arguments not a JSON object": 1, "final_only record ends with a tool call": 1,
                       "unknown loss_mode 'everything'": 1}
    assert len(conversations) == len(RECORDS)
    with pytest.raises(Inexpressible, match="not a JSON object"):
        record_to_nano3(list_arguments)


def test_the_nano2_converter_keeps_final_answers_and_counts_tool_use():
    with_tools = [r for r in RECORDS if r["meta_tool_use"]["calls"] > 0]
    with pytest.raises(Inexpressible, match=TOOL_USE):
        record_to_nano2(with_tools[0])
    plain = next(r for r in RECORDS if r["dataset"] == "science")
    conversation = record_to_nano2(plain)
    assert [m["role"] for m in conversation["messages"]] == ["user", "assistant"]
    assert "<think>" not in conversation["messages"][1]["content"]
