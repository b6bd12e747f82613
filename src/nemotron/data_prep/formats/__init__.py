"""Output formats of a sharded run: one writer per format, one registry by name.

A stage run (`stages/`: its `TokenizeWriteStage`) cuts its input into work items and makes one
shard per item and split; *what* a shard holds is the format's business alone:

    bin_idx          tokens + EOS per document, Megatron's indexed dataset (pretraining)  `bin_idx.py`
    packed_parquet   chats tokenized with an exact loss mask, packed into rows (SFT)     `packed_parquet.py`
    jsonl            records reshaped by a named transform (SFT / RL records)            `jsonl.py`

Every format implements `ShardFormat` (`base.py`): check its options, build its per-worker state
once, write one shard into a folder (what it adds to the run hash is the writing stage's fingerprint).
The driver never branches on a format's name, so adding one is a module and a line in `FORMATS`.
"""

from __future__ import annotations

from nemotron.data_prep.formats.base import ShardFormat, ShardInput
from nemotron.data_prep.formats.bin_idx import BinIdx
from nemotron.data_prep.formats.jsonl import Jsonl
from nemotron.data_prep.formats.packed_parquet import PackedParquet
from nemotron.errors import NemotronError

__all__ = ["FORMATS", "ShardFormat", "ShardInput", "get_format"]

FORMATS: dict[str, ShardFormat] = {fmt.name: fmt for fmt in (BinIdx(), PackedParquet(), Jsonl())}


def get_format(name: str) -> ShardFormat:
    """The registered format called `name`; a clear error naming the known ones otherwise."""
    if name not in FORMATS:
        raise NemotronError(f"unknown output_format {name!r}; use one of {', '.join(FORMATS)}")
    return FORMATS[name]
