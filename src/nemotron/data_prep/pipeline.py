"""The data-prep library in two calls: a blend in, training-ready shards out.

    from nemotron.data_prep import DataBlend, run_pretrain_pipeline, run_sft_pipeline

    result = run_pretrain_pipeline(blend=DataBlend.load("blend.json"), output_dir="data/pretrain",
                                   tokenizer="tokenizer/", executor="ray")
    result.run_hash, result.total_tokens, result.data_paths["train"]    # bin/idx prefixes per split

    result = run_sft_pipeline(blend=chats_blend, output_dir="data/sft", tokenizer="tokenizer/",
                              chat_template="nano2", pack_size=4096)
    result.run_hash, result.total_sequences, result.data_paths["train"]  # packed Parquet files

    result = run_rl_pipeline(blend=prompts_blend, output_dir="data/rl")    # RL prompt records, no tokenizer
    result.run_hash, result.total_records, result.data_paths["train"]    # JSONL files

Each is a visible list of stages (`stages/`), the shape of the Nemotron data-prep cookbook:

    plan (driver)   list the blend's files, cut them into work items; no document is read here
    read            a work item's documents (local files, s3:// gs:// hf:// through fsspec)
    filter + split  per document: quality filters, the split from a hash of its id
    write           tokenize and write one shard per split (bin/idx, packed Parquet, JSONL: `formats/`)
    finalize        receipts -> statistics, `data_paths.json`, `blend.json`

To customise, copy the function and edit its `stages` list (docs/data-prep.md: how to add a stage).
Work items run in this process, a local process pool, on Ray or, opt-in, on cosmos-xenna (`executor`,
`workers`); the bytes are the same everywhere. No process holds the corpus: the driver keeps work
items and counts, a worker one batch of one work item. Weights are honoured as Megatron-Core does at training time:
`blend.json` gives every shard its weight (source weight x the shard's share of the source), the
`blend_per_split` a `BlendedMegatronDatasetConfig` takes, instead of a global draw. Re-running with
the same inputs re-uses every work item whose receipt holds, so an interrupted run resumes.

Unlike the recipe steps, this makes no artifact: it is the library call a notebook or another
framework makes (the nano2 stage-0 curation step shows the full curation with dedup).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from nemotron.data_prep import storage
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.executors import check_executor
from nemotron.data_prep.stages import (
    FilterSplitStage,
    ReadStage,
    Stage,
    TokenizeWriteStage,
    plan_stages,
    plan_work_items,
    run_stages,
)
from nemotron.data_prep.stages.finalize import SplitStats, finalize, write_data_paths
from nemotron.errors import NemotronError

# Input bytes per work item: what one worker holds at a time bounds by this, not by the corpus.
WORK_ITEM_BYTES = 64 << 20


@dataclass
class PipelineResult:
    """What a pipeline made: one receipted run of work items, its shards grouped by split."""

    run_hash: str  # the run's hash: inputs' checksums, work items and every stage's parameters
    output_dir: storage.PathLike
    tokenizer: str  # the tokenizer as given (a folder or a cached hub name)
    splits: dict[str, SplitStats]  # per split: shards with counts, paths and blend weights
    data_paths: dict[str, list[str]] = field(default_factory=dict)  # per split: bin/idx prefixes or Parquet files
    counts: dict[str, int] = field(default_factory=dict)  # per stage: read, removed by each filter, written
    statuses: dict[str, int] = field(default_factory=dict)  # work items written / redone / skipped (done before)


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
    num_shards: int = 1,
    executor: str = "local",
    workers: int = 1,
    filters: str = "none",
    work_item_bytes: int | str = WORK_ITEM_BYTES,
) -> PretrainResult:
    """Tokenize every split of `blend` into bin/idx shards (EOS after each document).

    `executor="local"` runs the work items in this process (`workers=1`) or in a pool of `workers`
    processes (a script then needs the usual `if __name__ == "__main__":` guard, since pool workers
    are spawned); `executor="ray"` runs them as Ray tasks (`RAY_ADDRESS`, else a local Ray with
    `workers` CPUs); `executor="xenna"` (streaming) or `"xenna-batch"` runs each stage as a cosmos-xenna
    stage (the opt-in extra `nemotron[xenna]`; docs/data-prep.md). `num_shards` is the least number
    of work items per input file (more when a file is larger than `work_item_bytes`: bytes, or a size
    string such as "256MB", `nemotron.data_prep.sizes`); `filters` names
    a quality filter set ("none", "default").
    """
    check_executor(executor)
    with resolved_tokenizer(tokenizer) as tokenizer_dir:
        stages = [
            ReadStage(mode="text"),
            FilterSplitStage(blend.split, filters=filters),
            TokenizeWriteStage("bin_idx", tokenizer_dir),
        ]
        splits, counts, statuses, run = _run(blend, stages, output_dir, num_shards, work_item_bytes, executor, workers)
    paths = write_data_paths(output_dir, splits)
    return PretrainResult(run_hash=run.run_hash, output_dir=run.output_dir, tokenizer=str(tokenizer), splits=splits,
                          data_paths=paths, counts=counts, statuses=statuses,
                          total_tokens=sum(s.totals.get("tokens", 0) for s in splits.values()),
                          total_documents=sum(s.totals.get("documents", 0) for s in splits.values()))


def run_sft_pipeline(
    blend: DataBlend,
    output_dir: str | Path,
    tokenizer: str | Path,
    num_shards: int = 1,
    chat_template: str = "nano2",
    pack_size: int = 4096,
    executor: str = "local",
    workers: int = 1,
    seed: int = 0,
    work_item_bytes: int | str = WORK_ITEM_BYTES,
) -> SFTResult:
    """Tokenize every split of a blend of chats (`{"messages": [...]}` JSONL, or "chatterbot") with an
    assistant-only loss mask and pack each work item's conversations into packed Parquet rows of
    `pack_size` tokens. `seed` seeds the packing order."""
    check_executor(executor)
    options = {"pack_size": pack_size, "chat_template": chat_template, "seed": seed}
    with resolved_tokenizer(tokenizer) as tokenizer_dir:
        from nemotron.data_prep.conversations import check_chat_tokenizer
        from nemotron.data_prep.tokenizer import load_tokenizer

        check_chat_tokenizer(load_tokenizer(tokenizer_dir), tokenizer, chat_template)  # before any work starts
        stages = [
            ReadStage(mode="chat"),
            FilterSplitStage(blend.split),
            TokenizeWriteStage("packed_parquet", tokenizer_dir, options, record="chat"),
        ]
        splits, counts, statuses, run = _run(blend, stages, output_dir, num_shards, work_item_bytes, executor, workers)
    paths = write_data_paths(output_dir, splits)
    return SFTResult(run_hash=run.run_hash, output_dir=run.output_dir, tokenizer=str(tokenizer), splits=splits,
                     data_paths=paths, counts=counts, statuses=statuses,
                     total_sequences=sum(s.totals.get("rows", 0) for s in splits.values()),
                     total_conversations=sum(s.totals.get("conversations", 0) for s in splits.values()))


@dataclass
class RLResult(PipelineResult):
    total_records: int = 0  # records written, every split (after the transform's skips)
    skipped_records: int = 0  # records the transform skipped (they did not have its shape)


def run_rl_pipeline(
    blend: DataBlend,
    output_dir: str | Path,
    num_shards: int = 1,
    transform: str = "passthrough",
    executor: str = "local",
    workers: int = 1,
    work_item_bytes: int | str = WORK_ITEM_BYTES,
) -> RLResult:
    """Split a blend of RL records (one JSON object per line: a prompt's `messages` and what its reward
    needs, e.g. `answer`) into JSONL shards per split, each record through the JSONL format's named
    `transform` (`formats/jsonl.py`: passthrough keeps it whole, openai_chat normalizes its messages).

    No tokenizer: an RL trainer tokenizes prompts itself. A record's split comes from a hash of its
    "id" (else of its canonical JSON), so the same record lands in the same split however the blend is
    cut into work items. Records are written canonically (keys sorted), so equal data gives equal bytes.
    """
    check_executor(executor)
    stages = [
        ReadStage(mode="chat"),                 # each line a record; malformed lines counted, not fatal
        FilterSplitStage(blend.split),          # the split from a hash of the record's id
        TokenizeWriteStage("jsonl", None, {"transform": transform}, record="chat"),  # one JSONL per split
    ]
    splits, counts, statuses, run = _run(blend, stages, output_dir, num_shards, work_item_bytes, executor, workers)
    paths = write_data_paths(output_dir, splits)
    return RLResult(run_hash=run.run_hash, output_dir=run.output_dir, tokenizer="", splits=splits,
                    data_paths=paths, counts=counts, statuses=statuses,
                    total_records=sum(s.totals.get("written", 0) for s in splits.values()),
                    skipped_records=sum(s.totals.get("skipped", 0) for s in splits.values()))


def run_rl_resolve_pipeline(
    blend: DataBlend,
    output_dir: str | Path,
    num_shards: int = 1,
    executor: str = "local",
    workers: int = 1,
    work_item_bytes: int | str = WORK_ITEM_BYTES,
) -> RLResult:
    """The design's RL wrapper: every record of `blend` resolved to the RL record a trainer reads, then
    split and written as `run_rl_pipeline` does. Resolved: its chat normalized to OpenAI `messages`
    (roles system/user/assistant, content parts joined), every other field (`answer`, `id`, ...) kept;
    a record with no chat an RL trainer can prompt with (no messages, a tool turn) is skipped and counted
    (`skipped_records`). The design's wrapper also fills in Hugging Face placeholder rows it downloads;
    here an `hf://` source is read as it is (`nemotron.data_prep.sources`), so none are left to fill.
    """
    return run_rl_pipeline(blend, output_dir, num_shards=num_shards, transform="rl_record", executor=executor,
                           workers=workers, work_item_bytes=work_item_bytes)


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


def _run(blend: DataBlend, stages: list[Stage], output_dir, num_shards: int, work_item_bytes: int | str,
         executor: str, workers: int):
    """plan -> the worker stages on the executor -> finalize; the one sequence both pipelines share."""
    items, inputs = plan_work_items(blend, work_item_bytes, min_items_per_file=num_shards)
    output_format = next(stage.output_format for stage in stages if isinstance(stage, TokenizeWriteStage))
    run = plan_stages(items, inputs, stages, storage.join(output_dir, "runs"))
    statuses = run_stages(run, executor=executor, workers=workers)
    splits, counts = finalize(run, blend, output_format)
    tally = {status: list(statuses.values()).count(status) for status in ("written", "redone", "skipped")}
    for stats in splits.values():
        stats.skipped = tally["skipped"]
    return splits, counts, tally, run
