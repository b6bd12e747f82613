"""Normalize post-training sources into Hugging Face layout Parquet: parallel, receipted, resumable.

Three phases, on the stage runner every data-prep run uses (`nemotron.data_prep.stages.runner`):

1. setup, `plan_normalize(...)`: every source (`FAMILY=LOCATION[#SPLIT]`) is fingerprinted (file sha256,
   or the `datasets` fingerprint) and cut into work items: byte ranges of a JSONL file cut at line
   starts (`stages.plan.line_cuts`), row ranges of a Parquet file or a `datasets` split. The run hash
   covers the fingerprints, the items and the stage list.
2. stages, `run_stages(plan.stages, workers=N)`: per work item, `normalize_stages(strict)`:
   read its raw records -> the family's reader (`records.normalize_record`), dropping and counting what
   is invalid or has an empty completion -> write `work/<run_hash[:16]>/shard_00003.parquet`
   atomically, then its receipt (the commit point). A re-run skips items whose receipt proves them
   done, so a killed run resumes; the items run in this process, a local pool or on Ray.
3. finalize, `finalize_normalize(plan, out)`: read the items' files in plan order, drop exact
   duplicates (same `id`, i.e. the same rendered text; the first copy in input order wins), and write
   `<out>/<dataset>/data/<split>/<split>-0000k-of-0000n.parquet` plus a dataset card per dataset.

The bytes written depend on the inputs only, never on the number of workers, on how the sources are
cut or on the order items finish in. `strict=True` turns the first invalid record into a
`NemotronError` naming file and line; otherwise every removal is counted by reason and the first few
are shown on stderr.
"""

from __future__ import annotations

import json
import math
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
from nemotron.data_prep.receipts import read_receipt
from nemotron.data_prep.stages.base import ItemContext, Stage, WorkItem
from nemotron.data_prep.stages.plan import checksum_and_count, line_cuts
from nemotron.data_prep.stages.runner import StagePlan, plan_stages
from nemotron.errors import NemotronError

# Part of the run hash: bump it when a code change alters the records a work item would produce.
NORMALIZE_FORMAT_VERSION = 1
EMPTY_COMPLETION = "empty completion"
DUPLICATE = "exact duplicate"
SHOWN_PER_REASON = 3  # removals printed on stderr per reason and work item; the rest are only counted


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
class RecordsItem(WorkItem):
    """A work item of raw post-training records: `source` is the dataset they go to, `split` theirs,
    `kind` jsonl (byte range) | parquet | hf (row range), and `family` the reader that maps them."""

    family: str = ""


@dataclass(frozen=True)
class NormalizePlan:
    stages: StagePlan  # the work items, the stage list and the run hash (`stages.runner`)
    sources: tuple[Source, ...]
    empty_sources: tuple[str, ...]  # locations that hold no record
    capped_sources: tuple[str, ...] = ()  # locations with records past `max_records`, left unread


# ---------------------------------------------------------------------------------------------
# 1. setup
# ---------------------------------------------------------------------------------------------


def plan_normalize(sources: list[Source], output_dir: Path, units_per_source: int = 2,
                   strict: bool = False, max_records: int | None = None) -> NormalizePlan:
    """Fingerprint the sources, cut each into at most `units_per_source` work items, and plan the
    normalize stages over them under `<output_dir>/work/`. `max_records`: read only the first that many
    records of each source (a smoke run over a real set); the sources cut short are `capped_sources`."""
    if not sources:
        raise NemotronError("no sources: pass --sources FAMILY=PATH[#SPLIT] ... (see --help)")
    if units_per_source < 1:
        raise NemotronError(f"units_per_source={units_per_source} must be at least 1")
    if max_records is not None and max_records < 1:
        raise NemotronError(f"--max-records {max_records} must be at least 1; leave it out to read every record")
    fingerprints, items, empty, capped = [], [], [], []
    for source in sources:
        fingerprint, ranges, cut_short = _fingerprint_and_ranges(source, units_per_source, max_records)
        if cut_short:
            capped.append(source.location)
        fingerprints.append({"family": source.family, "dataset": source.dataset, "split": source.split,
                             "name": Path(source.location).name, "fingerprint": fingerprint})
        if not ranges:
            if strict:
                raise NemotronError(f"{source.location}: empty input (no records); pass a file with records")
            empty.append(source.location)
        for start, end, first_row in ranges:
            items.append(RecordsItem(len(items), source.dataset, source.kind, source.location,
                                     Path(source.location).name, start=start, end=end, first_row=first_row,
                                     split=source.split, family=source.family))
    if not items:
        raise NemotronError(f"every source is empty ({', '.join(empty)}); pass files with records")
    stages = plan_stages(items, fingerprints, normalize_stages(strict), Path(output_dir) / "work")
    return NormalizePlan(stages, tuple(sources), tuple(empty), tuple(capped))


def _fingerprint_and_ranges(source: Source, units_per_source: int, max_records: int | None = None,
                            ) -> tuple[str, list[tuple[int, int, int]], bool]:
    """The source's fingerprint, its work items' (start, end, first line or row), and whether
    `max_records` left records of it unread."""
    if source.kind == "jsonl":
        end = _end_of_records(source.location, max_records)
        cuts = line_cuts(source.location, units_per_source, size=end)
        checksum, lines_before = checksum_and_count(source.location, [start for start, _ in cuts])
        ranges = [(start, stop, before + 1) for (start, stop), before in zip(cuts, lines_before, strict=True)]
        return checksum, ranges, end is not None and end < Path(source.location).stat().st_size
    if source.kind == "parquet":
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(source.location).metadata.num_rows
        fingerprint = sha256_file(Path(source.location))
    else:
        dataset = _load_hf(source.location, source.split)
        rows, fingerprint = len(dataset), dataset._fingerprint
    read = rows if max_records is None else min(rows, max_records)
    step = max(1, math.ceil(read / units_per_source))
    return fingerprint, [(start, min(start + step, read), start) for start in range(0, read, step)], read < rows


def _end_of_records(path: str, max_records: int | None) -> int | None:
    """The byte offset just past the `max_records`-th record (non-blank line) of a JSONL file; None: all."""
    if max_records is None:
        return None
    records = 0
    with open(path, "rb") as stream:
        while records < max_records and (line := stream.readline()):
            records += bool(line.strip())
        return stream.tell()


def _load_hf(location: str, split: str) -> Any:
    import datasets

    name, _, config = location[3:].partition("@")
    try:
        return datasets.load_dataset(name, config or None, split=split)
    except Exception as error:  # datasets raises many types: offline, missing split, bad files
        first_line = (str(error).splitlines() or [""])[0][:200]
        raise NemotronError(f"cannot load {location} split {split!r} "
                            f"({type(error).__name__}: {first_line}); "
                            "check the name, or that it is in the local datasets cache (offline)") from error


# ---------------------------------------------------------------------------------------------
# 2. stages: read -> normalize -> write, per work item
# ---------------------------------------------------------------------------------------------


def normalize_stages(strict: bool) -> list[Stage]:
    """The stage list of a normalize run (the runner fuses them on one worker per work item)."""
    return [ReadRawStage(), NormalizeStage(strict), WriteParquetStage()]


class ReadRawStage(Stage):
    """A work item's raw records: (where, record), `where` naming file and line or row; a line that is
    not JSON comes as a `Rejected`, for the next stage to count."""

    name = "read"

    def process(self, context: ItemContext, records: Iterator[Any]) -> Iterator[tuple[str, Any]]:
        for where, raw in _raw_records(context.item):
            context.count(self.name, "records")
            yield where, raw



def _raw_records(item: RecordsItem) -> Iterator[tuple[str, Any]]:
    """(where, record or a Rejected) for every record of the item; `where` is file line or name row."""
    if item.kind == "jsonl":
        with open(item.path, "rb") as stream:
            stream.seek(item.start)
            line_number = item.first_row
            while stream.tell() < item.end:
                line = stream.readline()
                where, line_number = f"{item.path} line {line_number}", line_number + 1
                if not line.strip():
                    continue
                try:
                    yield where, json.loads(line)
                except ValueError as error:  # bad UTF-8 is a ValueError too
                    yield where, Rejected("not JSON", str(error).split(":")[0])
        return
    if item.kind == "parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(item.path).slice(item.start, item.end - item.start).to_pylist()
    else:
        rows = _load_hf(item.path, item.split).select(range(item.start, item.end)).to_list()
    for offset, row in enumerate(rows):
        yield f"{item.path} row {item.start + offset}", row


class NormalizeStage(Stage):
    """Each raw record through its family's reader (`records.normalize_record`); what is invalid or has
    an empty completion is dropped and counted by reason (`normalize/removed/<reason>`), the first
    few per reason and item shown on stderr. `strict`: the first invalid record is an error instead."""

    name = "normalize"

    def __init__(self, strict: bool = False):
        self.strict = strict

    def fingerprint(self) -> dict:
        return {"version": NORMALIZE_FORMAT_VERSION, "strict": self.strict}

    def process(self, context: ItemContext, records: Iterator[tuple[str, Any]]) -> Iterator[dict]:
        item, shown = context.item, Counter()
        for where, raw in records:
            try:
                if isinstance(raw, Rejected):
                    raise raw
                record = normalize_record(item.family, raw, item.source, item.split, where)
                if not record["quality_completion_nonempty"]:
                    raise Rejected(EMPTY_COMPLETION, "the last assistant message is empty")
            except Rejected as rejected:
                if self.strict and rejected.reason != EMPTY_COMPLETION:
                    raise NemotronError(f"{where}: {rejected}; fix or remove the record, or run without --strict "
                                        "to count and skip invalid records") from None
                context.count(self.name, f"removed/{rejected.reason}")
                shown[rejected.reason] += 1
                if shown[rejected.reason] <= SHOWN_PER_REASON:
                    print(f"skipped {where}: {rejected}", file=sys.stderr)
                continue
            yield record


class WriteParquetStage(Stage):
    """The item's normalized records, in input order, as one Parquet file of the normalized schema."""

    name = "write_parquet"

    def output_names(self, item: WorkItem) -> list[str]:
        return [f"{item.name}.parquet"]

    def process(self, context: ItemContext, records: Iterator[dict]) -> Iterator[None]:
        kept = list(records)
        [name] = self.output_names(context.item)
        write_records(kept, context.folder / name)
        context.outputs.append(name)
        context.count(self.name, "records", len(kept))
        return iter(())


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
    """Dedup across work items (first copy wins), write the Hugging Face layout and a card per dataset."""
    run = plan.stages
    by_split: dict[tuple[str, str], list[dict]] = {}
    removed: dict[str, Counter] = {s.dataset: Counter() for s in plan.sources}  # per dataset, by reason
    seen, read = set(), 0
    for location in plan.empty_sources:
        removed[next(s.dataset for s in plan.sources if s.location == location)]["empty input"] += 1
    for item in run.items:  # plan order: input order, whatever order the items finished in
        receipt = read_receipt(run.output_dir, item.name)
        if receipt is None or receipt.run_hash != run.run_hash:
            raise NemotronError(f"{run.output_dir}: {item.name} has no receipt; re-run to finish the normalize run")
        removed[item.source].update({key.removeprefix("normalize/removed/"): n for key, n in receipt.stats.items()
                                     if key.startswith("normalize/removed/")})
        read += receipt.stats.get("read/records", 0)
        for name in receipt.outputs:
            for record in read_records(Path(run.output_dir) / name):
                if record["id"] in seen:
                    removed[item.source][DUPLICATE] += 1
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
