"""JSONL transforms, malformed-line handling and canonical, atomic JSONL output."""

import json

import pytest

from nemotron.data_prep.chat.nano2 import validate_conversation
from nemotron.data_prep.transforms import (
    JsonlCounts,
    convert_jsonl,
    openai_chat,
    passthrough,
    read_jsonl,
    rename,
    select,
    sft,
    sharegpt,
    sharegpt_to_messages,
    write_jsonl,
)
from nemotron.errors import NemotronError


def write_lines(path, lines):
    path.write_bytes(b"".join(line if isinstance(line, bytes) else line.encode() + b"\n" for line in lines))
    return path


def test_sft_maps_fields_and_skips_incomplete_records():
    transform = sft("question", "answer")
    assert transform({"question": "2+2?", "answer": "4", "id": 1}) == {"input": "2+2?", "output": "4"}
    assert transform({"question": "2+2?"}) is None
    assert transform({"question": "2+2?", "answer": "   "}) is None
    assert transform({"question": 3, "answer": "4"}) is None


def test_openai_chat_normalizes_roles_and_content_parts():
    record = {
        "id": "c1",
        "source": "x",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Hi "},
                    {"type": "image_url"},
                    {"type": "text", "text": "there"},
                ],
            },
            {"role": "assistant", "content": "Hello!", "name": "bot"},
        ],
    }
    result = openai_chat(keep=["id"])(record)
    assert result == {
        "id": "c1",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"},
        ],
    }
    validate_conversation(result["messages"], require_assistant=True)  # ready for the chat template


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "tool", "content": "42"}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [{}]}],
        [{"role": "user", "content": "  "}],
        "not a list",
    ],
)
def test_openai_chat_skips_what_the_template_cannot_train_on(messages):
    assert openai_chat()({"messages": messages}) is None


def test_sharegpt_writes_conversations_of_from_value_turns_from_either_chat_shape():
    openai = {"id": 1, "chat": [{"role": "developer", "content": "Be kind."}, {"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]}]}
    turns = {"id": 1, "chat": [{"from": "system", "value": "Be kind."}, {"from": "user", "value": "Hi"},
                               {"from": "chatgpt", "value": "Hello!"}]}
    expected = {"id": 1, "conversations": [{"from": "system", "value": "Be kind."}, {"from": "human", "value": "Hi"},
                                           {"from": "gpt", "value": "Hello!"}]}
    assert sharegpt("chat", keep=["id"])(openai) == sharegpt("chat", keep=["id"])(turns) == expected
    assert sharegpt("chat")({"chat": [{"role": "tool", "content": "{}"}]}) is None


def test_sharegpt_to_messages_converts_speakers_to_openai_roles():
    record = {
        "conversations": [
            {"from": "system", "value": "You are kind."},
            {"from": "human", "value": "Hi"},
            {"from": "gpt", "value": "Hello!"},
        ]
    }
    assert sharegpt_to_messages()(record) == {
        "messages": [
            {"role": "system", "content": "You are kind."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
        ]
    }
    assert (
        sharegpt_to_messages()(
            {"conversations": [{"from": "human", "value": "Hi"}, {"from": "observation", "value": "{}"}]}
        )
        is None
    )


def test_select_rename_passthrough():
    record = {"a": 1, "b": 2, "c": 3}
    assert select(["c", "a"])(record) == {"c": 3, "a": 1}
    assert select(["a", "z"])(record) is None
    assert rename({"a": "alpha"})(record) == {"alpha": 1, "b": 2, "c": 3}
    assert rename({"z": "zeta"})(record) is None
    copied = passthrough()(record)
    assert copied == record and copied is not record


def test_malformed_lines_are_counted_and_reported_with_file_and_line(tmp_path, capsys):
    path = write_lines(
        tmp_path / "data.jsonl",
        ['{"a": 1}', "", '{"a": 2', "[1, 2]", b"\xff\xfe not utf-8\n", '{"a": 3}'],
    )
    records, malformed = read_jsonl(path)
    assert records == [{"a": 1}, {"a": 3}]
    assert malformed == 3
    warnings = capsys.readouterr()
    assert warnings.out == ""  # stdout is reserved for artifact JSON
    assert f"{path}:3: skipped malformed JSONL line (invalid JSON" in warnings.err
    assert f"{path}:4:" in warnings.err and f"{path}:5:" in warnings.err and f"{path}:2:" not in warnings.err


def test_strict_mode_raises_at_the_first_malformed_line(tmp_path):
    path = write_lines(tmp_path / "data.jsonl", ['{"a": 1}', '{"a": 2', "oops"])
    with pytest.raises(NemotronError, match=f"{path}:2: malformed JSONL line"):
        read_jsonl(path, strict=True)
    with pytest.raises(NemotronError, match="not found"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_convert_counts_written_skipped_and_malformed(tmp_path):
    source = write_lines(
        tmp_path / "sharegpt.jsonl",
        [
            json.dumps(
                {"id": 1, "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]}
            ),
            json.dumps(
                {"id": 2, "conversations": [{"from": "human", "value": "Hi"}, {"from": "tool", "value": "x"}]}
            ),
            json.dumps({"id": 3}),
            "{broken",
        ],
    )
    counts = convert_jsonl(
        source, tmp_path / "out" / "chat.jsonl", [sharegpt_to_messages(keep=["id"]), select(["id", "messages"])]
    )
    assert counts == JsonlCounts(
        read=3, written=1, skipped=2, malformed=1, skipped_by={"sharegpt_to_messages(conversations)": 2}
    )
    assert counts.as_metrics()["malformed"] == 1
    lines = (tmp_path / "out" / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == [1]


def test_output_is_canonical_and_deterministic(tmp_path):
    write_jsonl([{"b": "é", "a": [1, 2]}], tmp_path / "one.jsonl")
    write_jsonl([{"a": [1, 2], "b": "é"}], tmp_path / "two.jsonl")
    assert (tmp_path / "one.jsonl").read_bytes() == '{"a":[1,2],"b":"é"}\n'.encode()
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()


def test_failed_write_leaves_no_partial_file(tmp_path):
    path = tmp_path / "out.jsonl"
    write_jsonl([{"a": 1}], path)
    with pytest.raises(NemotronError, match="record 1: cannot be written as JSON"):
        write_jsonl([{"a": 2}, {"a": float("nan")}], path)
    assert path.read_text() == '{"a":1}\n'
    with pytest.raises(NemotronError, match="all 2 records .* were skipped by transforms"):
        write_jsonl([{"a": 2}, {"a": 3}], path, [select(["missing"])])
    assert path.read_text() == '{"a":1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
