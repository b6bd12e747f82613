"""nano3 stage-1 data curation trains on a post-training selection: reasoning, tool calls, loss modes.

The selection here is every normalized demo record of the post-training pipeline (five families, tool
calls, multi-turn chats, a proof dialogue whose failed attempt is `final_only`); what the rows train is
read back from the packed Parquet the SFT step reads.
"""

from __future__ import annotations

import pytest

from nemotron.data_prep.chat.records import record_to_nano3
from nemotron.data_prep.packing import read_packed
from nemotron.data_prep.post_training.schema import read_records, split_files, write_records
from nemotron.data_prep.post_training.selection import selected_conversations
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.errors import NemotronError
from nemotron.recipes.nano3.stage1_sft import data_curation
from nemotron.recipes.post_training_data import normalize


@pytest.fixture(scope="module")
def selected(tmp_path_factory):
    root = tmp_path_factory.mktemp("selected")
    dataset = normalize.main(normalize.Config(output_dir=root / "normalize"))
    records = [r for d in dataset.dataset_dirs for files in split_files(d).values() for r in read_records(files)]
    return write_records(records, root / "selected.parquet"), records


@pytest.fixture(scope="module")
def pretrain_dataset(nano3_two_plays):
    return nano3_two_plays  # builders.curate_two_plays_nano3, made once per session (tests/runs.py)


def trained_text(dataset) -> str:
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    rows = read_packed(dataset.train_packed) + read_packed(dataset.valid_packed)
    return "".join(tokenizer.decode(row.input_ids[1:][row.loss_mask[:-1] == 1]) for row in rows)


def test_stage1_curation_trains_the_selected_records_with_reasoning_tool_calls_and_loss_modes(
        selected, pretrain_dataset, tmp_path):
    path, records = selected
    conversations, skipped = selected_conversations(path, "nano3")
    dataset = data_curation.main(data_curation.Config(pretrain_dataset_path=pretrain_dataset.path, num_problems=20,
                                                      selected_path=path, pack_size=1024, output_dir=tmp_path / "sft"))
    metrics = dataset.metrics
    assert metrics["train_truncated"] == 0  # whole records: the rows are long enough for the agentic ones
    assert metrics["selected_records"] == len(conversations) == len(records) - sum(skipped.values())
    assert metrics["selected_skipped"] == dict(skipped)
    final_only = sum(r["loss_mode"] == "final_only" for r in records)
    assert final_only and metrics["selected_loss_modes"] == {"assistant_all": len(conversations) - final_only,
                                                             "final_only": final_only}
    assert dataset.num_train_conversations + metrics["valid_conversations"] == 16 + len(conversations)
    assert any(ref.type == "source" and ref.path.endswith("selected.parquet") for ref in dataset.inputs)
    trained = trained_text(dataset)
    # assistant_all: a tool call, its reasoning and the answer after the tool result are all targets
    agentic = next(record_to_nano3(r) for r in records if r["meta_tool_use"]["calls"] > 0)
    call_turn = next(m for m in agentic["messages"] if m.get("tool_calls"))
    assert call_turn["reasoning_content"] in trained and "<tool_call>\n<function=" in trained
    assert agentic["messages"][-1]["content"].strip() in trained
    # final_only: the failed proof attempt is context, the final proof a target
    proof = next(record_to_nano3(r) for r in records if r["loss_mode"] == "final_only")
    failed = next(m for m in proof["messages"] if m["role"] == "assistant")
    assert failed["content"].strip() not in trained and proof["messages"][-1]["content"].strip() in trained
    # nothing from a tool result or a user turn is ever a target
    assert "<tool_response>" not in trained and "<|im_start|>" not in trained


def test_a_selection_that_is_not_there_is_one_clear_error(pretrain_dataset, tmp_path):
    with pytest.raises(NemotronError, match="selected-path"):
        data_curation.main(data_curation.Config(pretrain_dataset_path=pretrain_dataset.path, num_problems=20,
                                                selected_path=tmp_path / "nowhere", output_dir=tmp_path / "sft"))


def test_the_recipe_refuses_two_selections_before_any_work(tmp_path):
    import nemotron.recipes.nano3.__main__ as recipe

    config = recipe.Config(output_dir=tmp_path / "runs", post_training_data=True)
    config.stage1.data_curation.selected_path = tmp_path / "selected.parquet"
    with pytest.raises(NemotronError, match="pass one of them"):
        recipe.main(config)
    assert not (tmp_path / "runs").exists()
    assert recipe.Config().post_training_data is False  # off by default: past the tiny recipe's 330 s (README)
