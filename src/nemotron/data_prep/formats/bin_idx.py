"""bin/idx: every document's tokens followed by EOS, in Megatron's indexed dataset (`indexed.py`).

The pretraining format. Each line's `text_field` is tokenized (in batches, to amortize the
Python -> Rust overhead of the tokenizer), an EOS is appended (`append_eod`: the model learns where
documents stop, and Megatron's GPTDataset can pack documents back to back) and the document goes into
`shard_00003.bin/.idx`. Empty texts are counted as records but not written (an EOS alone teaches
nothing).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from nemotron.data_prep.formats.base import ShardFormat, ShardInput
from nemotron.data_prep.indexed import IndexedWriter, best_dtype
from nemotron.errors import NemotronError

# Documents tokenized per call into the Rust tokenizer.
_BATCH_DOCUMENTS = 512


class BinIdx(ShardFormat):
    name = "bin_idx"
    suffixes = (".bin", ".idx")
    needs_eos = True
    indexed = True

    def token_dtype(self, vocab_size: int) -> str:
        return best_dtype(vocab_size).name

    def setup_payload(self, tokenizer_json: str, tokenizer_dir: Path | None) -> str:
        return tokenizer_json

    def setup(self, payload: str):
        from tokenizers import Tokenizer

        return Tokenizer.from_str(payload)

    def write(self, shard: ShardInput, state, folder: Path, name: str) -> tuple[list[str], dict[str, int]]:
        records = documents = tokens = 0
        with IndexedWriter(folder / name, np.dtype(shard.dtype)) as writer:
            for texts in _text_batches(shard):
                records += len(texts)
                texts = [text for text in texts if text]
                for encoding in state.encode_batch_fast(texts, add_special_tokens=False):
                    writer.add_document(encoding.ids + [shard.eos_id])
                    documents += 1
                    tokens += len(encoding.ids) + 1
        return [f"{name}{suffix}" for suffix in self.suffixes], {
            "records": records, "documents": documents, "tokens": tokens}


def _text_batches(shard: ShardInput) -> Iterator[list[str]]:
    """The `text_field` of every line of the shard, in batches."""
    batch: list[str] = []
    for offset, line in shard.lines():
        batch.append(text_of(line, shard, offset))
        if len(batch) == _BATCH_DOCUMENTS:
            yield batch
            batch = []
    if batch:
        yield batch


def text_of(line: bytes, shard: ShardInput, offset: int) -> str:
    """The text of one JSONL line; a one-line error naming the file and line otherwise."""
    try:
        record = json.loads(line)
        text = record[shard.text_field]
    except (ValueError, TypeError, KeyError) as error:
        problem = f"missing field {shard.text_field!r}" if isinstance(error, KeyError) else "not a JSON object"
        expected = f'{{"{shard.text_field}": "..."}}'
        raise NemotronError(f"{shard.where} line {shard.line_number(offset)}: {problem}; "
                            f"each line must be {expected}") from None
    if not isinstance(text, str):
        raise NemotronError(f"{shard.where} line {shard.line_number(offset)}: field {shard.text_field!r} is "
                            f"{type(text).__name__}, not a string")
    return text
