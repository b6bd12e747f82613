"""Packed Parquet on seeded random conversations: every row recomputed from the source (issue 22).

Each case draws 1-60 conversations of random lengths (2 tokens up to twice the pack size, so some
overflow), loss masks made of user/assistant runs as a chat template makes them, a pack size, an
algorithm, an overflow policy and a seed; packs them with `pack_to_parquet`, reads the file back with
plain pyarrow (not our reader) and recomputes every row from the source conversations the way
Megatron-Bridge's packed-sequence collate reads it:
- the schema (int32 ids, int8 mask, int32 starts) and the pack size in the metadata;
- each row's segments [seq_start_id[k], seq_start_id[k+1]) are whole source conversations (truncated to
  the pack size under "truncate"), each kept conversation exactly once, no row over the pack size;
- each segment's mask is the source mask shifted to the labels (mask[j] = source[j+1]) with 0 at the
  segment's last position, so no loss crosses a boundary, and the trained targets are exactly the
  source's assistant tokens after the first position;
- the stats (rows, tokens, loss tokens, truncated, dropped) are what the rows hold, and `read_packed`
  returns the same rows.

Fast tier: PACKING_CASES_FAST (default 300). Deep tier (slow): PACKING_CASES (default 2,000).
"""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron.data_prep.packing import PACK_SIZE_KEY, PackingConfig, pack_to_parquet, read_packed
from randomized import check_every_seed, deep_count, first_difference

FIRST_ID = 1_000_000  # conversation k starts with token FIRST_ID + k: a segment names its source


def random_conversation(rng: random.Random, index: int, pack_size: int) -> tuple[list[int], list[int]]:
    length = rng.choice([2, 3, rng.randint(2, pack_size), rng.randint(2, 2 * pack_size), pack_size, pack_size + 1])
    ids = [FIRST_ID + index] + [rng.randint(0, 50_000) for _ in range(length - 1)]
    mask, position = [], 0
    while position < length:  # alternating runs: a user turn (0s), then an assistant answer (1s)
        run = rng.randint(1, max(1, length // 3))
        mask += [1 if mask and mask[-1] == 0 else 0] * run
        position += run
    return ids, mask[:length]


def check_case(seed: int, folder) -> None:
    rng = random.Random(seed)
    pack_size = rng.choice([2, 3, 8, rng.randint(4, 64), rng.randint(64, 512)])
    conversations = [random_conversation(rng, k, pack_size) for k in range(rng.randint(1, 60))]
    config = PackingConfig(pack_size=pack_size, algorithm=rng.choice(["first_fit_decreasing", "first_fit_shuffle"]),
                           overflow=rng.choice(["truncate", "drop"]), seed=rng.randint(0, 1000))
    if all(len(ids) > pack_size for ids, _ in conversations):  # at least one must fit (else a clear error)
        conversations.append(([FIRST_ID + len(conversations), 7], [0, 1]))
    path = folder / f"case{seed}.parquet"
    stats = pack_to_parquet(conversations, path, config, show_progress=False)

    table = pq.read_table(path)
    assert table.schema.field("input_ids").type == pa.list_(pa.int32())
    assert table.schema.field("loss_mask").type == pa.list_(pa.int8())
    assert table.schema.field("seq_start_id").type == pa.list_(pa.int32())
    assert table.schema.metadata[PACK_SIZE_KEY] == str(pack_size).encode()
    rows = table.to_pylist()

    seen: list[int] = []
    for number, row in enumerate(rows):
        ids, mask, starts = row["input_ids"], row["loss_mask"], row["seq_start_id"]
        where = f"row {number} (pack_size {pack_size}, {config.algorithm}, {config.overflow})"
        assert 0 < len(ids) <= pack_size and len(mask) == len(ids), f"{where}: {len(ids)} tokens"
        increasing = all(a < b for a, b in zip(starts, starts[1:], strict=False))
        assert starts and starts[0] == 0 and increasing, f"{where}: seq_start_id {starts}"
        for start, end in zip(starts, [*starts[1:], len(ids)], strict=True):
            source = ids[start] - FIRST_ID
            assert 0 <= source < len(conversations), f"{where}: segment at {start} starts with {ids[start]}"
            source_ids, source_mask = (part[:pack_size] for part in conversations[source])
            diff = first_difference(ids[start:end], source_ids, "token")
            assert diff is None, f"{where}, conversation {source}: {diff}"
            expected_mask = [*source_mask[1:], 0]  # shifted to the labels; the last position trains nothing
            diff = first_difference(mask[start:end], expected_mask, "loss_mask position")
            assert diff is None, f"{where}, conversation {source}: {diff}"
            # Bridge's collate: labels = ids[s+1:e], weights = mask[s:e-1]: the source's targets after position 0.
            assert sum(mask[start:end - 1]) == sum(source_mask[1:]), f"{where}, conversation {source}: targets"
            seen.append(source)

    kept = [k for k, (ids, _) in enumerate(conversations) if config.overflow == "truncate" or len(ids) <= pack_size]
    assert sorted(seen) == kept, first_difference(sorted(seen), kept, "placed conversation")
    too_long = [ids for ids, _ in conversations if len(ids) > pack_size]
    assert (stats.rows, stats.conversations) == (len(rows), len(kept))
    assert stats.tokens == sum(len(row["input_ids"]) for row in rows)
    assert stats.loss_tokens == sum(sum(row["loss_mask"]) for row in rows)
    assert stats.padding == len(rows) * pack_size - stats.tokens
    if config.overflow == "truncate":
        assert (stats.truncated, stats.dropped) == (len(too_long), 0)
        assert stats.truncated_tokens == sum(len(ids) - pack_size for ids in too_long)
    else:
        assert (stats.truncated, stats.dropped) == (0, len(too_long))
    ours = read_packed(path, pack_size)
    assert [r.input_ids.tolist() for r in ours] == [row["input_ids"] for row in rows]
    assert [r.loss_mask.tolist() for r in ours] == [row["loss_mask"] for row in rows]


def run(count: int, tmp_path) -> None:
    check_every_seed("PACKING", count, lambda seed: check_case(seed, tmp_path))


def test_packed_rows_are_the_source_conversations_on_random_inputs(tmp_path):
    run(int(os.environ.get("PACKING_CASES_FAST", 300)), tmp_path)


@pytest.mark.slow
def test_packed_rows_are_the_source_conversations_on_random_inputs_deep(tmp_path):
    run(deep_count("PACKING", 2000), tmp_path)
