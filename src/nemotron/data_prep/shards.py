"""Turn a JSONL corpus into receipted shards: deterministic, parallel (local pool or Ray), resumable.

The run reads as the Nemotron data-prep cookbook's three phases:

1. setup, `plan_run(...)`: hash the inputs (the input file's sha256, the tokenizer folder's file
   checksums, the parameters) into a *run hash* that names the output folder
   `<output_root>/<run_hash[:16]>/`, and cut the input into contiguous shards. Same inputs, same
   folder; change anything, and the run gets a fresh folder instead of mixing old and new shards.
2. pipeline, `run_shards(plan, workers=N, executor="local" | "ray")`: the shards are work items
   (`executors.py`: this process, a local process pool, or Ray tasks on a cluster). For each one a
   worker checks its receipt (`receipts.py`) and skips it if the receipt proves it is done;
   otherwise it clears any leftovers of an interrupted attempt, tokenizes the shard's lines,
   appends EOS to every document, writes `shard_00003.bin/.idx` atomically (`indexed.py`), and
   writes `receipts/shard_00003.json` last, as the commit point.
3. finalize, `finalize_run(plan)`: scan the receipts, check that every shard has one, and
   aggregate documents and tokens into `summary.json`. Progress, the plan and the finished shards
   also go to the active tracker (`nemotron.trackers`: W&B tables, a ledger line, or nothing).

Output formats (`output_format`): "bin_idx" (above, for pretraining), "packed_parquet" (chat
conversations tokenized with an exact loss mask and packed per shard, for SFT) and "jsonl" (records
reshaped by a named transform). Each is one writer in the format registry (`formats/`); this module
never branches on a format's name, and every format is sharded, receipted and resumed the same way.

Storage: the input and the output root may be local paths or fsspec URLs (`s3://`, `gs://`,
`hf://`, see `storage.py`). Toward an object store a worker writes its shard to a local scratch
folder, checksums it, uploads each file whole and uploads the receipt last.

Sharding: shards are contiguous line ranges cut at (about) equal *byte* offsets, each boundary moved
forward to the next line start. Planning then costs one seek per shard instead of a pass that counts
lines, and shards are balanced by text size, which tracks token count better than line count. A shard
that would be empty (one line longer than a shard's share) is dropped, so a plan may have fewer
shards than asked for.

Determinism: shards depend only on their byte range, the tokenizer and the parameters, never on
the number of workers or the order they finish in; receipts and `summary.json` hold no timestamps
or paths. The same inputs give a byte-identical run folder (tested, including after a SIGKILL).

Input: one JSON object per line with the document in `text_field` ("text"); blank lines are
skipped, and so are documents whose text is empty (an EOS alone teaches nothing).

Run alone:  python -m nemotron.data_prep.shards --input docs.jsonl --tokenizer tok/ --output-root out/
            [--workers 2] [--executor ray]
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from nemotron.data_prep import storage
from nemotron.data_prep.executors import check_executor, run_work_items
from nemotron.data_prep.formats import FORMATS, ShardInput, get_format
from nemotron.data_prep.receipts import (
    Receipt,
    is_done,
    make_receipt,
    read_receipt,
    receipt_path,
    scan_receipts,
    write_receipt,
)
from nemotron.errors import NemotronError
from nemotron.trackers import get_lineage_tracker

# Part of the run hash: bump it when a code change alters the bytes a shard would contain.
SHARD_FORMAT_VERSION = 1
# What each output format writes per shard (the receipt checksums these files).
OUTPUT_SUFFIXES = {name: fmt.suffixes for name, fmt in FORMATS.items()}


# ---------------------------------------------------------------------------------------------
# 1. setup: the run hash and the shard plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardSpec:
    """One shard: the input lines that start in the byte range [start, end)."""

    index: int
    start: int
    end: int

    @property
    def name(self) -> str:
        return f"shard_{self.index:05d}"

    @property
    def work(self) -> dict:
        """What the receipt records as this shard's assignment."""
        return {"input_start": self.start, "input_end": self.end}


@dataclass(frozen=True)
class ShardPlan:
    input_path: storage.PathLike  # a local Path or a URL string
    tokenizer_dir: Path | None  # None for output_format="jsonl", which tokenizes nothing
    output_dir: storage.PathLike  # <output_root>/<run_hash[:16]>
    run_hash: str
    fingerprint: dict  # exactly what was hashed into run_hash
    dtype: str  # token dtype of bin/idx shards, from the vocabulary size ("" when not bin_idx)
    eos_id: int
    text_field: str
    shards: tuple[ShardSpec, ...]
    tokenizer_json: str = field(repr=False)  # the pipeline workers run, exactly as load_tokenizer built it
    output_format: str = "bin_idx"  # bin_idx | packed_parquet | jsonl
    options: dict = field(default_factory=dict)  # the format's parameters (pack_size, transform, ...)

    def prefix(self, spec: ShardSpec) -> storage.PathLike:
        return storage.join(self.output_dir, spec.name)

    def output_names(self, spec: ShardSpec) -> list[str]:
        return [f"{spec.name}{suffix}" for suffix in get_format(self.output_format).suffixes]


def plan_run(
    input_jsonl: Path | str,
    tokenizer_dir: Path | str | None,
    output_root: Path | str,
    num_shards: int = 8,
    text_field: str = "text",
    output_format: str = "bin_idx",
    options: dict | None = None,
) -> ShardPlan:
    """Hash the inputs into a run hash and cut the input into at most `num_shards` shards.

    `input_jsonl` and `output_root` may be fsspec URLs; `tokenizer_dir` is a local folder.
    """
    input_path = input_jsonl if storage.is_url(input_jsonl) else Path(input_jsonl)
    fmt = get_format(output_format)
    if not storage.exists(input_path):
        raise NemotronError(
            f"input JSONL not found: {input_path}; pass a file with one {{\"{text_field}\": ...}} per line"
        )
    if num_shards < 1:
        raise NemotronError(f"num_shards={num_shards} must be at least 1")
    if storage.size(input_path) == 0:
        raise NemotronError(f"input JSONL {input_path} is empty; pass a file with at least one document")
    options = dict(options or {})
    fmt.check_options(options)
    fingerprint = {
        "format_version": SHARD_FORMAT_VERSION,
        "input_sha256": storage.sha256(input_path),
        "tokenizer_sha256": {},
        "num_shards": num_shards,
        "text_field": text_field,
    }
    fingerprint |= fmt.fingerprint(options)
    dtype, eos_id, tokenizer_json = "", -1, ""
    if tokenizer_dir is not None:
        from nemotron.data_prep.tokenizer import load_tokenizer  # imports transformers: only here

        tokenizer_dir = Path(tokenizer_dir)
        tokenizer = load_tokenizer(tokenizer_dir)
        if tokenizer.eos_token_id is None and fmt.needs_eos:
            raise NemotronError(
                f"the tokenizer in {tokenizer_dir} has no eos_token; set one so documents can be separated"
            )
        fingerprint["tokenizer_sha256"] = {
            path.name: storage.sha256(path) for path in sorted(tokenizer_dir.iterdir()) if path.is_file()
        }
        dtype = fmt.token_dtype(len(tokenizer))
        eos_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else -1
        tokenizer_json = tokenizer.backend_tokenizer.to_str()
    elif fmt.needs_tokenizer:
        raise NemotronError(f"output_format={output_format!r} tokenizes, so it needs a tokenizer folder")
    run_hash = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
    return ShardPlan(
        input_path=input_path,
        tokenizer_dir=tokenizer_dir,
        output_dir=storage.join(output_root, run_hash[:16]),
        run_hash=run_hash,
        fingerprint=fingerprint,
        dtype=dtype,
        eos_id=eos_id,
        text_field=text_field,
        shards=_cut_into_shards(input_path, num_shards),
        tokenizer_json=tokenizer_json,
        output_format=output_format,
        options=options,
    )


def _cut_into_shards(path: storage.PathLike, num_shards: int) -> tuple[ShardSpec, ...]:
    """Boundaries at k/num_shards of the file size, each moved forward to the next line start."""
    size = storage.size(path)
    boundaries = [0]
    with storage.open_read(path) as stream:
        for k in range(1, num_shards):
            target = k * size // num_shards
            stream.seek(max(target - 1, 0))
            stream.readline()  # ends just after the first newline at or after target-1: a line start
            boundaries.append(max(stream.tell(), boundaries[-1]))
    boundaries.append(size)
    ranges = [(start, end) for start, end in zip(boundaries, boundaries[1:]) if end > start]
    return tuple(ShardSpec(index, start, end) for index, (start, end) in enumerate(ranges))


# ---------------------------------------------------------------------------------------------
# 2. pipeline: one work item per shard, on the local pool or as Ray tasks
# ---------------------------------------------------------------------------------------------


def run_shards(plan: ShardPlan, workers: int = 1, progress: bool = True, executor: str = "local") -> RunStats:
    """Make every shard of the plan that is not already done, then finalize. Safe to re-run.

    `executor="local"` runs the shards in this process (workers=1) or a pool of `workers` processes;
    `executor="ray"` runs each shard as a Ray task (see `executors.py`). The bytes are the same.
    """
    check_executor(executor)
    if storage.size(plan.input_path) != plan.shards[-1].end:
        raise NemotronError(
            f"{plan.input_path} changed size since plan_run hashed it; call plan_run again (a new run hash)"
        )
    storage.make_folder(plan.output_dir)
    _remove_temp_files(plan.output_dir, "plan.json")
    storage.write_text(storage.join(plan.output_dir, "plan.json"), _plan_json(plan))
    statuses = {"skipped": 0, "redone": 0, "written": 0}
    finished: dict[str, tuple[str, float]] = {}
    # Each job carries the plan without the tokenizer: workers build it once, from the setup payload.
    light_plan = replace(plan, tokenizer_json="")
    jobs = [(light_plan, spec) for spec in plan.shards]
    with tqdm(total=len(plan.shards), desc=get_format(plan.output_format).progress_label, unit="shard", file=sys.stderr,
              disable=not progress) as bar:
        for name, status, seconds in run_work_items(_ensure_shard_job, jobs, _worker_state, _setup_payload(plan),
                                                   executor=executor, workers=workers):
            statuses[status] += 1
            finished[name] = (status, seconds)
            bar.update()
    stats = finalize_run(plan)
    stats.skipped, stats.redone, stats.written = statuses["skipped"], statuses["redone"], statuses["written"]
    _report_to_tracker(get_lineage_tracker(), plan, stats, finished, executor)
    return stats


def _setup_payload(plan: ShardPlan) -> tuple[str, object]:
    """What a worker needs to build its state once (the format decides: the tokenizer JSON, or the
    tokenizer folder's files where the chat markers and template live in its config)."""
    return plan.output_format, get_format(plan.output_format).setup_payload(plan.tokenizer_json, plan.tokenizer_dir)


def _worker_state(payload: tuple[str, object]):
    output_format, format_payload = payload
    return get_format(output_format).setup(format_payload)


def _ensure_shard_job(state, job: tuple[ShardPlan, ShardSpec]) -> tuple[str, str, float]:
    plan, spec = job
    started = time.perf_counter()
    status = _ensure_shard(plan, spec, state)
    return spec.name, status, time.perf_counter() - started


def _ensure_shard(plan: ShardPlan, spec: ShardSpec, state) -> str:
    """Skip the shard if its receipt proves it done; otherwise (re)make it. Returns the status."""
    receipt = read_receipt(plan.output_dir, spec.name)
    if is_done(plan.output_dir, receipt, plan.run_hash, spec.name, spec.work):
        return "skipped"
    had_leftovers = _discard_shard(plan, spec)
    if not storage.is_url(plan.output_dir):
        outputs, stats = _write_shard(plan, spec, state, Path(plan.output_dir))
        receipt = make_receipt(plan.output_dir, plan.run_hash, spec.name, spec.work, outputs, stats)
    else:  # an object store: write and checksum locally, then publish each file whole
        with tempfile.TemporaryDirectory(prefix=f"{spec.name}.") as scratch:
            outputs, stats = _write_shard(plan, spec, state, Path(scratch))
            receipt = make_receipt(scratch, plan.run_hash, spec.name, spec.work, outputs, stats)
            for name in outputs:
                storage.publish(Path(scratch) / name, storage.join(plan.output_dir, name))
    write_receipt(plan.output_dir, receipt)  # last: the commit point
    return "redone" if had_leftovers else "written"


def _write_shard(plan: ShardPlan, spec: ShardSpec, state, folder: Path) -> tuple[list[str], dict[str, int]]:
    """Write the shard's files into `folder` (each one atomically); returns (file names, stats)."""
    shard = ShardInput(lines=lambda: _read_lines(plan, spec), where=str(plan.input_path), text_field=plan.text_field,
                       line_number=lambda offset: _line_number(plan.input_path, offset), dtype=plan.dtype,
                       eos_id=plan.eos_id, options=plan.options)
    return get_format(plan.output_format).write(shard, state, folder, spec.name)


def _discard_shard(plan: ShardPlan, spec: ShardSpec) -> bool:
    """Delete whatever an earlier attempt left of this shard; True if there was anything."""
    run_dir, shard = plan.output_dir, spec.name
    # The receipt goes first: from here on, nothing claims this shard is done.
    leftovers = [receipt_path(run_dir, shard), *(storage.join(run_dir, name) for name in plan.output_names(spec))]
    removed = [path for path in leftovers if storage.remove(path)]
    if not storage.is_url(run_dir):  # temp files of interrupted atomic writes (object stores have none)
        receipts = Path(receipt_path(run_dir, shard)).parent
        temps = sorted(Path(run_dir).glob(f".{shard}.*.tmp")) + sorted(receipts.glob(f".{shard}.*.tmp"))
        for path in temps:
            path.unlink(missing_ok=True)
        removed += temps
    return bool(removed)


def _read_lines(plan: ShardPlan, spec: ShardSpec) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line) of every non-blank line in the shard's byte range."""
    with storage.open_read(plan.input_path) as stream:
        stream.seek(spec.start)
        position = spec.start
        while position < spec.end:
            line = stream.readline()
            if not line:  # the file shrank after planning: never loop forever on EOF
                raise NemotronError(f"{plan.input_path} ended early; it changed since plan_run, plan again")
            line_start, position = position, position + len(line)
            if line.strip():
                yield line_start, line


def _line_number(path: storage.PathLike, offset: int) -> int:
    """1-based line number of the line starting at byte `offset` (only computed for error messages)."""
    with storage.open_read(path) as stream:
        return stream.read(offset).count(b"\n") + 1


# ---------------------------------------------------------------------------------------------
# 3. finalize: scan receipts, aggregate
# ---------------------------------------------------------------------------------------------


@dataclass
class RunStats:
    run_hash: str
    output_dir: storage.PathLike
    dtype: str
    documents: int
    tokens: int
    shards: list[dict]  # per shard: name and its counts (bin_idx: records, documents, tokens)
    prefixes: list[storage.PathLike]  # bin_idx shard prefixes holding a token, ready for a Megatron blend
    outputs: list[storage.PathLike] = field(default_factory=list)  # every non-empty output file, plan order
    totals: dict[str, int] = field(default_factory=dict)  # every count summed over the shards
    output_format: str = "bin_idx"
    skipped: int = 0  # shards whose receipt proved them done (set by run_shards)
    redone: int = 0  # shards remade over leftovers of an interrupted or corrupted attempt
    written: int = 0  # shards made from scratch

    def to_dict(self) -> dict:
        return json.loads(json.dumps(asdict(self), default=str))


def finalize_run(plan: ShardPlan) -> RunStats:
    """Aggregate the receipts of a complete run and write `summary.json`; refuse an incomplete run."""
    receipts = {r.shard: r for r in scan_receipts(plan.output_dir) if r.run_hash == plan.run_hash}
    missing = [s.name for s in plan.shards if s.name not in receipts or receipts[s.name].work != s.work]
    if missing:
        raise NemotronError(
            f"run {plan.output_dir} is incomplete: {len(missing)} shard(s) have no receipt "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); re-run run_shards to finish it"
        )
    ordered: list[Receipt] = [receipts[spec.name] for spec in plan.shards]  # plan order, not finish order
    shards = [{"name": receipt.shard, **receipt.stats} for receipt in ordered]
    totals: dict[str, int] = {}
    for shard in shards:
        for key, value in shard.items():
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    stats = RunStats(
        run_hash=plan.run_hash,
        output_dir=plan.output_dir,
        dtype=plan.dtype,
        documents=totals.get("documents", 0),
        tokens=totals.get("tokens", 0),
        shards=shards,
        prefixes=[plan.prefix(spec) for spec, shard in zip(plan.shards, shards)
                  if get_format(plan.output_format).indexed and shard["tokens"] > 0],
        outputs=[storage.join(plan.output_dir, name) for receipt in ordered for name in sorted(receipt.outputs)],
        totals=totals,
        output_format=plan.output_format,
    )
    # Only what the inputs determine: no paths, no skipped/redone counts, no timestamps.
    summary = {key: getattr(stats, key) for key in ("run_hash", "dtype", "documents", "tokens", "shards")}
    summary |= get_format(plan.output_format).summary(totals)
    _remove_temp_files(plan.output_dir, "summary.json")
    storage.write_text(storage.join(plan.output_dir, "summary.json"),
                       json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return stats


def _report_to_tracker(tracker, plan: ShardPlan, stats: RunStats, finished: dict[str, tuple[str, float]],
                       executor: str) -> None:
    """Three tables on the active tracker: the plan, the finished shards with their counts and status,
    and the run's totals. Tables, not metrics: a metric would advance a W&B run's step counter under
    the training steps that log into the same run after this one."""
    log_table = getattr(tracker, "log_table", None)  # trackers written before tables existed lack it
    if log_table is None:
        return
    run = f"data_prep/{plan.output_format}/{plan.run_hash[:16]}"
    log_table(f"{run}/plan", ["shard", "input_start", "input_end"], [[s.name, s.start, s.end] for s in plan.shards])
    count_keys = sorted({key for shard in stats.shards for key in shard if key != "name"})
    shard_rows = [[shard["name"], *finished.get(shard["name"], ("?", 0.0)), *(shard.get(k, 0) for k in count_keys)]
                  for shard in stats.shards]
    log_table(f"{run}/shards", ["shard", "status", "seconds", *count_keys], shard_rows)
    totals = {**stats.totals, "written": stats.written, "redone": stats.redone, "skipped": stats.skipped}
    log_table(f"{run}/totals", ["executor", *totals], [[executor, *totals.values()]])


def _plan_json(plan: ShardPlan) -> str:
    """The plan as JSON, without paths, so identical runs in different places write identical bytes."""
    shards = [{"name": spec.name, **spec.work} for spec in plan.shards]
    record = {"run_hash": plan.run_hash, "fingerprint": plan.fingerprint, "dtype": plan.dtype}
    return json.dumps({**record, "eos_id": plan.eos_id, "shards": shards}, indent=2, sort_keys=True) + "\n"


def _remove_temp_files(folder: storage.PathLike, name: str) -> None:
    """Temp files an interrupted atomic write of `name` left behind (never read, just tidied)."""
    if storage.is_url(folder):
        return  # an object store has no temp files: objects are published whole
    for path in Path(folder).glob(f".{name}.*.tmp"):
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# command line: the same run, resumable from a shell
# ---------------------------------------------------------------------------------------------


@dataclass
class Config:
    input: str  # JSONL, one {"text": ...} per line: a local path or an fsspec URL (s3://...)
    tokenizer: Path  # a Hugging Face tokenizer folder
    output_root: str  # the run folder is created below it, named by the run hash (local or a URL)
    num_shards: int = 8
    workers: int = 1
    text_field: str = "text"
    executor: str = "local"  # local (this process or a process pool) | ray (RAY_ADDRESS or a local Ray)


def main(config: Config) -> RunStats:
    plan = plan_run(config.input, config.tokenizer, config.output_root, config.num_shards, config.text_field)
    return run_shards(plan, workers=config.workers, executor=config.executor)


if __name__ == "__main__":
    from nemotron.cli import EXIT_BAD_INPUT, parse

    try:
        result = main(parse(main))
    except NemotronError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    # stdout is reserved for artifact JSON; this is a library run, so its summary goes to stderr.
    print(json.dumps(result.to_dict(), indent=2), file=sys.stderr)
