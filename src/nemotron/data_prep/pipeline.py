"""The data-prep library in two calls: a blend in, training-ready shards out.

    from nemotron.data_prep import DataBlend, run_pretrain_pipeline, run_sft_pipeline

    result = run_pretrain_pipeline(blend=DataBlend.load("blend.json"), output_dir="data/pretrain",
                                   tokenizer="tokenizer/", num_shards=64, executor="ray")
    result.run_hash, result.total_tokens, result.data_paths["train"]    # bin/idx prefixes per split

    result = run_sft_pipeline(blend=chats_blend, output_dir="data/sft", tokenizer="tokenizer/",
                              num_shards=8, chat_template="nano2", pack_size=4096)
    result.run_hash, result.total_sequences, result.data_paths["train"]  # packed Parquet files

A thin layer over what the recipes use, in the cookbook's three phases:
1. setup: resolve the tokenizer (a local folder, or a name `AutoTokenizer` finds in the local
   Hugging Face cache; nothing is downloaded), draw each split of the blend (weights, hash-of-id
   splits: `blend.py`) into `<output_dir>/splits/<split>.jsonl`;
2. pipeline: one sharded, receipted run per split (`shards.py`), on the local pool or Ray;
3. finalize: the runs' totals, and `<output_dir>/data_paths.json` (the per-split file lists that a
   Megatron-Bridge config takes as `blend_per_split` or packed Parquet paths).

The draw runs in this process, since weights and splits need every document's id; the costly part,
tokenizing (and packing) the documents, fans out as shard work items. `output_dir` and the blend's
sources may be local or object-store URLs (`s3://...`); re-running with the same inputs re-uses
every shard whose receipt holds, so an interrupted run resumes where it stopped.

Unlike the recipe steps, this makes no quality filtering, no dedup and no artifact: it is the library
call a notebook or another framework makes (the nano2 stage-0 curation step shows the full pipeline).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from nemotron.data_prep import storage
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.executors import check_executor
from nemotron.data_prep.shards import RunStats, plan_run, run_shards
from nemotron.data_prep.sources import Document
from nemotron.errors import NemotronError


@dataclass
class PipelineResult:
    """What a pipeline made: one receipted shard run per split."""

    run_hash: str  # sha256 over the split runs' run hashes: same inputs, same hash
    output_dir: storage.PathLike
    tokenizer: str  # the tokenizer as given (a folder or a cached hub name)
    splits: dict[str, RunStats]  # per split: the shard run (counts per shard, skipped/written)
    data_paths: dict[str, list[str]] = field(default_factory=dict)  # per split: bin/idx prefixes or Parquet files


@dataclass
class PretrainResult(PipelineResult):
    total_tokens: int = 0  # tokens in every split's bin/idx shards, one EOS per document included
    total_documents: int = 0


@dataclass
class SFTResult(PipelineResult):
    total_sequences: int = 0  # packed rows (training sequences of pack_size tokens at most), every split
    total_conversations: int = 0  # conversations packed into them (after overflow drops)


def run_pretrain_pipeline(
    blend: DataBlend,
    output_dir: str | Path,
    tokenizer: str | Path,
    num_shards: int = 8,
    executor: str = "local",
    workers: int = 1,
    seed: int = 0,
) -> PretrainResult:
    """Tokenize every split of `blend` into bin/idx shards (EOS after each document).

    `executor="local"` runs the shards in this process (`workers=1`) or in a pool of `workers`
    processes (a script then needs the usual `if __name__ == "__main__":` guard, since pool workers
    are spawned); `executor="ray"` runs them as Ray tasks (`RAY_ADDRESS`, else a local Ray with
    `workers` CPUs). `seed` seeds the blend's weighted draw and shuffle.
    """
    check_executor(executor)
    with resolved_tokenizer(tokenizer) as tokenizer_dir:
        runs = {}
        for split, jsonl in _draw_splits(blend, output_dir, seed, _document_record):
            plan = plan_run(jsonl, tokenizer_dir, storage.join(output_dir, split), num_shards)
            runs[split] = _run(plan, split, executor, workers)
    paths = {split: [str(prefix) for prefix in stats.prefixes] for split, stats in runs.items()}
    _write_data_paths(output_dir, paths)
    return PretrainResult(run_hash=_combined_hash(runs), output_dir=output_dir, tokenizer=str(tokenizer),
                          splits=runs, data_paths=paths, total_tokens=sum(r.tokens for r in runs.values()),
                          total_documents=sum(r.documents for r in runs.values()))


def run_sft_pipeline(
    blend: DataBlend,
    output_dir: str | Path,
    tokenizer: str | Path,
    num_shards: int = 8,
    chat_template: str = "nano2",
    pack_size: int = 4096,
    executor: str = "local",
    workers: int = 1,
    seed: int = 0,
) -> SFTResult:
    """Tokenize every split of a blend of chats (`{"messages": [...]}` JSONL, or "chatterbot") with an
    assistant-only loss mask and pack each shard into packed Parquet rows of `pack_size` tokens."""
    check_executor(executor)
    options = {"pack_size": pack_size, "chat_template": chat_template, "seed": seed}
    with resolved_tokenizer(tokenizer) as tokenizer_dir:
        from nemotron.data_prep.conversations import check_chat_tokenizer
        from nemotron.data_prep.tokenizer import load_tokenizer

        check_chat_tokenizer(load_tokenizer(tokenizer_dir), tokenizer, chat_template)  # before any work starts
        runs = {}
        for split, jsonl in _draw_splits(blend, output_dir, seed, _chat_record, read=_read_chats):
            plan = plan_run(jsonl, tokenizer_dir, storage.join(output_dir, split), num_shards,
                            output_format="packed_parquet", options=options)
            runs[split] = _run(plan, split, executor, workers)
    paths = {split: [str(path) for path in stats.outputs] for split, stats in runs.items()}
    _write_data_paths(output_dir, paths)
    return SFTResult(run_hash=_combined_hash(runs), output_dir=output_dir, tokenizer=str(tokenizer),
                     splits=runs, data_paths=paths, total_sequences=sum(r.totals["rows"] for r in runs.values()),
                     total_conversations=sum(r.totals["conversations"] for r in runs.values()))


# ---------------------------------------------------------------------------------------------------
# setup: the tokenizer, the drawn splits
# ---------------------------------------------------------------------------------------------------


@contextmanager
def resolved_tokenizer(tokenizer: str | Path) -> Iterator[Path]:
    """A local tokenizer folder for `tokenizer`: the folder itself, or (for a hub name) its tokenizer
    files saved from the local Hugging Face cache into a temporary folder. Nothing is downloaded."""
    if Path(tokenizer).is_dir():
        yield Path(tokenizer)
        return
    from transformers import AutoTokenizer

    try:
        loaded = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
    except Exception as error:  # transformers raises OSError, ValueError, ... for a missing model
        raise NemotronError(
            f"tokenizer {str(tokenizer)!r} is neither a local folder nor in the local Hugging Face cache "
            f"(nothing is downloaded); pass a tokenizer folder, or fetch it once where there is network "
            f"(`hf download {tokenizer}`)"
        ) from error
    with tempfile.TemporaryDirectory(prefix="nemotron-tokenizer-") as folder:
        # Only the tokenizer's own files: the run hash covers every file of the folder it is given.
        loaded.save_pretrained(folder)
        yield Path(folder)


def _draw_splits(blend: DataBlend, output_dir, seed: int, to_record, read=None) -> Iterator[tuple[str, object]]:
    """Draw each split of the blend and write it as `<output_dir>/splits/<split>.jsonl`; yield them."""
    documents, counts = (read or DataBlend.read)(blend)
    for split in blend.splits:
        drawn, _ = blend.draw(documents, split, seed=seed)
        text = "".join(json.dumps(to_record(doc), ensure_ascii=False, sort_keys=True) + "\n" for doc in drawn)
        path = storage.join(output_dir, "splits", f"{split}.jsonl")
        storage.make_folder(storage.join(output_dir, "splits"))
        storage.write_text(path, text)
        print(f"data_prep: {split}: {len(drawn)} records drawn from {counts}", file=sys.stderr)
        yield split, path


def _document_record(doc: Document) -> dict:
    return {"id": doc.id, "source": doc.source, "text": doc.text}


def _chat_record(doc: Document) -> dict:
    return json.loads(doc.text)  # the chat record itself, as the source held it


def _read_chats(blend: DataBlend) -> tuple[list[Document], dict[str, dict]]:
    """Every chat record of the blend, as Documents whose text is the record's canonical JSON (so the
    blend's weighted, hash-of-id draw works unchanged); ids come from "id", else the JSON's sha1."""
    from nemotron.data_prep.conversations import chatterbot_pool
    from nemotron.data_prep.transforms import read_jsonl

    documents, counts = [], {}
    for _, entry in blend.entries():
        if entry.path == "chatterbot":
            records, malformed = chatterbot_pool()[0], 0
        else:
            with storage.local_copy(entry.path, blend._base_dir) as path:
                records, malformed = read_jsonl(path)
        for record in records:
            text = json.dumps(record, ensure_ascii=False, sort_keys=True)
            doc_id = str(record.get("id") or hashlib.sha1(text.encode()).hexdigest())
            documents.append(Document(doc_id, text, entry.label))
        counts[entry.label] = {"read": len(records), "malformed": malformed}
        if not records:
            raise NemotronError(f"blend source {entry.path}: no chat records; each line must be "
                                '{"messages": [{"role": ..., "content": ...}, ...]}')
    return documents, counts


# ---------------------------------------------------------------------------------------------------
# pipeline and finalize
# ---------------------------------------------------------------------------------------------------


def _run(plan, split: str, executor: str, workers: int) -> RunStats:
    stats = run_shards(plan, workers=workers, executor=executor)
    print(f"data_prep: {split}: {len(stats.shards)} shards ({stats.written} written, {stats.redone} redone, "
          f"{stats.skipped} already done) in {stats.output_dir}", file=sys.stderr)
    return stats


def _combined_hash(runs: dict[str, RunStats]) -> str:
    return hashlib.sha256(json.dumps({split: r.run_hash for split, r in runs.items()}, sort_keys=True).encode()).hexdigest()


def _write_data_paths(output_dir, paths: dict[str, list[str]]) -> None:
    storage.write_text(storage.join(output_dir, "data_paths.json"), json.dumps(paths, indent=2) + "\n")
