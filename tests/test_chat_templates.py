"""The chat templates by name (`nemotron.data_prep.chat.templates`): every registered template goes
through the SFT pipeline (`run_sft_pipeline(chat_template=...)` -> sharded packed Parquet) with the
same ids and loss masks as the template's own tokenizer, reasoning and tool calls included."""

import json

import numpy as np
import pytest

from nemotron.data_prep import DataBlend, run_sft_pipeline
from nemotron.data_prep.chat.templates import CHAT_TEMPLATES, chat_template_named
from nemotron.data_prep.packing import read_packed, shift_loss_mask
from nemotron.data_prep.tokenizer import train_tokenizer
from nemotron.errors import NemotronError

PLAIN = [{"id": f"p{n}", "messages": [{"role": "system", "content": "Be brief."}] * (n % 3 == 0) + [
    {"role": "user", "content": f"Question {n}?"},
    {"role": "assistant", "content": f"Answer {n}: " + "yes " * (n % 7)}]} for n in range(40)]
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}
# What only some templates speak: reasoning traces, tool calls and tool results (nano3).
EXTRA = {
    "nano2": [],
    "nano3": [
        {"id": f"r{n}", "messages": [
            {"role": "user", "content": f"What is {n}+{n}?"},
            {"role": "assistant", "reasoning_content": f"{n} plus {n} is {2 * n}.", "content": str(2 * n)}]}
        for n in range(20)
    ] + [
        {"id": f"t{n}", "messages": [
            {"role": "user", "content": f"Weather in Paris, day {n}?"},
            {"role": "assistant", "reasoning_content": "Need the tool.", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "content": json.dumps({"temp": n})},
            {"role": "assistant", "content": f"{n} degrees."}]}
        for n in range(20)
    ] + [
        {"id": f"h{n}", "messages": [
            {"role": "user", "content": "2+3?"},
            {"role": "assistant", "reasoning_content": "add: 5", "content": "5"},
            {"role": "user", "content": f"times {n}?"},
            {"role": "assistant", "reasoning_content": f"5*{n}={5 * n}", "content": str(5 * n)}]}
        for n in range(10)
    ],
}


def test_every_registered_template_has_chats_here():
    assert set(EXTRA) == set(CHAT_TEMPLATES)


@pytest.fixture(scope="module", params=sorted(CHAT_TEMPLATES))
def run(request, tmp_path_factory):
    """One SFT pipeline run per template: chats in, sharded packed Parquet out."""
    template = chat_template_named(request.param)
    root = tmp_path_factory.mktemp(template.name)
    chats = PLAIN + EXTRA[template.name]
    (root / "chats.jsonl").write_text("".join(json.dumps(chat) + "\n" for chat in chats))
    texts = [json.dumps(chat) for chat in chats] * 3
    tokenizer = train_tokenizer(texts, 500, root / "tokenizer", chat_template=template.jinja)
    result = run_sft_pipeline(blend=DataBlend(sources=[{"path": str(root / "chats.jsonl")}], split=[0.8, 0.2, 0.0]),
                              output_dir=root / "sft", tokenizer=tokenizer, num_shards=3,
                              chat_template=template.name, pack_size=512)
    return template, chats, tokenizer, result


def test_packed_rows_hold_each_chat_once_with_the_templates_own_ids_and_masks(run):
    from nemotron.data_prep.tokenizer import load_tokenizer

    template, chats, tokenizer_dir, result = run
    tokenizer = load_tokenizer(tokenizer_dir)
    expected = {}
    for chat in chats:
        ids, mask = template.tokenize_conversation(tokenizer, chat["messages"])
        expected[tuple(ids)] = shift_loss_mask(mask)
    seen = []
    for row in (row for paths in result.data_paths.values() for path in paths for row in read_packed(path)):
        bounds = row.cu_seqlens()
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            ids = tuple(int(i) for i in row.input_ids[start:end])
            assert ids in expected, f"{template.name}: a packed sequence is no chat's tokenization"
            np.testing.assert_array_equal(row.loss_mask[start:end], expected[ids])
            seen.append(ids)
    assert sorted(seen) == sorted(expected), f"{template.name}: every chat packed exactly once"
    assert result.total_conversations == len(chats)
    if template.name == "nano3":  # the reasoning and the tool call are targets, the tool result is not
        tool_chat = next(c for c in chats if c["id"] == "t0")
        ids, mask = template.tokenize_conversation(tokenizer, tool_chat["messages"])
        trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m], skip_special_tokens=False)
        assert "Need the tool." in trained and "<function=get_weather>" in trained and '"temp"' not in trained


def test_a_tokenizer_saved_with_another_template_is_refused(run, tmp_path):
    template, chats, tokenizer_dir, _ = run
    other = next(name for name in CHAT_TEMPLATES if name != template.name)
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps(chat) + "\n" for chat in PLAIN))
    with pytest.raises(NemotronError, match=f"is not the {other} template"):
        run_sft_pipeline(blend=DataBlend(sources=[{"path": str(tmp_path / "chats.jsonl")}]), output_dir=tmp_path / "x",
                         tokenizer=tokenizer_dir, chat_template=other, pack_size=512)
