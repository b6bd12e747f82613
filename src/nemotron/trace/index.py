"""One exact-match index per dataset artifact: built once, receipted, stored outside the artifact, reused.

An index folder holds
    tokens.npy        int32: every training document's tokens, documents separated by -1
    suffix_array.npy  int64: the suffix array of tokens.npy (`nemotron.trace.suffix_array`)
    starts.npy        int64: where each document starts in tokens.npy
    labels.json       each document's label (shard and document index, conversation id, pair id, ...)
    receipt.json      the dataset's path, type and digest, tokens, documents, build seconds, peak memory

It lives at `<index root>/<dataset digest>/`, the index root being `--index-dir`, else
`$NEMOTRON_TRACE_INDEX_DIR`, else `.trace-index/` beside the dataset's folder (in the stage folder of
a recipe run: never inside the artifact, whose digest covers every file in its folder). A dataset
re-made with other content has another digest, so its index is built anew; an index whose receipt
matches is loaded (memory-mapped) and never rebuilt. The folder is written whole or not at all.
"""

from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nemotron import atomic
from nemotron.trace.corpora import Dataset, documents
from nemotron.trace.suffix_array import SEPARATOR, suffix_array

INDEX_FORMAT = 1  # bump when the files change meaning: older indexes are rebuilt
ENV_INDEX_DIR = "NEMOTRON_TRACE_INDEX_DIR"


@dataclass
class TokenIndex:
    """A dataset's tokens, their suffix array, and where each document starts (and what it is)."""

    dataset: Dataset
    tokens: np.ndarray
    suffix_array: np.ndarray
    starts: np.ndarray
    labels: list[dict]
    receipt: dict
    built: bool  # built by this call (False: loaded from an earlier build)

    def document_of(self, position: int) -> int:
        """The document holding token `position` of the concatenated array."""
        return int(np.searchsorted(self.starts, position, side="right")) - 1


def index_root(dataset: Dataset, index_dir: Path | str | None = None) -> Path:
    if index_dir is not None:
        return Path(index_dir)
    if os.environ.get(ENV_INDEX_DIR):
        return Path(os.environ[ENV_INDEX_DIR])
    return dataset.path.parent / ".trace-index"


def load_or_build(dataset: Dataset, index_dir: Path | str | None = None) -> TokenIndex:
    """The index of `dataset`: loaded when a receipt for its digest is there, else built and saved."""
    folder = index_root(dataset, index_dir) / dataset.digest
    receipt_path = folder / "receipt.json"
    if receipt_path.is_file():
        receipt = json.loads(receipt_path.read_text(encoding="utf-8"))
        if receipt.get("format") == INDEX_FORMAT and receipt.get("digest") == dataset.digest:
            return _load(dataset, folder, receipt)
    return _build(dataset, folder)


def _load(dataset: Dataset, folder: Path, receipt: dict) -> TokenIndex:
    return TokenIndex(
        dataset=dataset,
        tokens=np.load(folder / "tokens.npy", mmap_mode="r"),
        suffix_array=np.load(folder / "suffix_array.npy", mmap_mode="r"),
        starts=np.load(folder / "starts.npy"),
        labels=json.loads((folder / "labels.json").read_text(encoding="utf-8")),
        receipt=receipt,
        built=False,
    )


def _build(dataset: Dataset, folder: Path) -> TokenIndex:
    print(f"trace: indexing {dataset.type} {dataset.path} (once; kept in {folder})", file=sys.stderr)
    started = time.perf_counter()
    tracemalloc.start()  # numpy reports its buffers to tracemalloc: the peak is the build's memory
    try:
        labels, pieces, starts, position = [], [], [], 0
        for label, ids in documents(dataset):
            labels.append(label)
            starts.append(position)
            pieces += [np.asarray(ids, dtype=np.int32), np.array([SEPARATOR], dtype=np.int32)]
            position += len(ids) + 1
        tokens = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
        sa = suffix_array(tokens)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    seconds = time.perf_counter() - started
    num_tokens = int(len(tokens) - len(labels))  # the separators are not tokens
    receipt = {
        "format": INDEX_FORMAT, "dataset": str(dataset.path), "type": dataset.type, "digest": dataset.digest,
        "num_tokens": num_tokens, "num_documents": len(labels), "build_seconds": round(seconds, 3),
        "peak_memory_bytes": int(peak),
        "seconds_per_billion_tokens": round(seconds / max(num_tokens, 1) * 1e9, 1),
        "peak_memory_gib_per_billion_tokens": round(peak / max(num_tokens, 1) * 1e9 / 2**30, 1),
        "disk_bytes": int(tokens.nbytes + sa.nbytes + 8 * len(starts)),
    }
    with atomic.output_folder(folder) as staging:
        np.save(staging / "tokens.npy", tokens)
        np.save(staging / "suffix_array.npy", sa)
        np.save(staging / "starts.npy", np.asarray(starts, dtype=np.int64))
        (staging / "labels.json").write_text(json.dumps(labels), encoding="utf-8")
        (staging / "receipt.json").write_text(json.dumps(receipt, indent=2) + "\n", encoding="utf-8")
    print(f"trace: indexed {num_tokens:,} tokens in {seconds:.1f}s, peak {peak / 2**20:.0f} MiB", file=sys.stderr)
    return TokenIndex(dataset, tokens, sa, np.asarray(starts, dtype=np.int64), labels, receipt, built=True)
