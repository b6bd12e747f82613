"""The data-prep design's names work as written: `formats.transforms` as its README calls them, and an RL
JSONL pipeline beside run_pretrain_pipeline / run_sft_pipeline (docs/data-prep.md maps every name)."""

from __future__ import annotations

import json

import pytest

from nemotron.data_prep import DataBlend, run_rl_pipeline
from nemotron.data_prep.blend import assign_split
from nemotron.data_prep.formats import transforms as design
from nemotron.data_prep.transforms import write_jsonl
from nemotron.errors import NemotronError


def test_the_design_s_import_line_and_calls_work_as_written(tmp_path):
    from nemotron.data_prep.formats.transforms import openai_chat, passthrough, rename, select, sft, sharegpt

    record = {"instruction": "Hello", "response": "Hi there!", "sys": "Be brief", "id": 7}
    assert sft(input="instruction", output="response")(record) == {"input": "Hello", "output": "Hi there!"}
    assert sft(input="instruction", output="response", system="sys")(record) == {
        "input": "Hello", "output": "Hi there!", "system": "Be brief"}
    assert sft()(record) is None  # no input/output fields: skipped, not an empty pair
    assert select("id", "sys")(record) == {"id": 7, "sys": "Be brief"}
    assert rename(input="instruction", output="response")(record) == {"input": "Hello", "output": "Hi there!"}
    assert rename(input="missing")(record) is None
    assert passthrough()(record) == record
    chat = {"turns": [{"role": "developer", "content": "Be brief"}, {"role": "user", "content": "Hi"}]}
    assert openai_chat(messages="turns")(chat) == {
        "messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Hi"}]}
    # The design's `sharegpt`: "ShareGPT format: {conversations: [...]}", from/value turns.
    share = {"turns": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]}
    assert sharegpt(conversations="turns")(share) == {"conversations": share["turns"]}
    assert sharegpt(conversations="turns")({"turns": chat["turns"]}) == {
        "conversations": [{"from": "system", "value": "Be brief"}, {"from": "human", "value": "Hi"}]}
    assert design.sharegpt_to_messages(conversations="turns")(share) == {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    assert sorted(design.__all__) == ["Transform", "openai_chat", "passthrough", "rename", "select", "sft", "sharegpt",
                                      "sharegpt_to_messages"]

    # They are our transforms: they chain in write_jsonl, which counts each skip under its name.
    counts = write_jsonl([record, {"instruction": "no answer"}], tmp_path / "sft.jsonl",
                         [rename(input="instruction", output="response"), sft()])
    assert counts.written == 1 and counts.skipped_by == {"rename(input=instruction,output=response)": 1}
    assert json.loads((tmp_path / "sft.jsonl").read_text()) == {"input": "Hello", "output": "Hi there!"}


def prompts(n: int) -> list[dict]:
    return [{"id": f"p{i}", "messages": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i)}
            for i in range(n)]


def write_lines(path, records: list[dict], extra: list[str] = ()) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "".join(line + "\n" for line in extra))


def read_split(result, split: str) -> list[dict]:
    return [json.loads(line) for path in result.data_paths.get(split, []) for line in open(path)]


def test_rl_records_are_split_by_id_written_whole_and_the_same_however_the_work_is_cut(tmp_path):
    source = tmp_path / "prompts.jsonl"
    write_lines(source, prompts(60), extra=["{not json"])
    blend = DataBlend(sources=[{"path": str(source)}], split=[0.8, 0.2, 0.0])

    result = run_rl_pipeline(blend, tmp_path / "out")
    assert result.total_records == 60 and result.skipped_records == 0
    assert result.counts["read/skipped: malformed"] == 1  # counted, not fatal, not written
    by_split = {split: read_split(result, split) for split in ("train", "valid")}
    assert sorted((r for rs in by_split.values() for r in rs), key=lambda r: r["id"]) == sorted(
        prompts(60), key=lambda r: r["id"])  # every record whole (answer kept), none twice
    for split, records in by_split.items():
        assert records and all(assign_split(r["id"], [0.8, 0.2, 0.0]) == split for r in records)
    assert json.loads((tmp_path / "out" / "data_paths.json").read_text()) == result.data_paths

    again = run_rl_pipeline(blend, tmp_path / "out")  # receipts hold: nothing is redone
    assert again.run_hash == result.run_hash
    assert again.statuses["written"] == 0 and again.statuses["skipped"] >= 1

    cut = run_rl_pipeline(blend, tmp_path / "cut", num_shards=3)  # other work items, same records per split
    for split in ("train", "valid"):
        assert sorted(r["id"] for r in read_split(cut, split)) == sorted(r["id"] for r in by_split[split])


def test_rl_records_through_a_named_transform_count_what_it_skips(tmp_path):
    source = tmp_path / "prompts.jsonl"
    records = prompts(10) + [{"id": "tool", "messages": [{"role": "tool", "content": "42"}]}]
    write_lines(source, records)
    result = run_rl_pipeline(DataBlend(sources=[{"path": str(source)}], split=[1.0, 0.0, 0.0]), tmp_path / "out",
                             transform="openai_chat")
    assert result.total_records == 10 and result.skipped_records == 1
    assert all(set(r) == {"messages"} for r in read_split(result, "train"))  # openai_chat keeps messages only

    with pytest.raises(NemotronError, match="transform='nemotron_rl' is not known; use one of"):
        run_rl_pipeline(DataBlend(sources=[{"path": str(source)}]), tmp_path / "bad", transform="nemotron_rl")


def test_run_rl_resolve_pipeline_normalizes_each_record_s_chat_and_keeps_what_its_reward_needs(tmp_path):
    from nemotron.data_prep import run_rl_resolve_pipeline

    source = tmp_path / "prompts.jsonl"
    record = {"id": "p0", "answer": "4", "messages": [{"role": "developer", "content": "Be brief."},
                                                      {"role": "user", "content": [{"type": "text", "text": "2+2?"}]}]}
    write_lines(source, [record, {"id": "tool", "answer": "1", "messages": [{"role": "tool", "content": "1"}]}])
    result = run_rl_resolve_pipeline(DataBlend(sources=[{"path": str(source)}], split=[1.0, 0.0, 0.0]),
                                     tmp_path / "out", work_item_bytes="64MiB")
    assert result.total_records == 1 and result.skipped_records == 1
    assert read_split(result, "train") == [{"id": "p0", "answer": "4", "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]}]


def test_byte_sizes_are_taken_as_the_design_writes_them(tmp_path):
    from nemotron.data_prep.sizes import parse_size
    from nemotron.data_prep.stages.plan import plan_work_items

    assert parse_size("256MB") == 256_000_000 and parse_size("64MiB") == 64 << 20 == parse_size(64 << 20)
    assert parse_size("1.5 GiB") == 3 << 29 and parse_size("512kb") == 512_000 and parse_size("100") == 100
    for bad in ("256 parsecs", "-1MB", "0B", ""):
        with pytest.raises(NemotronError, match="work_item_bytes="):
            parse_size(bad, "work_item_bytes")
    source = tmp_path / "docs.jsonl"
    write_lines(source, [{"id": i, "text": "x" * 100} for i in range(100)])
    blend = DataBlend(sources=[{"path": str(source)}])
    as_string, _ = plan_work_items(blend, "2KB")
    assert [(w.start, w.end) for w in as_string] == [(w.start, w.end) for w in plan_work_items(blend, 2000)[0]]
    assert len(as_string) > 1
