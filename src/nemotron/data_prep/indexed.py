"""Write and read Megatron-Core's indexed dataset format (the `.bin` / `.idx` pair).

Pretraining data is a long stream of token ids. Megatron-LM (Shoeybi et al., 2019) stores it as two
files per shard so a trainer can memory-map terabytes and jump to any document in O(1):

- `prefix.bin`: every document's tokens back to back, one fixed-width integer per token, no header.
- `prefix.idx`: the index, all little-endian:

      offset  size        field
      0       9           magic b"MMIDIDX\\x00\\x00"
      9       8  (<Q)     version, always 1
      17      1  (<B)     dtype code of the tokens (see DTYPE_CODES; 8 = uint16, 4 = int32)
      18      8  (<Q)     S = number of sequences
      26      8  (<Q)     D = number of entries in document_indices (documents + 1)
      34      4*S int32   sequence_lengths: tokens in each sequence
      ..      8*S int64   sequence_pointers: byte offset of each sequence in the .bin
      ..      8*D int64   document_indices: 0, then the end (exclusive) sequence index of each document

A document may span several sequences in Megatron (e.g. one per sentence); we write one sequence per
document, so document_indices is simply 0, 1, ..., S. Files written here are read by
`megatron.core.datasets.indexed_dataset.IndexedDataset` exactly, and `IndexedReader` reads files
written by Megatron's `IndexedDatasetBuilder` (both tested).

End-of-document tokens: `IndexedWriter.add_document(tokens)` stores exactly the tokens it is given.
Megatron's `preprocess_data.py` hides the EOD token behind an `--append-eod` flag; we make it one
visible line at the call site instead (`writer.add_document(ids + [eos_id])`, see
`nemotron.data_prep.formats.bin_idx`), so nobody has to guess whether a shard's documents end with EOS.

Two properties we add on top of the format:
- Fast: tokens are buffered and converted/checked/written in large numpy blocks, and the pointers are
  one `cumsum` instead of a Python loop (see benchmarks/bench_indexed_writer.py).
- Atomic: both files are written under temporary names in the target folder and renamed into place
  by `finalize()`, so a crash never leaves a `.bin`/`.idx` pair that looks complete but is not.
"""

from __future__ import annotations

import array
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nemotron.atomic import temp_path_beside
from nemotron.errors import NemotronError

INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
HEADER_SIZE = len(INDEX_MAGIC) + 8 + 1 + 8 + 8  # magic, version, dtype code, S, D = 34 bytes

# The dtype codes of Megatron-Core's `DType` enum; the numbers are part of the file format.
DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.uint8): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int16): 3,
    np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.float64): 6,
    np.dtype(np.float32): 7,
    np.dtype(np.uint16): 8,
}
CODE_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}
# Python `array` type codes of the integer token dtypes, for converting lists of ids.
_TYPECODES = {np.dtype(code): code for code in "bBhHiIqQ"}

# Convert and write buffered tokens once this many have accumulated (bounded memory, few calls).
_FLUSH_TOKENS = 1 << 20


def best_dtype(vocab_size: int) -> np.dtype:
    """The narrowest token dtype for a vocabulary: uint16 below 65,500 ids (half the disk), else int32.

    The 65,500 threshold is Megatron-Core's `DType.optimal_dtype`, kept so our choice matches theirs.
    """
    return np.dtype(np.uint16) if vocab_size < 65_500 else np.dtype(np.int32)


def bin_path(prefix: Path | str) -> Path:
    return Path(f"{prefix}.bin")


def idx_path(prefix: Path | str) -> Path:
    return Path(f"{prefix}.idx")


class IndexedWriter:
    """Write one `.bin`/`.idx` shard, one sequence per document, atomically.

    Use as a context manager (finalizes on success, discards the temp files on an exception), or call
    `add_document(...)` repeatedly and then `finalize()`.
    """

    def __init__(self, prefix: Path | str, dtype: np.dtype | type | str = np.uint16) -> None:
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in DTYPE_CODES or self.dtype.kind not in "iu":
            raise NemotronError(
                f"token dtype {self.dtype} is not supported for {self.prefix}.bin; "
                "use best_dtype(vocab_size) (uint16 or int32)"
            )
        self._limits = np.iinfo(self.dtype)
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        # Unique temp names in the same folder, so os.replace is an atomic rename on one filesystem.
        self._tmp_bin = temp_path_beside(bin_path(self.prefix))
        self._tmp_idx = temp_path_beside(idx_path(self.prefix))
        self._bin_file = open(self._tmp_bin, "wb", buffering=1 << 20)
        # Buffered documents, as runs of the same kind: ("ids", one array.array of the token dtype
        # that every Python-list document is converted into as it arrives) or ("arrays", a list of
        # numpy arrays, concatenated once per run). No numpy call per document: its per-call overhead
        # would dominate short documents.
        self._pending: list[tuple[str, array.array | list]] = []
        self._pending_tokens = 0
        self._flushed_documents = 0
        self._lengths: list[int] = []
        self._closed = False

    def add_document(self, tokens: Sequence[int] | np.ndarray) -> None:
        """Append one document (exactly these tokens: append EOS yourself if you want it)."""
        if self._closed:
            raise NemotronError(f"cannot add to {self.prefix}.bin: the writer is already finalized")
        if isinstance(tokens, np.ndarray):
            if tokens.ndim != 1 or (tokens.size and tokens.dtype.kind not in "iu"):
                raise NemotronError(
                    f"document {len(self._lengths)} for {self.prefix}.bin is a {tokens.ndim}-D "
                    f"{tokens.dtype} array, not token ids; pass 1-D integer arrays"
                )
            if not self._pending or self._pending[-1][0] != "arrays":
                self._pending.append(("arrays", []))
            self._pending[-1][1].append(tokens)
        else:
            if not self._pending or self._pending[-1][0] != "ids":
                self._pending.append(("ids", array.array(_TYPECODES[self.dtype])))
            self._append_ids(self._pending[-1][1], tokens)
        self._pending_tokens += len(tokens)
        self._lengths.append(len(tokens))
        if self._pending_tokens >= _FLUSH_TOKENS:
            self._flush()

    @property
    def num_documents(self) -> int:
        return len(self._lengths)

    def finalize(self) -> tuple[Path, Path]:
        """Write the index, then rename both temp files into place. Returns (bin path, idx path)."""
        if self._closed:
            raise NemotronError(f"{self.prefix}.bin was already finalized; create a new IndexedWriter")
        try:
            self._flush()
            self._bin_file.close()
            self._write_index()
        except BaseException:
            self.abort()
            raise
        self._closed = True
        # The .bin goes first: an .idx in place always describes a complete .bin next to it.
        os.replace(self._tmp_bin, bin_path(self.prefix))
        os.replace(self._tmp_idx, idx_path(self.prefix))
        return bin_path(self.prefix), idx_path(self.prefix)

    def abort(self) -> None:
        """Throw away everything written so far; the final paths are never touched."""
        self._closed = True
        self._bin_file.close()
        for path in (self._tmp_bin, self._tmp_idx):
            path.unlink(missing_ok=True)

    def __enter__(self) -> IndexedWriter:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.finalize()
        elif not self._closed:
            self.abort()

    def _flush(self) -> None:
        """Convert the buffered documents to the token dtype, refusing any id that does not fit."""
        if not self._pending:
            return
        pieces, first, last = self._pending, self._flushed_documents, len(self._lengths) - 1
        self._pending, self._pending_tokens, self._flushed_documents = [], 0, len(self._lengths)
        where = f"documents {first}..{last} for {self.prefix}.bin"
        for kind, run in pieces:
            if kind == "ids":
                # Already the token dtype, range-checked on arrival; a signed dtype (int32) still
                # takes negative ids there, so they are refused here, one vectorised pass per block.
                if self.dtype.kind == "i":
                    self._cast(np.frombuffer(run, self.dtype), where)
                self._bin_file.write(run.tobytes())
            else:
                self._bin_file.write(self._cast(np.concatenate(run) if len(run) > 1 else run[0], where).tobytes())

    def _append_ids(self, buffer: array.array, tokens: Sequence[int]) -> None:
        # array.fromlist converts Python ints straight into the token dtype, faster than numpy (no
        # intermediate list, one C loop), and unlike numpy it refuses floats, strings and out-of-range
        # ids instead of silently truncating or wrapping them; on an error it appends nothing.
        try:
            buffer.fromlist(tokens if type(tokens) is list else list(tokens))
        except (TypeError, OverflowError) as error:
            raise NemotronError(
                f"document {len(self._lengths)} for {self.prefix}.bin: a token id is not an integer that fits "
                f"{self.dtype} ({error}); pass flat lists of int ids and use best_dtype(vocab_size) for the "
                "tokenizer's vocabulary size"
            ) from None

    def _cast(self, tokens: np.ndarray, where: str) -> np.ndarray:
        if not tokens.size or (tokens.dtype == self.dtype and self.dtype.kind == "u"):
            return tokens.astype(self.dtype, copy=False)
        # A silent wrap-around (70000 -> 4464 in uint16) would corrupt training data, and a negative
        # id (which int32 can hold) is no token: refuse both.
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high > self._limits.max:
            raise NemotronError(
                f"{where}: token id {low if low < 0 else high} does not fit {self.dtype}; "
                "use best_dtype(vocab_size) for the tokenizer's vocabulary size"
            )
        return tokens.astype(self.dtype)

    def _write_index(self) -> None:
        lengths = np.asarray(self._lengths, dtype=np.int32)
        pointers = _pointers(lengths, self.dtype)
        document_indices = np.arange(len(lengths) + 1, dtype=np.int64)  # one sequence per document
        with open(self._tmp_idx, "wb") as index:
            index.write(INDEX_MAGIC)
            index.write(struct.pack("<Q", INDEX_VERSION))
            index.write(struct.pack("<B", DTYPE_CODES[self.dtype]))
            index.write(struct.pack("<Q", len(lengths)))
            index.write(struct.pack("<Q", len(document_indices)))
            index.write(lengths.tobytes())
            index.write(pointers.tobytes())
            index.write(document_indices.tobytes())


class IndexedReader:
    """Memory-map a `.bin`/`.idx` pair; `reader[i]` is sequence i's tokens (a read-only array view).

    Opening validates the whole index (magic, version, dtype, file sizes, pointers, document
    indices), so a truncated or corrupt shard fails here, naming the file, not deep in training.
    """

    def __init__(self, prefix: Path | str) -> None:
        self.prefix = Path(prefix)
        self.idx_path, self.bin_path = idx_path(self.prefix), bin_path(self.prefix)
        for path in (self.idx_path, self.bin_path):
            if not path.is_file():
                raise NemotronError(
                    f"indexed dataset file not found: {path}; pass the shard prefix without "
                    "extension (both prefix.bin and prefix.idx must exist)"
                )
        self.dtype, sequence_count, index_count = _read_header(self.idx_path)
        index = np.memmap(self.idx_path, dtype=np.uint8, mode="r")
        expected = HEADER_SIZE + 12 * sequence_count + 8 * index_count
        if index.size != expected:
            raise NemotronError(
                f"corrupt index {self.idx_path}: {index.size} bytes, but its header describes "
                f"{sequence_count} sequences and {index_count} document indices ({expected} bytes); "
                "the file is truncated or multimodal; re-create the shard"
            )
        lengths_end = HEADER_SIZE + 4 * sequence_count
        pointers_end = lengths_end + 8 * sequence_count
        self.sequence_lengths = index[HEADER_SIZE:lengths_end].view(np.int32)
        self.sequence_pointers = index[lengths_end:pointers_end].view(np.int64)
        self.document_indices = index[pointers_end:].view(np.int64)
        self.num_tokens = int(self.sequence_lengths.sum(dtype=np.int64))
        self._check_index()
        self._tokens = self._map_bin()

    def __len__(self) -> int:
        return len(self.sequence_lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sequence {i} out of range for {self.bin_path} ({len(self)} sequences)")
        start = int(self.sequence_pointers[i]) // self.dtype.itemsize
        return self._tokens[start : start + int(self.sequence_lengths[i])]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def num_documents(self) -> int:
        return len(self.document_indices) - 1

    def max_token_id(self) -> int:
        """The largest token id in the shard (-1 if it is empty): one vectorised pass over the memmap."""
        return int(self._tokens.max()) if self.num_tokens else -1

    def _check_index(self) -> None:
        lengths, documents = self.sequence_lengths, self.document_indices
        problems = [
            (lengths.size and lengths.min() < 0, "a negative sequence length"),
            (not np.array_equal(self.sequence_pointers, _pointers(lengths, self.dtype)),
             "sequence pointers that do not follow the lengths"),
            (documents.size == 0 or documents[0] != 0, "document indices that do not start at 0"),
            (documents.size and documents[-1] != len(lengths),
             "document indices that do not end at the sequence count"),
            (documents.size > 1 and np.any(np.diff(documents) < 0), "decreasing document indices"),
        ]
        for failed, what in problems:
            if failed:
                raise NemotronError(f"corrupt index {self.idx_path}: it has {what}; re-create the shard")
        expected_bytes = self.num_tokens * self.dtype.itemsize
        actual_bytes = self.bin_path.stat().st_size
        if actual_bytes != expected_bytes:
            raise NemotronError(
                f"{self.bin_path} has {actual_bytes} bytes but its index describes {self.num_tokens} "
                f"{self.dtype} tokens ({expected_bytes} bytes); the shard is truncated, re-create it"
            )

    def _map_bin(self) -> np.ndarray:
        if self.num_tokens == 0:  # mmap cannot map an empty file
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(self.bin_path, dtype=self.dtype, mode="r")


def _pointers(lengths: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Byte offset of each sequence in the .bin: tokens before it times bytes per token."""
    pointers = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], dtype=np.int64, out=pointers[1:])
    return pointers * dtype.itemsize


def _read_header(path: Path) -> tuple[np.dtype, int, int]:
    with open(path, "rb") as stream:
        header = stream.read(HEADER_SIZE)
    if len(header) < HEADER_SIZE:
        raise NemotronError(
            f"corrupt index {path}: only {len(header)} bytes, shorter than the header; re-create the shard"
        )
    magic, rest = header[: len(INDEX_MAGIC)], header[len(INDEX_MAGIC) :]
    if magic != INDEX_MAGIC:
        raise NemotronError(
            f"{path} is not a Megatron indexed dataset index (bad magic {magic!r}); check the path"
        )
    version, code, sequence_count, index_count = struct.unpack("<QBQQ", rest)
    if version != INDEX_VERSION:
        raise NemotronError(f"{path} has index version {version}, only version 1 is supported")
    if code not in CODE_DTYPES:
        raise NemotronError(f"corrupt index {path}: unknown dtype code {code}; re-create the shard")
    return CODE_DTYPES[code], sequence_count, index_count
