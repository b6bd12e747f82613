"""nano2 stage-1 data curation reads a post-training selection; tool-using records are counted and skipped."""

from __future__ import annotations

import pytest

from builders import make_pretrain_checkpoint  # tests/ is on sys.path under pytest
from nemotron.data_prep.chat.records import TOOL_USE
from nemotron.data_prep.conversations import filter_conversations, read_conversations
from nemotron.data_prep.post_training.schema import read_records, split_files, write_records
from nemotron.data_prep.post_training.selection import selected_conversations
from nemotron.recipes.nano2.stage1_sft.data_curation import Config, main
from nemotron.recipes.post_training_data import normalize


@pytest.fixture(scope="module")
def selected(tmp_path_factory):
    """Every normalized demo record, written as a selection file."""
    root = tmp_path_factory.mktemp("selected")
    dataset = normalize.main(normalize.Config(output_dir=root / "normalize"))
    records = [r for d in dataset.dataset_dirs for files in split_files(d).values() for r in read_records(files)]
    return write_records(records, root / "selected.parquet"), records


def test_selected_records_become_nano2_conversations(selected):
    path, records = selected
    conversations, skipped = selected_conversations(path)
    with_tools = [r for r in records if r["meta_tool_use"]["calls"] > 0]
    assert skipped == {TOOL_USE: len(with_tools)} and len(with_tools) > 0
    assert len(conversations) == len(records) - len(with_tools)
    kept, rejects = filter_conversations(conversations)
    assert not rejects and len(kept) == len(conversations)  # every kept one is a valid nano2 chat
    autumn = next(c for c in conversations if "leaves change color" in c["messages"][1]["content"])
    assert [m["role"] for m in autumn["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert autumn["messages"][0]["content"] == "Answer in at most two sentences."
    assert all("<|" not in m["content"] for c in conversations for m in c["messages"])


def test_stage1_data_curation_takes_the_selection_as_its_chat_source(selected, tmp_path):
    path, records = selected
    checkpoint = make_pretrain_checkpoint(tmp_path / "stage0")
    dataset = main(Config(checkpoint_path=checkpoint.path, output_dir=tmp_path / "sft", use_chatterbot=False,
                          selected_path=path, split_ratios=(0.6, 0.2, 0.2), skill_problems=0))
    assert dataset.metrics["source_skipped"]["selected"] == {TOOL_USE: 10}
    assert dataset.metrics["conversations_read"] == {"selected": len(records) - 10}
    sources = {c["source"].split("/")[1] for split in ("train", "valid", "test")
               for c in read_conversations(getattr(dataset, f"{split}_conversations"))}
    # agentic: the tool-free chats
    assert sources <= {"math", "proofs", "science", "chat", "agentic"} and "math" in sources
    assert any(ref.type == "source" and ref.path.endswith("selected.parquet") for ref in dataset.inputs)
