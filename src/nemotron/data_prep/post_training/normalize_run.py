"""Normalize post-training sources into Hugging Face layout Parquet: parallel, receipted, resumable.

Three phases, as in `nemotron.data_prep.shards`:

1. setup, `plan_normalize(...)`: every source (`FAMILY=LOCATION[#SPLIT]`) is hashed (file sha256, or
   the `datasets` fingerprint) into a run hash, and cut into units: byte ranges of a JSONL file (cut at
   line starts), row ranges of a Parquet file or a `datasets` split.
2. pipeline, `run_units(plan, workers)`: a process pool normalizes the units. Each unit reads its raw
   records, runs the family's reader (`records.normalize_record`), drops and counts what is invalid
   or has an empty completion, writes `work/<run_hash[:16]>/unit_00003.parquet` atomically and then
   its receipt (the commit point). A re-run skips units whose receipt proves them done, so a killed
   run resumes.
3. finalize, `finalize_normalize(plan, out)`: read the units in plan order, drop exact duplicates
   (same `id`, i.e. the same rendered text; the first copy in input order wins), and write
   `<out>/<dataset>/data/<split>/<split>-0000k-of-0000n.parquet` plus a dataset card per dataset.

The bytes written depend on the inputs and the plan only, never on the number of workers or on the
order units finish in. `strict=True` turns the first invalid record into a `NemotronError` naming
file and line; otherwise every removal is counted by reason and the first few are shown on stderr.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.artifact import sha256_file
from nemotron.data_prep.post_training.records import FAMILIES, Rejected, normalize_record
from nemotron.data_prep.post_training.schema import dataset_card, read_records, write_records
from nemotron.data_prep.progress import LiveProgress
from nemotron.data_prep.receipts import is_done, make_receipt, read_receipt, receipt_path, write_receipt
from nemotron.data_prep.shards import _cut_into_shards
from nemotron.errors import NemotronError

# Part of the run hash: bump it when a code change alters the records a unit would produce.
NORMALIZE_FORMAT_VERSION = 1
EMPTY_COMPLETION = "empty completion"
DUPLICATE = "exact duplicate"
SHOWN_PER_REASON = 3  # removals printed on stderr per reason and unit; the rest are only counted


@dataclass(frozen=True)
class Source:
    """One input: a reader family, where the records are, and the dataset/split they belong to."""

    family: str
    location: str  # a .jsonl or .parquet file, or "hf:NAME[@CONFIG]"
    split: str
    dataset: str

    @classmethod
    def parse(cls, spec: str) -> Source:
        """`FAMILY=LOCATION[#SPLIT]`, e.g. `math=data/medium.jsonl` or `chat=hf:nvidia/X[@CONFIG]#chat_if`."""
        family, sep, rest = spec.partition("=")
        if not sep or family not in FAMILIES:
            raise NemotronError(
                f"source {spec!r}: write FAMILY=PATH[#SPLIT] with FAMILY one of {', '.join(FAMILIES)}"
            )
        location, _, split = rest.partition("#")
        if location.startswith("hf:"):
            if not split:
                raise NemotronError(f"source {spec!r}: a datasets source needs its split, e.g. {spec}#train")
        elif not Path(location).is_file():
            raise NemotronError(f"source {spec!r}: {location} is not a file; pass a .jsonl or .parquet file")
        elif not location.endswith((".jsonl", ".parquet")):
            raise NemotronError(f"source {spec!r}: {location} is neither .jsonl nor .parquet")
        return cls(family, location, split or Path(location).name.split(".")[0], family)

    @property
    def kind(self) -> str:
        return "hf" if self.location.startswith("hf:") else Path(self.location).suffix[1:]


@dataclass(frozen=True)
class Unit:
    index: int
    source: Source
    start: int  # byte offset (jsonl) or row (parquet, hf)
    end: int

    @property
    def name(self) -> str:
        return f"unit_{self.index:05d}"

    @property
    def work(self) -> dict:
        return {"source": f"{self.source.family}={Path(self.source.location).name}#{self.source.split}",
                "start": self.start, "end": self.end}


@dataclass(frozen=True)
class NormalizePlan:
    run_hash: str
    work_dir: Path  # <output_dir>/work/<run_hash[:16]>
    sources: tuple[Source, ...]
    units: tuple[Unit, ...]
    empty_sources: tuple[str, ...]
    strict: bool


# ---------------------------------------------------------------------------------------------
# 1. setup
# ---------------------------------------------------------------------------------------------


def _load_hf(source: Source) -> Any:
    import datasets

    name, _, config = source.location[3:].partition("@")
    try:
        return datasets.load_dataset(name, config or None, split=source.split)
    except Exception as error:  # datasets raises many types: offline, missing split, bad files
        first_line = (str(error).splitlines() or [""])[0][:200]
        raise NemotronError(f"cannot load {source.location} split {source.split!r} "
                            f"({type(error).__name__}: {first_line}); "
                            "check the name, or that it is in the local datasets cache (offline)") from error


def _fingerprint_and_ranges(source: Source, units_per_source: int) -> tuple[str, list[tuple[int, int]]]:
    if source.kind == "jsonl":
        path = Path(source.location)
        ranges = [(s.start, s.end) for s in _cut_into_shards(path, units_per_source)] if path.stat().st_size else []
        return sha256_file(path), ranges
    if source.kind == "parquet":
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(source.location).metadata.num_rows
        fingerprint = sha256_file(Path(source.location))
    else:
        dataset = _load_hf(source)
        rows, fingerprint = len(dataset), dataset._fingerprint
    step = max(1, math.ceil(rows / units_per_source))
    return fingerprint, [(start, min(start + step, rows)) for start in range(0, rows, step)]


def plan_normalize(sources: list[Source], output_dir: Path, units_per_source: int = 2,
                   strict: bool = False) -> NormalizePlan:
    """Hash the sources into a run hash and cut each into at most `units_per_source` units."""
    if not sources:
        raise NemotronError("no sources: pass --sources FAMILY=PATH[#SPLIT] ... (see --help)")
    if units_per_source < 1:
        raise NemotronError(f"units_per_source={units_per_source} must be at least 1")
    fingerprints, units, empty = [], [], []
    for source in sources:
        fingerprint, ranges = _fingerprint_and_ranges(source, units_per_source)
        fingerprints.append({"family": source.family, "dataset": source.dataset, "split": source.split,
                             "name": Path(source.location).name, "fingerprint": fingerprint})
        if not ranges:
            if strict:
                raise NemotronError(f"{source.location}: empty input (no records); pass a file with records")
            empty.append(source.location)
        units += [Unit(len(units) + k, source, start, end) for k, (start, end) in enumerate(ranges)]
    identity = {"format_version": NORMALIZE_FORMAT_VERSION, "sources": fingerprints,
                "units_per_source": units_per_source}
    run_hash = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return NormalizePlan(run_hash, Path(output_dir) / "work" / run_hash[:16], tuple(sources), tuple(units),
                         tuple(empty), strict)


# ---------------------------------------------------------------------------------------------
# 2. pipeline
# ---------------------------------------------------------------------------------------------


def _raw_records(unit: Unit) -> Iterator[tuple[str, Any]]:
    """(where, record or a Rejected) for every record of the unit; `where` is file:line or name:row."""
    source = unit.source
    if source.kind == "jsonl":
        with open(source.location, "rb") as stream:
            line_number = stream.read(unit.start).count(b"\n") + 1
            while stream.tell() < unit.end:
                line = stream.readline()
                where, line_number = f"{source.location} line {line_number}", line_number + 1
                if not line.strip():
                    continue
                try:
                    yield where, json.loads(line)
                except ValueError as error:  # bad UTF-8 is a ValueError too
                    yield where, Rejected("not JSON", str(error).split(":")[0])
        return
    if source.kind == "parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(source.location).slice(unit.start, unit.end - unit.start).to_pylist()
    else:
        rows = _load_hf(source).select(range(unit.start, unit.end)).to_list()
    for offset, row in enumerate(rows):
        yield f"{source.location} row {unit.start + offset}", row


def normalize_unit(unit: Unit, strict: bool) -> tuple[list[dict], Counter]:
    """The unit's normalized records (input order) and its removals by reason."""
    kept, removed, shown = [], Counter(), Counter()
    for where, raw in _raw_records(unit):
        try:
            if isinstance(raw, Rejected):
                raise raw
            record = normalize_record(unit.source.family, raw, unit.source.dataset, unit.source.split, where)
            if not record["quality_completion_nonempty"]:
                raise Rejected(EMPTY_COMPLETION, "the last assistant message is empty")
        except Rejected as rejected:
            if strict and rejected.reason != EMPTY_COMPLETION:
                raise NemotronError(f"{where}: {rejected}; fix or remove the record, or run without --strict "
                                    "to count and skip invalid records") from None
            removed[rejected.reason] += 1
            shown[rejected.reason] += 1
            if shown[rejected.reason] <= SHOWN_PER_REASON:
                print(f"skipped {where}: {rejected}", file=sys.stderr)
            continue
        kept.append(record)
    return kept, removed


def _ensure_unit(job: tuple[NormalizePlan, Unit]) -> tuple[str, dict[str, int]]:
    """Normalize one unit unless its receipt proves it done: (status, its counts)."""
    plan, unit = job
    receipt = read_receipt(plan.work_dir, unit.name)
    if is_done(plan.work_dir, receipt, plan.run_hash, unit.name, unit.work):
        return "skipped", receipt.stats
    receipt_path(plan.work_dir, unit.name).unlink(missing_ok=True)  # nothing claims the unit is done now
    records, removed = normalize_unit(unit, plan.strict)
    write_records(records, plan.work_dir / f"{unit.name}.parquet")
    stats = {"records": len(records), **{f"removed/{reason}": n for reason, n in sorted(removed.items())}}
    write_receipt(plan.work_dir, make_receipt(plan.work_dir, plan.run_hash, unit.name, unit.work,
                                              [f"{unit.name}.parquet"], stats))
    return "written", stats


def run_units(plan: NormalizePlan, workers: int = 1) -> Counter:
    """Normalize every unit not already done (in a pool when workers > 1); counts of skipped/written.
    Progress (units, records kept, removals per reason) goes to stderr and, with W&B, to live metrics
    `post_training/normalize/<run hash>/...`."""
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(plan, unit) for unit in plan.units]
    statuses: Counter = Counter()
    progress = LiveProgress(f"post_training/normalize/{plan.run_hash[:16]}", len(jobs), rates=("records",))
    if workers <= 1:
        results: Iterator[tuple[str, dict[str, int]]] = map(_ensure_unit, jobs)
        for status, stats in results:
            statuses[status] += 1
            progress.advance(counts={**stats, f"units/{status}": 1})
    else:
        # spawn: the same behaviour on Linux and macOS, and no copied parent state in the children.
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for status, stats in pool.imap_unordered(_ensure_unit, jobs):
                statuses[status] += 1
                progress.advance(counts={**stats, f"units/{status}": 1})
    progress.close()
    return statuses


# ---------------------------------------------------------------------------------------------
# 3. finalize
# ---------------------------------------------------------------------------------------------


@dataclass
class NormalizeResult:
    dataset_dirs: list[Path]
    counts: dict[str, dict[str, int]]  # dataset -> split -> records
    removed: dict[str, int]  # reason -> records (all datasets)
    read: int  # raw records read

    def as_metrics(self) -> dict:
        return {"records_read": self.read, "records_written": sum(sum(s.values()) for s in self.counts.values()),
                "removed_by_reason": dict(sorted(self.removed.items())),
                "removed_total": sum(self.removed.values()), "records_per_split": self.counts}


def finalize_normalize(plan: NormalizePlan, output_dir: Path, records_per_file: int) -> NormalizeResult:
    """Dedup across units (first copy wins), write the Hugging Face layout and a card per dataset."""
    by_split: dict[tuple[str, str], list[dict]] = {}
    removed: dict[str, Counter] = {s.dataset: Counter() for s in plan.sources}  # per dataset, by reason
    seen, read = set(), 0
    for location in plan.empty_sources:
        removed[next(s.dataset for s in plan.sources if s.location == location)]["empty input"] += 1
    for unit in plan.units:
        receipt = read_receipt(plan.work_dir, unit.name)
        if receipt is None or receipt.run_hash != plan.run_hash:
            raise NemotronError(f"{plan.work_dir}: {unit.name} has no receipt; re-run to finish the normalize run")
        removed[unit.source.dataset].update(
            {k.removeprefix("removed/"): v for k, v in receipt.stats.items() if k.startswith("removed/")})
        read += sum(receipt.stats.values())
        for record in read_records(plan.work_dir / f"{unit.name}.parquet"):
            if record["id"] in seen:
                removed[unit.source.dataset][DUPLICATE] += 1
                continue
            seen.add(record["id"])
            by_split.setdefault((record["dataset"], record["split"]), []).append(record)
    total = sum(removed.values(), Counter())
    if not by_split:
        raise NemotronError(f"no records survived normalization (removed: {dict(total) or 'nothing read'}); "
                            "check the sources and their families")
    dataset_dirs, counts = [], {}
    for dataset in sorted({d for d, _ in by_split}):
        splits = {split: records for (d, split), records in sorted(by_split.items()) if d == dataset}
        counts[dataset] = {split: len(records) for split, records in splits.items()}
        sources = sorted({f"{s.family}={Path(s.location).name}#{s.split}"
                          for s in plan.sources if s.dataset == dataset})
        card = dataset_card(dataset, counts[dataset], dict(removed[dataset]), sources, list(splits))
        dataset_dirs.append(_write_dataset(Path(output_dir) / dataset, splits, records_per_file, card))
    return NormalizeResult(dataset_dirs, counts, dict(sorted(total.items())), read)


def _write_dataset(folder: Path, splits: dict[str, list[dict]], records_per_file: int, card: str) -> Path:
    """Build `<tag>/` in a staging folder, then swap it in: readers never see a half-written dataset."""
    with atomic.output_folder(folder) as staging:
        for split, records in splits.items():
            files = max(1, math.ceil(len(records) / records_per_file))
            for k in range(files):
                chunk = records[k * records_per_file:(k + 1) * records_per_file]
                write_records(chunk, staging / "data" / split / f"{split}-{k:05d}-of-{files:05d}.parquet")
        atomic.write_text(staging / "README.md", card)
    return folder
