"""Sequence packing into Megatron-Bridge packed Parquet: invariants, shifted masks, determinism, errors."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE, tokenize_conversation
from nemotron.data_prep.packing import (
    PackingConfig,
    concat_packed_parquet,
    pack_conversations,
    pack_to_parquet,
    plan_packs,
    read_packed,
    shift_loss_mask,
    write_packed_parquet,
)
from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer
from nemotron.errors import NemotronError


def synthetic_conversations(count, seed=0, low=4, high=90):
    """Token sequences with a prompt part (mask 0) and an answer part (mask 1), distinct per index."""
    rng = random.Random(seed)
    conversations = []
    for index in range(count):
        length = rng.randint(low, high)
        input_ids = [index % 1000 + 5] + [rng.randint(5, 999) for _ in range(length - 1)]
        prompt = rng.randint(1, length - 1)
        conversations.append((input_ids, [0] * prompt + [1] * (length - prompt)))
    return conversations


def unpack(rows):
    """Each packed conversation as (input_ids, shifted loss_mask) lists, in row order."""
    pieces = []
    for row in rows:
        bounds = row.cu_seqlens()
        for start, end in zip(bounds[:-1], bounds[1:]):
            pieces.append((row.input_ids[start:end].tolist(), row.loss_mask[start:end].tolist()))
    return pieces


def naive_first_fit(lengths, order, pack_size):
    rows, room = [], []
    for index in order:
        for row, free in enumerate(room):
            if free >= lengths[index]:
                rows[row].append(index)
                room[row] -= lengths[index]
                break
        else:
            rows.append([index])
            room.append(pack_size - lengths[index])
    return rows


def test_first_fit_decreasing_on_a_known_instance():
    assert plan_packs([2, 6, 3, 5, 4], pack_size=10) == [[1, 4], [3, 2, 0]]


def test_segment_tree_first_fit_equals_the_textbook_algorithm():
    rng = random.Random(7)
    lengths = [rng.randint(1, 100) for _ in range(400)]
    order = sorted(range(len(lengths)), key=lambda index: (-lengths[index], index))
    assert plan_packs(lengths, 128) == naive_first_fit(lengths, order, 128)
    shuffled = list(range(len(lengths)))
    random.Random(3).shuffle(shuffled)
    assert plan_packs(lengths, 128, "first_fit_shuffle", seed=3) == naive_first_fit(lengths, shuffled, 128)


@pytest.mark.parametrize("algorithm", ["first_fit_decreasing", "first_fit_shuffle"])
def test_every_conversation_lands_once_with_its_mask_shifted(tmp_path, algorithm):
    conversations = synthetic_conversations(300)
    config = PackingConfig(pack_size=128, algorithm=algorithm, seed=1)
    stats = pack_to_parquet(conversations, tmp_path / "packed.parquet", config, show_progress=False)
    rows = read_packed(tmp_path / "packed.parquet")

    expected = sorted((ids, shift_loss_mask(mask).tolist()) for ids, mask in conversations)
    assert sorted(unpack(rows)) == expected
    for row in rows:
        assert len(row.input_ids) <= 128
        assert row.seq_start_id[0] == 0 and np.all(np.diff(row.seq_start_id) > 0)
    assert stats.rows == len(rows) and stats.conversations == 300
    assert stats.tokens == sum(len(ids) for ids, _ in conversations)
    assert stats.utilisation == pytest.approx(stats.tokens / (stats.rows * 128))
    assert stats.loss_tokens == sum(int(row.loss_mask.sum()) for row in rows)


def test_shifted_mask_means_predicting_the_next_token():
    assert shift_loss_mask([0, 0, 1, 1, 1]).tolist() == [0, 1, 1, 1, 0]


def test_packed_loss_targets_are_exactly_the_assistant_turns(tmp_path):
    texts = ["What is two plus two? Four.", "Name a color. Blue is a color.", "Hello! Hi there, friend."] * 20
    folder = train_tokenizer(texts, 350, tmp_path / "tok", chat_template=NANO2_CHAT_TEMPLATE)
    tokenizer = load_tokenizer(folder)
    chats = [
        [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        for q, a in [
            ("What is two plus two?", "Four."),
            ("Name a color.", "Blue is a color."),
            ("Hello!", "Hi there, friend."),
        ]
    ]
    conversations = [tokenize_conversation(tokenizer, chat) for chat in chats]
    stats = pack_to_parquet(
        conversations, tmp_path / "sft.parquet", PackingConfig(pack_size=256), show_progress=False
    )
    assert stats.rows == 1 and stats.conversations == 3
    # Read rows the way Megatron-Bridge's collate does: per conversation [s, e), labels are
    # input_ids[s+1:e] weighted by loss_mask[s:e-1]. The trained labels are the answer + <|im_end|>.
    trained = []
    for row in read_packed(tmp_path / "sft.parquet"):
        bounds = row.cu_seqlens()
        for start, end in zip(bounds[:-1], bounds[1:]):
            labels, weights = row.input_ids[start + 1 : end], row.loss_mask[start : end - 1]
            assert row.loss_mask[end - 1] == 0
            trained.append(tokenizer.decode(labels[weights == 1].tolist(), skip_special_tokens=False))
    assert sorted(trained) == sorted(chat[1]["content"] + "<|im_end|>" for chat in chats)


def test_same_inputs_and_seed_give_identical_bytes(tmp_path):
    conversations = synthetic_conversations(200, seed=4)
    for name, seed in [("a", 5), ("b", 5), ("c", 6)]:
        config = PackingConfig(pack_size=100, algorithm="first_fit_shuffle", seed=seed)
        pack_to_parquet(conversations, tmp_path / f"{name}.parquet", config, show_progress=False)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert (tmp_path / "a.parquet").read_bytes() != (tmp_path / "c.parquet").read_bytes()


def test_concatenated_work_item_files_hold_every_row_in_order_and_refuse_mixed_pack_sizes(tmp_path):
    """A stage pipeline packs each work item alone; the split's one file (what Megatron-Bridge reads)
    is their rows in item order, with the pack size kept for the reader's checks."""
    parts, expected = [], []
    for index, count in enumerate([7, 1500, 40]):  # 1,500 rows: more than one row group
        rows, _ = pack_conversations(synthetic_conversations(count, seed=index), PackingConfig(pack_size=64),
                                     show_progress=False)
        parts.append(write_packed_parquet(rows, tmp_path / f"shard_{index:05d}.parquet", 64))
        expected += unpack(rows)
    merged = concat_packed_parquet(parts, tmp_path / "train.parquet")
    assert unpack(read_packed(merged)) == expected and pq.ParquetFile(merged).metadata.num_row_groups > 1
    assert read_packed(merged, pack_size=64) and pq.read_schema(merged).metadata[b"nemotron.pack_size"] == b"64"
    assert concat_packed_parquet(parts, tmp_path / "again.parquet").read_bytes() == merged.read_bytes()

    pack_to_parquet(synthetic_conversations(5), tmp_path / "other.parquet", PackingConfig(pack_size=128),
                            show_progress=False)
    with pytest.raises(NemotronError, match="pack sizes"):
        concat_packed_parquet([parts[0], tmp_path / "other.parquet"], tmp_path / "mixed.parquet")
    assert not (tmp_path / "mixed.parquet").exists()


def test_file_is_zstd_with_the_bridge_schema(tmp_path):
    pack_to_parquet(
        synthetic_conversations(20), tmp_path / "p.parquet", PackingConfig(pack_size=128), show_progress=False
    )
    parquet = pq.ParquetFile(tmp_path / "p.parquet")
    assert str(parquet.schema_arrow.field("input_ids").type) == "list<element: int32>"
    assert str(parquet.schema_arrow.field("loss_mask").type) == "list<element: int8>"
    assert str(parquet.schema_arrow.field("seq_start_id").type) == "list<element: int32>"
    assert parquet.metadata.row_group(0).column(0).compression == "ZSTD"


def test_overflow_truncate_and_drop_are_counted(tmp_path):
    conversations = synthetic_conversations(50, low=4, high=40) + [([7] * 100, [0] * 50 + [1] * 50)]
    rows, stats = pack_conversations(
        conversations, PackingConfig(pack_size=64, overflow="truncate"), show_progress=False
    )
    assert (stats.truncated, stats.truncated_tokens, stats.dropped) == (1, 36, 0)
    assert ([7] * 64, [0] * 49 + [1] * 14 + [0]) in unpack(rows)
    rows, stats = pack_conversations(
        conversations, PackingConfig(pack_size=64, overflow="drop"), show_progress=False
    )
    assert (stats.truncated, stats.dropped, stats.conversations) == (0, 1, 50)
    assert all(ids != [7] * 64 for ids, _ in unpack(rows))


def test_pack_size_below_the_shortest_conversation_is_an_error():
    with pytest.raises(NemotronError, match="smaller than the shortest conversation \\(10 tokens\\)"):
        pack_conversations([([5] * 10, [1] * 10), ([5] * 20, [1] * 20)], PackingConfig(pack_size=8))


def test_bad_config_and_inputs_are_clear_errors():
    with pytest.raises(NemotronError, match="unknown packing algorithm"):
        PackingConfig(pack_size=64, algorithm="best_fit")
    with pytest.raises(NemotronError, match="unknown overflow policy"):
        PackingConfig(pack_size=64, overflow="wrap")
    with pytest.raises(NemotronError, match="conversation 1: input_ids has 3 tokens but loss_mask has 2"):
        pack_conversations([([5, 6], [0, 1]), ([5, 6, 7], [0, 1])], PackingConfig(pack_size=64))


def write_raw(path, input_ids, loss_mask, seq_start_id, mask_type=None):
    table = pa.table(
        {
            "input_ids": pa.array(input_ids, pa.list_(pa.int32())),
            "loss_mask": pa.array(loss_mask, pa.list_(mask_type or pa.int8())),
            "seq_start_id": pa.array(seq_start_id, pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, path)


GOOD = ([1, 2, 3, 4], [1, 0, 1, 0], [0, 2])


@pytest.mark.parametrize(
    ("bad_row", "column", "fragment"),
    [
        (([1, 2, 3, 4], [1, 1, 0, 0], [1, 2]), "seq_start_id", "must start at 0"),
        (([1, 2, 3, 4], [1, 1, 0, 0], [0, 2, 2]), "seq_start_id", "strictly increasing"),
        (([1, 2, 3, 4], [1, 0, 0, 0], [0, 4]), "seq_start_id", "outside the row"),
        (([1, 2, 3, 4], [1, 1, 0], [0, 2]), "loss_mask", "differs from input_ids length"),
        (([1, 2, 3, 4], [1, 1, 1, 0], [0, 2]), "loss_mask", "position 1 ends a conversation"),
        (([1, 2, 3, 4], [0, 2, 0, 0], [0]), "loss_mask", "0 or 1"),
        (([], [], [0]), "input_ids", "empty row"),
    ],
)
def test_reader_names_row_and_column_of_a_broken_invariant(tmp_path, bad_row, column, fragment):
    path = tmp_path / "bad.parquet"
    write_raw(path, *[[good, bad] for good, bad in zip(GOOD, bad_row)])
    with pytest.raises(NemotronError, match=f"row 1, column '{column}': .*{fragment}"):
        read_packed(path)


def test_reader_checks_schema_and_pack_size(tmp_path):
    write_raw(tmp_path / "wide.parquet", *[[value] for value in GOOD], mask_type=pa.int64())
    with pytest.raises(NemotronError, match="column 'loss_mask' has type"):
        read_packed(tmp_path / "wide.parquet")
    write_raw(tmp_path / "ok.parquet", *[[value] for value in GOOD])
    assert len(read_packed(tmp_path / "ok.parquet")) == 1
    with pytest.raises(NemotronError, match="row 0, column 'input_ids': 4 tokens exceed pack_size=3"):
        read_packed(tmp_path / "ok.parquet", pack_size=3)
    with pytest.raises(NemotronError, match="not found"):
        read_packed(tmp_path / "missing.parquet")
    write_raw(tmp_path / "null.parquet", [GOOD[0], None], [GOOD[1], [1]], [GOOD[2], [0]])
    with pytest.raises(NemotronError, match="row 1, column 'input_ids' is null"):
        read_packed(tmp_path / "null.parquet")
    pq.write_table(
        pa.table({"input_ids": pa.array([GOOD[0]], pa.list_(pa.int32()))}), tmp_path / "cols.parquet"
    )
    with pytest.raises(NemotronError, match="column 'loss_mask' is missing"):
        read_packed(tmp_path / "cols.parquet")


def test_a_failed_write_leaves_the_previous_file_untouched(tmp_path):
    path = tmp_path / "packed.parquet"
    pack_to_parquet(synthetic_conversations(10), path, PackingConfig(pack_size=128), show_progress=False)
    before = path.read_bytes()
    rows, _ = pack_conversations(
        synthetic_conversations(10, seed=9), PackingConfig(pack_size=128), show_progress=False
    )
    rows[-1].loss_mask[-1] = 1  # corrupt: trains across the end of the row
    with pytest.raises(NemotronError, match="ends a conversation but is trained"):
        write_packed_parquet(rows, path, pack_size=128)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["packed.parquet"]
