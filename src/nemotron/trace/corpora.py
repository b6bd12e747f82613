"""The training data behind a checkpoint, found through its lineage, read as token documents.

`training_datasets(model_path)` walks the `inputs` a checkpoint recorded (and theirs, upstream: the
checkpoint it was fine-tuned from, the dataset that one was trained on, ...) and returns every dataset
artifact that holds training data, nearest first. `documents(dataset)` reads one as
(label, token ids) pairs, the tokens exactly as training saw them:

    train_prefixes        Megatron bin/idx shards (pretraining)    label {"shard", "document"}
    train_conversations   conversation JSONL (nano2 SFT): each      label {"conversation", "message", "role"}
                          message's content encoded on its own, as the chat encoder does
                          (`data_prep.chat.pieces.encode_text`: the markers are kept apart)
    train_packed          packed Parquet (SFT without a           label {"file", "row", "conversation_in_row"}
                          conversation JSONL, e.g. nano3)
    train_tokens          tokenized preference pairs (DPO)         label {"pair", "part": prompt|chosen|rejected}

Only the train split is read: validation and test data were never trained on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nemotron.artifact import METADATA, read_metadata
from nemotron.errors import NemotronError

TRAINING_FIELDS = ("train_prefixes", "train_conversations", "train_packed", "train_tokens")


@dataclass(frozen=True)
class Dataset:
    """A dataset artifact that holds training data: its folder, type, digest and metadata."""

    path: Path
    type: str
    digest: str
    metadata: dict


def holds_training_data(metadata: dict) -> bool:
    return any(metadata.get(name) for name in TRAINING_FIELDS)


def training_datasets(model_path: Path | str) -> list[Dataset]:
    """Every dataset in the lineage of the artifact at `model_path` that holds training data, nearest
    first (breadth first over the recorded inputs). A dataset re-made since it was used is refused:
    its tokens are no longer the ones the model was trained on."""
    found: list[Dataset] = []
    seen: set[Path] = set()
    queue = [read_metadata(model_path)]
    while queue:
        metadata = queue.pop(0)
        for ref in metadata.get("inputs", []):
            path = Path(ref.get("path", ""))
            if not (path / METADATA).is_file() or path in seen:
                continue  # a raw source (a file, a packaged corpus), or an artifact already visited
            seen.add(path)
            upstream = read_metadata(path)
            if ref.get("digest") and upstream.get("digest") != ref["digest"]:
                raise NemotronError(
                    f"{path}: this {upstream.get('type')} was re-made after {metadata['path']} used it (digest "
                    f"{str(upstream.get('digest'))[:12]} != recorded {ref['digest'][:12]}), so it is not the data "
                    "the model learned from; re-run the steps after it, or trace a model trained on it"
                )
            if holds_training_data(upstream):
                found.append(Dataset(path, upstream["type"], upstream["digest"], upstream))
            queue.append(upstream)
    return found


def documents(dataset: Dataset) -> Iterator[tuple[dict, np.ndarray]]:
    """(label, token ids) of every training document of `dataset`, in a fixed order."""
    meta = dataset.metadata
    if meta.get("train_prefixes"):
        from nemotron.data_prep.indexed import IndexedReader

        for prefix in meta["train_prefixes"]:
            reader = IndexedReader(prefix)
            shard = str(Path(prefix).relative_to(dataset.path)) if Path(prefix).is_relative_to(dataset.path) \
                else str(prefix)
            for index in range(len(reader)):
                yield {"shard": shard, "document": index}, np.asarray(reader[index])
    if meta.get("train_conversations"):
        yield from _conversation_documents(Path(meta["train_conversations"]), Path(meta["tokenizer_dir"]))
    elif meta.get("train_packed"):
        from nemotron.data_prep.packing import read_packed

        name = Path(meta["train_packed"]).name
        for row_index, row in enumerate(read_packed(meta["train_packed"])):
            bounds = [*row.seq_start_id.tolist(), len(row.input_ids)]
            for k in range(len(bounds) - 1):
                label = {"file": name, "row": row_index, "conversation_in_row": k}
                yield label, np.asarray(row.input_ids[bounds[k]:bounds[k + 1]])
    if meta.get("train_tokens"):
        with Path(meta["train_tokens"]).open("rb") as lines:
            for number, raw in enumerate(lines, start=1):
                record = json.loads(raw)
                for part in ("prompt", "chosen", "rejected"):
                    yield ({"pair": record.get("id", f"line {number}"), "part": part},
                           np.asarray(record[f"{part}_ids"]))


def _conversation_documents(path: Path, tokenizer_dir: Path) -> Iterator[tuple[dict, np.ndarray]]:
    from nemotron.data_prep.chat.pieces import encode_text
    from nemotron.data_prep.conversations import read_conversations
    from nemotron.data_prep.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    conversations = read_conversations(path)
    messages = [(c["id"], k, m["role"], m["content"]) for c in conversations for k, m in enumerate(c["messages"])]
    encoded = encode_text(tokenizer, [content for *_, content in messages]) if messages else []
    for (conversation, k, role, _), ids in zip(messages, encoded, strict=True):
        yield {"conversation": conversation, "message": k, "role": role}, np.asarray(ids)
