"""Tokenize and write: one shard per split of each work item, in any registered output format.

The documents of an item arrive split by split mixed together; each goes to a worker-local spool
file of its split (disk, not memory), and each split's spool is then written as one shard by the
format's writer (`formats/`: bin/idx, packed Parquet, JSONL), e.g. `train/shard_00003.bin/.idx`.
The writer builds its state (the tokenizer) once per worker in `setup`, from the small payload the
stage carries.

Two writers can follow each other in one list: `pass_on=True` hands every batch on to the next stage
while spooling it (the SFT curation writes each split's conversations JSONL, then packs train and
valid), and `splits` limits a writer to some splits (the rest it passes by without writing).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nemotron.data_prep import storage
from nemotron.data_prep.blend import SPLITS
from nemotron.data_prep.formats import ShardInput, get_format
from nemotron.data_prep.sources import Document
from nemotron.data_prep.stages.base import ItemContext, Stage, WorkItem
from nemotron.errors import NemotronError


class TokenizeWriteStage(Stage):
    name = "write"

    def __init__(self, output_format: str, tokenizer_dir: Path | None, options: dict[str, Any] | None = None,
                 record: str = "text", *, splits: tuple[str, ...] | None = None, pass_on: bool = False,
                 name: str = "write"):
        """`record="text"` writes each document as `{"text": ...}`; "chat" writes the chat record itself;
        "document" writes `{"id", "source", "text"}` (what `sources.read_jsonl` reads back). `splits`:
        write only these (default: all); `pass_on`: yield every batch on to a next stage; `name`: the
        stage's name in the counts (two writers in one list need two)."""
        fmt = get_format(output_format)
        if record not in ("text", "chat", "document"):
            raise NemotronError(f"TokenizeWriteStage record={record!r}; use 'text', 'chat' or 'document'")
        if splits is not None and not set(splits) <= set(SPLITS):
            raise NemotronError(f"TokenizeWriteStage splits={splits!r}; use some of {', '.join(SPLITS)}")
        self.output_format, self.options, self.record = output_format, dict(options or {}), record
        self.splits, self.pass_on, self.name = tuple(splits) if splits is not None else None, pass_on, name
        fmt.check_options(self.options)
        self.dtype, self.eos_id, self.tokenizer_sha256, tokenizer_json = "", -1, {}, ""
        if tokenizer_dir is not None:
            from nemotron.data_prep.tokenizer import tokenizer_facts

            tokenizer_dir = Path(tokenizer_dir)
            tokenizer = tokenizer_facts(tokenizer_dir)
            if tokenizer.eos_token_id is None and fmt.needs_eos:
                raise NemotronError(f"the tokenizer in {tokenizer_dir} has no eos_token; set one so documents "
                                    "can be separated")
            self.tokenizer_sha256 = {path.name: storage.sha256(path) for path in sorted(tokenizer_dir.iterdir())
                                     if path.is_file()}
            self.dtype = fmt.token_dtype(tokenizer.size)
            self.eos_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else -1
            tokenizer_json = tokenizer.backend_json
        elif fmt.needs_tokenizer:
            raise NemotronError(f"output_format={output_format!r} tokenizes, so it needs a tokenizer folder")
        self.payload = fmt.setup_payload(tokenizer_json, tokenizer_dir)
        self._state = None

    def setup(self) -> None:
        self._state = get_format(self.output_format).setup(self.payload)

    def fingerprint(self) -> dict:
        found = {"output_format": self.output_format, "options": self.options, "record": self.record,
                 "tokenizer_sha256": self.tokenizer_sha256, "dtype": self.dtype, "eos_id": self.eos_id}
        # Only when set: a plain writer keeps the run hash it always had.
        return found | ({"splits": list(self.splits)} if self.splits is not None else {}) | (
            {"pass_on": True} if self.pass_on else {})

    def output_names(self, item: WorkItem) -> list[str]:
        return [f"{split}/{item.name}{suffix}" for split in self.splits or SPLITS
                for suffix in get_format(self.output_format).suffixes]

    def process(self, context: ItemContext, records: Iterator[list[tuple[str, Document]]]) -> Iterator:
        written = self._spool_and_write(context, records)
        if self.pass_on:
            return written  # a generator: the next stage drains it, and the shards are written at its end
        for _ in written:
            pass
        return iter(())

    def _spool_and_write(self, context: ItemContext, records: Iterator[list[tuple[str, Document]]]) -> Iterator:
        spools = {}
        try:
            for batch in records:
                for split, document in batch:
                    if self.splits is not None and split not in self.splits:
                        continue
                    if split not in spools:
                        spools[split] = (context.scratch / f"{split}.jsonl").open("w", encoding="utf-8")
                    spools[split].write(self._line(document) + "\n")
                if self.pass_on:
                    yield batch
        finally:
            for spool in spools.values():
                spool.close()
        fmt = get_format(self.output_format)
        for split in (split for split in SPLITS if split in spools):
            (context.folder / split).mkdir(parents=True, exist_ok=True)
            shard = ShardInput(lines=_spooled(context.scratch / f"{split}.jsonl"), where=context.item.path,
                               dtype=self.dtype, eos_id=self.eos_id, options=self.options)
            names, counts = fmt.write(shard, self._state, context.folder / split, context.item.name)
            context.outputs += [f"{split}/{name}" for name in names]
            for key, value in counts.items():
                context.count(self.name, f"{split}/{key}", value)

    def _line(self, document: Document) -> str:
        if self.record == "chat":
            return document.text
        if self.record == "document":
            return json.dumps({"id": document.id, "source": document.source, "text": document.text}, ensure_ascii=False)
        return json.dumps({"text": document.text}, ensure_ascii=False)


def _spooled(path: Path):
    def lines() -> Iterator[tuple[int, bytes]]:
        with path.open("rb") as stream:
            yield from enumerate(stream)
    return lines
