"""Pretraining curation: a blend in, the split files, a tokenizer and bin/idx shards out, receipted.

What both recipes' stage-0 curation steps call (nano2's and nano3's `stage0_pretrain/data_curation.py`);
each step names its own stage lists (`StageLists`), the visible pipeline, and makes its own artifact
from what `curate` returns (`Curation.dataset_fields`). The bookkeeping lives here, named:

    load_pretrain_blend   the blend (default: Shakespeare), refused without a valid split
    curation_run_hash     everything the split files depend on
    curate_splits         pass 1: signatures -> dedup (driver) -> split JSONL, receipted as one curation
                          (`save_curation`), or re-used from an identical earlier one (`reused_curation`)
    tokenize_splits       pass 2: a byte-level BPE trained on the train split -> bin/idx shards
    remove_stale_outputs  what earlier runs with other inputs left in the folder
    Curation              what one curation made, and the counts its artifact's metrics hold

Each expensive result is re-used from an earlier run into the same folder when its receipt's run hash
matches: the split files when the blend, its sources' content and the curation knobs hash the same; the
tokenizer when the train split, vocabulary size and template are the same; finished shards by their own
receipts. No process holds the corpus (docs/data-prep.md).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nemotron import atomic
from nemotron.artifact import ArtifactRef, apply_scale, mark_unfinished, source_ref
from nemotron.data_prep.blend import DataBlend, default_pretrain_blend
from nemotron.data_prep.chat.templates import chat_template_named
from nemotron.data_prep.pipeline import WORK_ITEM_BYTES
from nemotron.data_prep.progress import timed
from nemotron.data_prep.receipts import is_done, make_receipt, read_receipt, receipt_path, write_receipt
from nemotron.data_prep.settings import PretrainCurationSettings
from nemotron.data_prep.sources import read_parquet, write_jsonl
from nemotron.data_prep.stages import Stage, StagePlan, plan_stages, plan_work_items, run_pending
from nemotron.data_prep.stages.dedup import Resolution, resolve_signatures
from nemotron.data_prep.stages.finalize import SplitStats, finalize, reader_counts
from nemotron.data_prep.tokenizer import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    VOCAB_SIZES,
    tokenizer_facts,
    train_tokenizer_on_files,
)
from nemotron.errors import NemotronError

# "Full" keeps up to a million documents; apply_scale gives tiny 10,000, more than Shakespeare's 957: the cap
# matters only for big user blends, and keeps documents chosen by a seeded hash of their ids.
FULL_DOCUMENTS = 1_000_000
# Part of the curation run hash: bump it when a code change (a filter, dedup) alters the split files.
CURATION_FORMAT_VERSION = 2  # 2: curation as stages, split files per work item


@dataclass
class StageLists:
    """A curation's three stage lists, in the order they run over the blend's work items."""

    signatures: Callable[[DataBlend, int, float], list[Stage]]  # pass 1a: (blend, seed, quality) -> read, signature
    split: Callable[[Resolution], list[Stage]]  # pass 1b: the driver's decisions -> read, decide, split JSONL
    shards: Callable[[Path], list[Stage]]  # pass 2: the tokenizer folder -> read split files, tokenize, bin/idx


@dataclass
class RephrasedRecords:
    """Rephrased documents for the train split (a `SyntheticDataset`'s records) and their share of it."""

    data_path: Path  # the records' Parquet file
    digest: str  # the dataset's digest: part of the curation's run hash
    weight: float  # share of the train split's documents that are these records (0 < weight < 1)


@dataclass
class CuratedSplits:
    """Pass 1's result: the split files (per work item, JSONL) and what the curation counted."""

    runs: list[Path]  # the split run folders: the curated documents, then the synthetic records (train)
    counts: dict  # documents read, removed by each filter, by dedup and the scale cap; the blend's draw
    reused: bool  # the split files of an identical earlier curation (receipts/curation.json) were intact
    signatures: Path | None  # the signature run this pass made (None when reused: the earlier one stays)


@dataclass
class TokenizedSplits:
    """Pass 2's result: the tokenizer and the bin/idx shards of every split."""

    tokenizer_dir: Path
    tokenizer_reused: bool  # its receipt held: trained before on the same train split and settings
    plan: StagePlan  # the tokenize-and-write run
    statuses: dict[str, str]  # per work item: written, redone or skipped
    stats: dict[str, SplitStats]  # per split: the run's statistics (paths, totals)


@dataclass
class Curation:
    """What one curation made: the folder, the raw sources (lineage), both passes' results, the phases' times."""

    path: Path
    sources: list[ArtifactRef]
    splits: CuratedSplits
    shards: TokenizedSplits
    seconds: dict[str, float] = field(default_factory=dict)  # per phase (metrics only)
    started: float = 0.0  # perf_counter at the start

    def dataset_fields(self) -> dict:
        """The fields of a `PretrainDataset` (bar config, scale, seed, inputs): the paths, counts and metrics."""
        stats, plan = self.shards.stats, self.shards.plan
        totals = {split: stats[split].totals for split in stats}
        valid_bytes = sum(read_receipt(plan.output_dir, item.name).stats.get("read/bytes", 0)
                          for item in plan.items if item.split == "valid")
        return dict(
            path=self.path,
            tokenizer_dir=self.shards.tokenizer_dir,
            train_prefixes=[Path(p) for p in stats["train"].paths],
            valid_prefixes=[Path(p) for p in stats["valid"].paths],
            test_prefixes=[Path(p) for p in stats["test"].paths] if "test" in stats else [],
            num_documents=sum(t["documents"] for t in totals.values()),
            num_train_tokens=totals["train"]["tokens"],
            num_valid_tokens=totals["valid"]["tokens"],
            vocab_size=tokenizer_facts(self.shards.tokenizer_dir).size,  # len(tokenizer), without transformers
            metrics={
                **self.splits.counts,
                "curation_reused": self.splits.reused,
                "removed_empty_at_tokenization": sum(t["records"] - t["documents"] for t in totals.values()),
                "documents": {split: t["documents"] for split, t in totals.items()},
                "tokens": {split: t["tokens"] for split, t in totals.items()},
                "tokenizer_reused": self.shards.tokenizer_reused,
                # Compression on held-out text (EOS excluded): the bigger the vocabulary, the more bytes a token.
                "valid_bytes_per_token": valid_bytes / max(1, totals["valid"]["tokens"] - totals["valid"]["documents"]),
                "shard_runs": shard_runs(plan, self.shards.statuses),
                "seconds_by_phase": self.seconds,
                "wall_seconds": time.perf_counter() - self.started,
            },
        )


def curate(settings: PretrainCurationSettings, blend: DataBlend, stages: StageLists,
           synthetic: RephrasedRecords | None = None) -> Curation:
    """Setup (knobs checked, the run hash) -> pass 1 (`curate_splits`) -> pass 2 (`tokenize_splits`) -> tidy."""
    started, seconds = time.perf_counter(), {}
    check_settings(settings)
    max_documents = apply_scale(FULL_DOCUMENTS, settings.scale)
    vocab_size = settings.vocab_size or VOCAB_SIZES[settings.scale]
    sources = [source_ref(local) if local else ArtifactRef(type="hf_dataset", path=path)  # lineage: raw text
               for path, local in blend.source_locations().items()]
    run_hash = curation_run_hash(settings, blend, sources, synthetic)
    out = mark_unfinished(settings.output_dir.resolve())  # files may change from here on: nothing vouches for them
    splits = curate_splits(settings, blend, out, run_hash, stages, max_documents, synthetic, seconds)
    shards = tokenize_splits(settings, blend, out, splits.runs, vocab_size, stages, seconds)
    remove_stale_outputs(out, [*splits.runs, shards.plan.output_dir], splits.signatures)
    return Curation(out, sources, splits, shards, seconds, started)


def load_pretrain_blend(path: Path | None) -> DataBlend:
    """The blend at `path`, or Shakespeare's by default; refused without held-out text."""
    blend = DataBlend.load(path) if path else default_pretrain_blend()
    if "valid" not in blend.splits:
        raise NemotronError(f"{path}: the blend has no valid split, but pretraining needs held-out text; add a "
                            "valid ratio to 'split' (e.g. [0.9, 0.05, 0.05]) or a 'valid' list")
    return blend


def check_settings(settings: PretrainCurationSettings) -> None:
    """Refuse impossible knobs before any work starts (an unknown scale too)."""
    apply_scale(FULL_DOCUMENTS, settings.scale)  # raises on an unknown scale
    vocab_size = settings.vocab_size or VOCAB_SIZES[settings.scale]
    if settings.num_shards < 1 or (settings.workers is not None and settings.workers < 1):
        raise NemotronError(f"--num-shards ({settings.num_shards}) and --workers ({settings.workers}) must be >= 1")
    if not 0 < settings.quality_threshold <= 1:
        raise NemotronError(f"--quality-threshold {settings.quality_threshold} must be in (0, 1]: the share of the "
                            "quality filters a kept document passes")
    if vocab_size < MIN_VOCAB_SIZE:
        raise NemotronError(f"--vocab-size {vocab_size} is too small: a byte-level BPE needs at least "
                            f"{MIN_VOCAB_SIZE} (256 bytes + {len(SPECIAL_TOKENS)} special tokens)")


def curation_run_hash(settings: PretrainCurationSettings, blend: DataBlend, sources: list[ArtifactRef],
                      synthetic: RephrasedRecords | None = None) -> str:
    """Everything the split files depend on: the blend, its sources' content, and the curation knobs."""
    inputs = {
        "format_version": CURATION_FORMAT_VERSION,
        "blend": blend.model_dump(mode="json", exclude_none=True),
        "sources": [ref.digest for ref in sources],
        "scale": settings.scale,
        "seed": settings.seed,
        "near_duplicate_threshold": settings.near_duplicate_threshold,
        **({} if settings.quality_threshold == 1.0 else {"quality_threshold": settings.quality_threshold}),
    }
    if synthetic is not None:  # only then: a run without synthetic data keeps the run hash it always had
        inputs["synthetic"] = [synthetic.digest, synthetic.weight]
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def curate_splits(settings: PretrainCurationSettings, blend: DataBlend, out: Path, run_hash: str, stages: StageLists,
                  max_documents: int, synthetic: RephrasedRecords | None, seconds: dict) -> CuratedSplits:
    """Pass 1: read -> signatures per work item (the quality verdict of the Gopher / C4 heuristics, the split
    from a hash of the document's id, the exact-dedup hash, the MinHash sketch) -> from the signatures alone
    (the driver): scale cap -> quality -> exact dedup -> near dedup (MinHash-LSH) -> the blend's weighted
    draw, per document (`stages.dedup`) -> split JSONL per work item, receipted as one curation; or the
    files of an identical earlier one."""
    counts, split_runs = reused_curation(out, run_hash, blend.splits)
    if counts is not None:
        return CuratedSplits(split_runs, counts, reused=True, signatures=None)
    items, input_fingerprint = plan_work_items(blend, WORK_ITEM_BYTES)  # the driver reads no document
    if not items:
        require_documents(blend, {})  # every source is an empty file
    with timed("signatures", seconds):
        signature_list = stages.signatures(blend, settings.seed, settings.quality_threshold)
        signatures = plan_stages(items, input_fingerprint, signature_list, out / "curation")
        run_here(signatures, settings)
        read_counts = reader_counts(signatures)
        require_documents(blend, read_counts)
    with timed("dedup", seconds):  # scale cap, quality, exact, near, weighted draw: from signatures alone
        shutil.rmtree(out / "curation" / "decisions", ignore_errors=True)
        resolution = resolve_signatures(signatures, blend, out / "curation" / "decisions", limit=max_documents,
                                        seed=settings.seed, threshold=settings.near_duplicate_threshold)
    with timed("split", seconds):
        splits = plan_stages(items, input_fingerprint, stages.split(resolution), out / "splits")
        run_here(splits, settings)
        split_runs, extra = [splits.output_dir], None
        if synthetic is not None:  # rephrased records: train only, a share of its documents
            extra = write_synthetic(out / "splits" / "synthetic" / "train", resolution.drawn["train"], synthetic,
                                    settings.seed)
            split_runs.append(out / "splits" / "synthetic")
        blend.save(out / "blend.json")  # the blend this data came from, next to it
    counts = {
        "documents_read": {name: c["read"] for name, c in read_counts.items()},
        "skipped_by_reader": {name: c["skipped"] for name, c in read_counts.items()},
        "removed_by_scale_cap": resolution.removed["scale_cap"],
        "removed_by_quality_filter": resolution.removed_by_quality,
        "removed_by_quality_total": sum(resolution.removed_by_quality.values()),
        "removed_exact_duplicates": resolution.removed["exact_duplicate"],
        "removed_near_duplicates": resolution.removed["near_duplicate"],
        "documents_curated": resolution.curated,
        "blend_draw": resolution.draws,
        "synthetic": extra,
    }
    save_curation(out, run_hash, blend.splits, counts, split_runs)
    return CuratedSplits(split_runs, counts, reused=False, signatures=signatures.output_dir)


def tokenize_splits(settings: PretrainCurationSettings, blend: DataBlend, out: Path, split_runs: list[Path],
                    vocab_size: int, stages: StageLists, seconds: dict) -> TokenizedSplits:
    """Pass 2: a byte-level BPE trained on the train split's files (streamed, receipted), with the special
    tokens and the chat template later stages need; then tokenize-and-write: the split files -> bin/idx
    shards, about `--num-shards` of train (the others in proportion), in this process at tiny, a pool of
    `--workers`, or Ray tasks (`--executor ray`)."""
    files = {split: split_files(split_runs, split) for split in blend.splits}
    with timed("tokenizer", seconds):
        tokenizer_dir, tokenizer_reused = train_tokenizer_on_files(  # receipted: re-used when nothing changed
            out, files["train"], vocab_size, chat_template_named(settings.chat_template).jinja)
    with timed("shards", seconds):
        folders = {split: list(dict.fromkeys(path.parent for path in paths)) for split, paths in files.items()}
        by_split = DataBlend.from_dict({split: [{"path": str(folder), "name": f"{split}:{k}"}
                                                for k, folder in enumerate(found)]
                                        for split, found in folders.items() if found}, base_dir=out)
        train_bytes = sum(path.stat().st_size for path in files["train"])
        items, input_fingerprint = plan_work_items(by_split, -(-train_bytes // settings.num_shards))  # ~num_shards
        shards = plan_stages(items, input_fingerprint, stages.shards(tokenizer_dir), out / "shards")
        statuses = run_here(shards, settings)
        runs, _ = finalize(shards, by_split, "bin_idx")
    return TokenizedSplits(tokenizer_dir, tokenizer_reused, shards, statuses, runs)


def write_synthetic(folder: Path, train_documents: int, synthetic: RephrasedRecords, seed: int) -> dict:
    """Rephrased records making up `synthetic.weight` of the train split, as one JSONL file of their own.

    Whole passes over the records, then a seeded sample for the rest: the same rule as a blend's
    upweighted source (`DataBlend.draw_plan`). The records are few (an endpoint wrote each one).
    """
    records = read_parquet(synthetic.data_path, source="synthetic").documents
    count = round(train_documents * synthetic.weight / (1 - synthetic.weight))
    passes, extra = divmod(count, len(records))
    added = records * passes + random.Random(f"{seed}/train/synthetic").sample(records, extra)
    random.Random(f"{seed}/train/with-synthetic").shuffle(added)
    write_jsonl(added, folder / "synthetic.jsonl")
    by_strategy: dict[str, int] = {}
    for doc in added:
        strategy = doc.id.rsplit("/", 1)[-1]
        by_strategy[strategy] = by_strategy.get(strategy, 0) + 1
    return {"records": len(records), "drawn": len(added), "weight": synthetic.weight,
            "by_strategy": dict(sorted(by_strategy.items())), "digest": synthetic.digest}


def run_here(plan: StagePlan, settings: PretrainCurationSettings) -> dict[str, str]:
    """A stage list's work items: in this process at tiny, else a pool of --workers (default: every core)
    or Ray tasks."""
    tiny_here = settings.scale == "tiny" and settings.executor == "local"
    return run_pending(plan, settings.executor, settings.workers or (1 if tiny_here else None))


def require_documents(blend: DataBlend, read_counts: dict[str, dict]) -> None:
    """Refuse a blend source that gave no document (an empty file, the wrong text_field)."""
    for _, entry in blend.entries():
        counts = read_counts.get(entry.label, {"read": 0, "skipped": {}})
        if not counts["read"]:
            detail = f" (skipped: {counts['skipped']})" if counts["skipped"] else ""
            raise NemotronError(f"no documents found in {entry.path}{detail}; check the source's path and "
                                "its text_field in the blend")


def split_files(split_runs: list[Path], split: str) -> list[Path]:
    """A split's JSONL files, in plan order: the curated shards, then the synthetic records (train)."""
    return [path for run in split_runs for path in sorted((Path(run) / split).glob("*.jsonl"))]


def save_curation(out: Path, run_hash: str, splits: list[str], counts: dict, split_runs: list[Path]) -> None:
    """Write the curation's counts, then its receipt over the split files: the commit point."""
    atomic.write_text(out / "splits" / "counts.json", json.dumps(counts, indent=2, sort_keys=True) + "\n")
    files = [path for split in splits for path in split_files(split_runs, split)]
    outputs = ["splits/counts.json", *(path.relative_to(out).as_posix() for path in files)]
    work = {"splits": splits, "runs": [Path(run).relative_to(out).as_posix() for run in split_runs]}
    write_receipt(out, make_receipt(out, run_hash, "curation", work, outputs, {}))


def reused_curation(out: Path, run_hash: str, splits: list[str]) -> tuple[dict | None, list[Path]]:
    """The counts and split runs of an earlier curation with this run hash whose files are intact."""
    receipt = read_receipt(out, "curation")
    runs = [out / run for run in (receipt.work.get("runs", []) if receipt is not None else [])]
    work = {"splits": splits, "runs": [run.relative_to(out).as_posix() for run in runs]}
    if not runs or not is_done(out, receipt, run_hash, "curation", work):
        receipt_path(out, "curation").unlink(missing_ok=True)  # from here on, nothing vouches for the splits
        return None, []
    print(f"data_curation: re-using the split files of run {run_hash[:16]} (receipts/curation.json)", file=sys.stderr)
    return json.loads((out / "splits" / "counts.json").read_text()), runs


def shard_runs(shards: StagePlan, statuses: dict[str, str]) -> dict[str, dict]:
    """Per split: the tokenization run's hash, its shards and what this run did with each."""
    runs: dict[str, dict] = {}
    for item in shards.items:
        run = runs.setdefault(item.split, {"run_hash": shards.run_hash[:16], "shards": 0, "written": 0, "redone": 0,
                                           "skipped": 0})
        run["shards"] += 1
        run[statuses[item.name]] += 1
    return runs


def remove_stale_outputs(out: Path, runs: list[Path], signatures: Path | None) -> None:
    """Delete what earlier runs with other inputs left in the folder (other run hashes, the old layout)."""
    keep = {Path(run) for run in runs} | {out / "splits" / "counts.json"}
    stale = [path for folder in ("splits", "shards") if (out / folder).is_dir()
             for path in (out / folder).iterdir() if path not in keep]
    if signatures is not None:  # a re-used curation keeps the signature run it came from
        stale += [path for path in (out / "curation").iterdir() if path.name != "decisions" and path != signatures]
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
