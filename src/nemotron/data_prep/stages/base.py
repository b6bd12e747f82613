"""The stage contract: what every data-prep stage is, and the work item it is handed.

A stage is set up once per worker (`setup`: load a tokenizer, compile a filter), then processes one
work item at a time as a stream (`process`: an iterator of records in, an iterator out), and declares
the resources one copy of it needs (`resources`, read by the Ray and cosmos-xenna executors). Stages
of one run are fused per worker, as Ray Data fuses operators: a work item flows through read ->
filter -> write as a generator chain, so a worker holds one batch of one item, never its whole file
and never the corpus. What each stage did (documents read, removed by each filter, tokens written)
goes into `ItemContext.counts`, which the item's receipt records; the files it writes go into
`ItemContext.outputs` (checksummed into the receipt), and `output_names` says which they may be.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Resources:
    """What one copy of a stage needs (Ray's `num_cpus`; memory is advisory)."""

    cpus: float = 1.0
    memory_mb: int = 0


@dataclass(frozen=True)
class WorkItem:
    """One independent piece of the input: a byte range of a JSONL file, row groups of a Parquet
    file, one text file, or a whole built-in corpus. Everything a worker needs to read it."""

    index: int
    source: str  # the blend entry's label
    kind: str  # jsonl | parquet | text | builtin
    path: str  # a local path or an fsspec URL
    file: str  # the file's name relative to its source (document id fallbacks use it)
    start: int = 0  # jsonl: byte offset; parquet: first row group
    end: int = 0  # jsonl: byte offset (exclusive); parquet: last row group (exclusive)
    first_row: int = 0  # jsonl: 1-based line number at `start`; parquet: row number at `start`
    split: str | None = None  # fixed by a per-split blend list; None: decided per document by id
    text_field: str = "text"
    hf_split: str = "train"  # builtin kind, hub ids only: the dataset's own split and config
    subset: str | None = None
    size: int = 0  # input bytes (progress and balancing only)

    @property
    def name(self) -> str:
        return f"shard_{self.index:05d}"

    @property
    def work(self) -> dict:
        """What the receipt records as this item's assignment (no absolute paths: runs move)."""
        return {"source": self.source, "file": self.file, "start": self.start, "end": self.end}


@dataclass
class ItemContext:
    """One work item on its way through a worker's stages."""

    item: WorkItem
    scratch: Path  # a worker-local folder for this item (spool files), removed afterwards
    folder: Path  # where output files go (the run folder, or a scratch folder for an object store)
    counts: dict[str, int] = field(default_factory=dict)  # "<stage>/<what>" -> count, into the receipt
    outputs: list[str] = field(default_factory=list)  # output files, relative to `folder`

    def count(self, stage: str, what: str, amount: int = 1) -> None:
        key = f"{stage}/{what}"
        self.counts[key] = self.counts.get(key, 0) + amount


class Stage:
    """Subclass, set `name` (and `resources`), implement `process`; `setup` is optional."""

    name: str = "stage"
    resources: Resources = Resources()

    def setup(self) -> None:
        """Build per-worker state once (the stage object arrives pickled, without it)."""

    def process(self, context: ItemContext, records: Iterator[Any]) -> Iterator[Any]:
        raise NotImplementedError

    def fingerprint(self) -> dict:
        """What this stage adds to the run hash: every parameter that changes the bytes."""
        return {}

    def output_names(self, item: WorkItem) -> list[str]:
        """The files this stage may write for `item`, relative to the run folder: what a new attempt at
        the item clears of an interrupted one (`attempt.discard_item`), with their temp files."""
        return []
