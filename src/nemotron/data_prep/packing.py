"""Sequence packing for SFT: many short conversations per fixed-size row, written as packed Parquet.

Why pack: chat data is mostly short (a few dozen tokens) while a training row holds `pack_size`
tokens. One conversation per row pads the rest, and a GPU (or our CPU) spends most of its time on
padding. Packing places several conversations in one row and keeps them apart with boundaries, the
technique of Krell et al., "Efficient Sequence Packing without Cross-contamination" (2021), used by
NeMo / Megatron-Bridge for SFT ("packed sequences").

What this module does:
- `plan_packs(lengths, pack_size, algorithm, seed)`: bin packing over lengths only. First-fit-decreasing
  (longest first, each into the first row with room; classic FFD, within 11/9 OPT + 6/9 rows) or a
  seeded shuffled first-fit (keeps the data order random, for when length-sorted rows are unwanted).
  "First row with room" is found in O(log rows) with a max-segment-tree over remaining room.
- `pack_conversations(conversations, config)`: fits, truncates or drops over-long conversations,
  fills the rows, shifts the loss masks and returns rows plus `PackingStats`.
- `write_packed_parquet` / `pack_to_parquet`: one Parquet row per pack, zstd, written atomically and
  byte-identical for the same inputs and seed. `read_packed` reads it back and checks every invariant.

The packed Parquet format (Megatron-Bridge's `GPTSFTPackedParquetDataset` columns):

    input_ids     list<int32>  the row's tokens: conversation 0, then 1, ... ; len(input_ids) <= pack_size.
                               No padding is stored: the loader pads each row to its sequence length.
    seq_start_id  list<int32>  the offset where each conversation starts: [0, L0, L0+L1, ...].
                               Starts at 0, strictly increasing, every start < len(input_ids); the last
                               conversation ends at len(input_ids).
    loss_mask     list<int8>   ALREADY SHIFTED to the labels: loss_mask[i] == 1 means "predicting token
                               i+1 from position i counts". Within a conversation with unshifted mask m
                               (m[j] = 1 when token j is an assistant target, see data_prep/chat/):
                               loss_mask[s+j] = m[j+1]. The last position of every conversation is 0,
                               since its "next token" belongs to the next conversation (or to padding),
                               so no loss ever crosses a boundary.

How a trainer reads a row (this is Megatron-Bridge's `GPTSFTPackedDataset.collate_fn`): for each
conversation [s, e): tokens = input_ids[s:e-1], labels = input_ids[s+1:e], weights =
loss_mask[s:e-1], with attention kept inside each conversation (cu_seqlens = seq_start_id + [len]).
A trainer that runs the whole row at once does the same with labels = input_ids[1:] + [pad] and
weights = loss_mask, resetting position ids and attention at each start.

One difference from Bridge's own packer: it counts len-1 tokens per conversation against pack_size
(the collate drops one token per conversation); we count the full length, so a stored row never
exceeds pack_size tokens and loads unchanged with seq_length = pack_size.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nemotron import atomic
from nemotron.errors import NemotronError
from nemotron.progress import progress_bar

Algorithm = Literal["first_fit_decreasing", "first_fit_shuffle"]
Overflow = Literal["truncate", "drop"]
ALGORITHMS = ("first_fit_decreasing", "first_fit_shuffle")
OVERFLOW_POLICIES = ("truncate", "drop")

SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),  # int8 as Megatron-Bridge's write_packed_parquet writes it
        ("seq_start_id", pa.list_(pa.int32())),
    ]
)
LEGACY_TYPES = {"loss_mask": pa.list_(pa.uint8())}  # files written before the switch to int8 still read
PACK_SIZE_KEY = b"nemotron.pack_size"  # stored in the Parquet schema metadata so the reader can check rows
ROW_GROUP_SIZE = 1024


@dataclass(frozen=True)
class PackingConfig:
    """How to pack. `overflow` says what happens to a conversation longer than `pack_size`:
    "truncate" keeps its first pack_size tokens, "drop" leaves it out; both are counted."""

    pack_size: int
    algorithm: Algorithm = "first_fit_decreasing"
    overflow: Overflow = "truncate"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.pack_size < 2:
            raise NemotronError(f"pack_size={self.pack_size} is too small; a row needs at least 2 tokens")
        if self.algorithm not in ALGORITHMS:
            raise NemotronError(
                f"unknown packing algorithm {self.algorithm!r}; use one of {', '.join(ALGORITHMS)}"
            )
        if self.overflow not in OVERFLOW_POLICIES:
            raise NemotronError(f"unknown overflow policy {self.overflow!r}; use 'truncate' or 'drop'")


@dataclass
class PackedRow:
    """One pack: tokens, shifted loss mask and conversation starts (see the module docstring)."""

    input_ids: np.ndarray  # int32
    loss_mask: np.ndarray  # int8
    seq_start_id: np.ndarray  # int32

    def cu_seqlens(self) -> np.ndarray:
        """Conversation boundaries [0, L0, L0+L1, ..., len]: what varlen attention kernels take."""
        return np.append(self.seq_start_id, len(self.input_ids)).astype(np.int32)


@dataclass
class PackingStats:
    """What packing did, for an artifact's metrics. utilisation = tokens / (rows * pack_size)."""

    pack_size: int
    rows: int
    conversations: int  # conversations placed in rows (after drops)
    tokens: int  # real tokens in rows
    loss_tokens: int  # positions whose prediction is trained
    padding: int  # slots a loader fills with padding: rows * pack_size - tokens
    utilisation: float
    max_conversations_per_row: int
    truncated: int  # conversations cut to pack_size
    truncated_tokens: int  # tokens removed by truncation
    dropped: int  # conversations left out (overflow="drop")

    def as_metrics(self) -> dict[str, float | int]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------------
# Planning: which conversations go into which row (lengths only)
# ---------------------------------------------------------------------------------------------------


class _FirstFitRows:
    """Find the first row with at least `need` free slots in O(log n).

    A max-segment-tree over each row's free room. Every leaf starts as an empty row (room =
    pack_size), so "open a new row" is simply "the first leaf nobody used yet" and needs no
    special case. n leaves suffice: n items never need more than n rows.
    """

    def __init__(self, max_rows: int, pack_size: int) -> None:
        self.leaves = 1
        while self.leaves < max_rows:
            self.leaves *= 2
        self.room = [pack_size] * (2 * self.leaves)  # node k has children 2k and 2k+1; root is 1

    def first_with_room(self, need: int) -> int:
        node = 1
        while node < self.leaves:  # walk down, preferring the left (earlier) child
            node = 2 * node if self.room[2 * node] >= need else 2 * node + 1
        return node - self.leaves

    def take(self, row: int, amount: int) -> None:
        node = row + self.leaves
        self.room[node] -= amount
        while node > 1:
            node //= 2
            self.room[node] = max(self.room[2 * node], self.room[2 * node + 1])


def plan_packs(
    lengths: Sequence[int], pack_size: int, algorithm: Algorithm = "first_fit_decreasing", seed: int = 0
) -> list[list[int]]:
    """Group item indices into rows whose lengths sum to at most pack_size (every length <= pack_size).

    first_fit_decreasing visits items longest first (ties: lower index first), first_fit_shuffle in
    an order shuffled by `seed`; each item goes into the first row with room.
    """
    if any(length > pack_size or length < 1 for length in lengths):
        raise NemotronError(
            f"plan_packs needs lengths in 1..pack_size={pack_size}; truncate or drop longer items first"
        )
    if algorithm == "first_fit_decreasing":
        order = sorted(range(len(lengths)), key=lambda index: (-lengths[index], index))
    elif algorithm == "first_fit_shuffle":
        order = list(range(len(lengths)))
        random.Random(seed).shuffle(order)
    else:
        raise NemotronError(f"unknown packing algorithm {algorithm!r}; use one of {', '.join(ALGORITHMS)}")
    rows: list[list[int]] = []
    free = _FirstFitRows(max(len(lengths), 1), pack_size)
    for index in order:
        row = free.first_with_room(lengths[index])
        if row == len(rows):
            rows.append([])
        rows[row].append(index)
        free.take(row, lengths[index])
    return rows


# ---------------------------------------------------------------------------------------------------
# Packing: fit conversations, shift masks, fill rows
# ---------------------------------------------------------------------------------------------------


def shift_loss_mask(loss_mask: Sequence[int]) -> np.ndarray:
    """Token-aligned mask (m[j]: token j is a target) -> label-aligned (out[j] = m[j+1], last = 0)."""
    shifted = np.zeros(len(loss_mask), dtype=np.int8)
    shifted[:-1] = np.asarray(loss_mask, dtype=np.int8)[1:]
    return shifted


def pack_conversations(
    conversations: Sequence[tuple[Sequence[int], Sequence[int]]],
    config: PackingConfig,
    show_progress: bool = True,
) -> tuple[list[PackedRow], PackingStats]:
    """Pack `(input_ids, loss_mask)` pairs (unshifted masks, as `tokenize_conversation` returns them)."""
    if not conversations:
        raise NemotronError("no conversations to pack; check that the SFT data source is not empty")
    for index, (input_ids, loss_mask) in enumerate(conversations):
        _check_conversation(index, input_ids, loss_mask)
    shortest = min(len(input_ids) for input_ids, _ in conversations)
    if config.pack_size < shortest:
        raise NemotronError(
            f"pack_size={config.pack_size} is smaller than the shortest conversation ({shortest} tokens), "
            f"so every conversation would be {'dropped' if config.overflow == 'drop' else 'truncated'}; "
            f"raise pack_size to at least {shortest}"
        )

    kept, truncated, truncated_tokens, dropped = [], 0, 0, 0
    for input_ids, loss_mask in conversations:
        if len(input_ids) > config.pack_size:
            if config.overflow == "drop":
                dropped += 1
                continue
            truncated += 1
            truncated_tokens += len(input_ids) - config.pack_size
            input_ids, loss_mask = input_ids[: config.pack_size], loss_mask[: config.pack_size]
        kept.append((np.asarray(input_ids, dtype=np.int32), shift_loss_mask(loss_mask)))

    plan = plan_packs([len(ids) for ids, _ in kept], config.pack_size, config.algorithm, config.seed)
    rows = [
        _fill_row([kept[index] for index in members])
        for members in progress_bar(plan, desc="packing", unit="row", disable=not show_progress)
    ]
    tokens = sum(len(row.input_ids) for row in rows)
    slots = len(rows) * config.pack_size
    stats = PackingStats(
        pack_size=config.pack_size,
        rows=len(rows),
        conversations=len(kept),
        tokens=tokens,
        loss_tokens=int(sum(int(row.loss_mask.sum()) for row in rows)),
        padding=slots - tokens,
        utilisation=tokens / slots if slots else 0.0,
        max_conversations_per_row=max((len(members) for members in plan), default=0),
        truncated=truncated,
        truncated_tokens=truncated_tokens,
        dropped=dropped,
    )
    return rows, stats


def _check_conversation(index: int, input_ids: Sequence[int], loss_mask: Sequence[int]) -> None:
    if len(input_ids) != len(loss_mask):
        raise NemotronError(
            f"conversation {index}: input_ids has {len(input_ids)} tokens but loss_mask has "
            f"{len(loss_mask)}; pass the pair returned by tokenize_conversation unchanged"
        )
    if len(input_ids) < 2:
        raise NemotronError(
            f"conversation {index} has {len(input_ids)} token(s); at least 2 are needed to predict one; "
            "drop empty conversations before packing"
        )


def _fill_row(members: list[tuple[np.ndarray, np.ndarray]]) -> PackedRow:
    lengths = [len(ids) for ids, _ in members]
    return PackedRow(
        input_ids=np.concatenate([ids for ids, _ in members]).astype(np.int32),
        loss_mask=np.concatenate([mask for _, mask in members]).astype(np.int8),
        seq_start_id=np.cumsum([0, *lengths[:-1]]).astype(np.int32),
    )


# ---------------------------------------------------------------------------------------------------
# Parquet I/O
# ---------------------------------------------------------------------------------------------------


def write_packed_parquet(rows: Sequence[PackedRow], path: Path | str, pack_size: int) -> Path:
    """Check every row, then write them as packed Parquet (zstd) atomically. Returns the path."""
    path = Path(path)
    if not rows:
        raise NemotronError(
            f"no rows to write to {path}; every conversation was dropped, check overflow/pack_size"
        )
    for index, row in enumerate(rows):
        _check_row(row, index, pack_size, where=str(path))
    columns = [
        _list_array([row.input_ids for row in rows], pa.int32()),
        _list_array([row.loss_mask for row in rows], pa.int8()),
        _list_array([row.seq_start_id for row in rows], pa.int32()),
    ]
    schema = SCHEMA.with_metadata({PACK_SIZE_KEY: str(pack_size).encode()})
    table = pa.Table.from_arrays(columns, schema=schema)
    with atomic.output_path(path) as temp:
        pq.write_table(table, temp, compression="zstd", row_group_size=ROW_GROUP_SIZE)
    return path


def pack_to_parquet(
    conversations: Sequence[tuple[Sequence[int], Sequence[int]]],
    path: Path | str,
    config: PackingConfig,
    show_progress: bool = True,
) -> PackingStats:
    """pack_conversations + write_packed_parquet in one call."""
    rows, stats = pack_conversations(conversations, config, show_progress=show_progress)
    write_packed_parquet(rows, path, config.pack_size)
    return stats


def concat_packed_parquet(paths: Sequence[Path | str], path: Path | str) -> Path:
    """Concatenate packed Parquet files (one per work item) into one, in the given order, atomically.

    Megatron-Bridge reads one packed file per split; a stage pipeline packs each work item on its own.
    The rows are copied a row group at a time, so no process holds more than one row group. Every
    input must have the same pack size. Returns the path."""
    path, paths = Path(path), [Path(p) for p in paths]
    if not paths:
        raise NemotronError(f"no packed Parquet files to concatenate into {path}")
    pack_sizes = {pq.read_schema(p).metadata.get(PACK_SIZE_KEY) for p in paths}
    if len(pack_sizes) != 1 or None in pack_sizes:
        raise NemotronError(f"{path}: the packed files to concatenate have pack sizes {sorted(map(str, pack_sizes))}; "
                            "they must all come from one run with one pack size")
    schema = SCHEMA.with_metadata({PACK_SIZE_KEY: pack_sizes.pop()})
    with atomic.output_path(path) as temp, pq.ParquetWriter(temp, schema, compression="zstd") as writer:
        for source in paths:
            packed = pq.ParquetFile(source)
            for group in range(packed.num_row_groups):
                writer.write_table(packed.read_row_group(group).cast(schema), row_group_size=ROW_GROUP_SIZE)
    return path


def read_packed(path: Path | str, pack_size: int | None = None) -> list[PackedRow]:
    """Read packed Parquet and check every invariant; a violation names the file, row and column.

    `pack_size` defaults to the value stored in the file's metadata (when present).
    """
    path = Path(path)
    if not path.is_file():
        raise NemotronError(f"packed Parquet file not found: {path}; run the SFT data preparation first")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise NemotronError(
            f"cannot read {path} as Parquet: {error}; re-create it with pack_to_parquet"
        ) from error
    for field in SCHEMA:
        if field.name not in table.column_names:
            raise NemotronError(f"{path}: column {field.name!r} is missing; expected columns {SCHEMA.names}")
        if table.schema.field(field.name).type not in (field.type, LEGACY_TYPES.get(field.name)):
            raise NemotronError(
                f"{path}: column {field.name!r} has type {table.schema.field(field.name).type}, "
                f"expected {field.type}; re-create the file with pack_to_parquet"
            )
    metadata = table.schema.metadata or {}
    if pack_size is None and PACK_SIZE_KEY in metadata:
        pack_size = int(metadata[PACK_SIZE_KEY])
    columns = {name: _split_lists(table.column(name).combine_chunks(), name, path) for name in SCHEMA.names}
    rows = []
    for index, (input_ids, loss_mask, seq_start_id) in enumerate(zip(*columns.values())):
        row = PackedRow(input_ids=input_ids, loss_mask=loss_mask, seq_start_id=seq_start_id)
        _check_row(row, index, pack_size, where=str(path))
        rows.append(row)
    return rows


def _split_lists(column: pa.ListArray, name: str, path: Path) -> list[np.ndarray]:
    """A list column as one numpy view per row (no Python object per token)."""
    if column.null_count:
        first_null = column.is_null().to_pylist().index(True)
        raise NemotronError(
            f"{path}: row {first_null}, column {name!r} is null; every row needs all three lists"
        )
    offsets = column.offsets.to_numpy()
    values = np.array(column.values.to_numpy(zero_copy_only=False))  # a writable copy, once per column
    return [values[start:end] for start, end in zip(offsets[:-1], offsets[1:])]


def _list_array(lists: Sequence[np.ndarray], value_type: pa.DataType) -> pa.ListArray:
    offsets = np.cumsum([0, *(len(values) for values in lists)]).astype(np.int32)
    values = np.concatenate([np.asarray(values) for values in lists]).astype(value_type.to_pandas_dtype())
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, value_type))


def _check_row(row: PackedRow, index: int, pack_size: int | None, where: str) -> None:
    """The invariants of the module docstring; each failure names row and column."""

    def fail(column: str, problem: str) -> NemotronError:
        return NemotronError(
            f"{where}: row {index}, column {column!r}: {problem}; re-create it with pack_to_parquet"
        )

    mask = np.asarray(row.loss_mask)
    length = len(row.input_ids)
    if length == 0:
        raise fail("input_ids", "empty row")
    if pack_size is not None and length > pack_size:
        raise fail("input_ids", f"{length} tokens exceed pack_size={pack_size}")
    if len(mask) != length:
        raise fail("loss_mask", f"length {len(mask)} differs from input_ids length {length}")
    if np.any((mask != 0) & (mask != 1)):
        raise fail("loss_mask", "values must be 0 or 1")
    starts = np.asarray(row.seq_start_id, dtype=np.int64)
    if len(starts) == 0 or starts[0] != 0:
        raise fail("seq_start_id", f"must start at 0, got {starts[:3].tolist()}")
    if np.any(np.diff(starts) <= 0):
        raise fail("seq_start_id", f"must be strictly increasing, got {starts.tolist()}")
    if starts[-1] >= length:
        raise fail("seq_start_id", f"start {int(starts[-1])} is outside the row of {length} tokens")
    last_positions = np.append(starts[1:], length) - 1
    crossing = last_positions[mask[last_positions] != 0]
    if len(crossing):
        raise fail(
            "loss_mask",
            f"position {int(crossing[0])} ends a conversation but is trained (the mask must be shifted; "
            "the last position of every conversation is 0)",
        )
