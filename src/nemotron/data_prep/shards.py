"""Tokenize a JSONL corpus into Megatron bin/idx shards: deterministic, parallel, resumable.

The run reads as the Nemotron data-prep cookbook's three phases:

1. setup, `plan_run(...)`: hash the inputs (the input file's sha256, the tokenizer folder's file
   checksums, the parameters) into a *run hash* that names the output folder
   `<output_root>/<run_hash[:16]>/`, and cut the input into contiguous shards. Same inputs, same
   folder; change anything, and the run gets a fresh folder instead of mixing old and new shards.
2. pipeline, `run_shards(plan, workers=N)`: a process pool works through the shards. For each one
   a worker checks its receipt (`receipts.py`) and skips it if the receipt proves it is done;
   otherwise it clears any leftovers of an interrupted attempt, tokenizes the shard's lines,
   appends EOS to every document, writes `shard_00003.bin/.idx` atomically (`indexed.py`), and
   writes `receipts/shard_00003.json` last, as the commit point.
3. finalize, `finalize_run(plan)`: scan the receipts, check that every shard has one, and
   aggregate documents and tokens into `summary.json`.

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
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from nemotron import atomic
from nemotron.artifact import sha256_file
from nemotron.data_prep.indexed import IndexedWriter, best_dtype
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

# Part of the run hash: bump it when a code change alters the bytes a shard would contain.
SHARD_FORMAT_VERSION = 1
# Documents tokenized per call into the Rust tokenizer (amortizes the Python -> Rust overhead).
_BATCH_DOCUMENTS = 512


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
    input_path: Path
    tokenizer_dir: Path
    output_dir: Path  # <output_root>/<run_hash[:16]>
    run_hash: str
    fingerprint: dict  # exactly what was hashed into run_hash
    dtype: str  # token dtype of the shards, from the vocabulary size
    eos_id: int
    text_field: str
    shards: tuple[ShardSpec, ...]
    tokenizer_json: str = field(repr=False)  # the pipeline workers run, exactly as load_tokenizer built it

    def prefix(self, spec: ShardSpec) -> Path:
        return self.output_dir / spec.name


def plan_run(
    input_jsonl: Path | str,
    tokenizer_dir: Path | str,
    output_root: Path | str,
    num_shards: int = 8,
    text_field: str = "text",
) -> ShardPlan:
    """Hash the inputs into a run hash and cut the input into at most `num_shards` shards."""
    from nemotron.data_prep.tokenizer import load_tokenizer  # imports transformers: only here

    input_path, tokenizer_dir = Path(input_jsonl), Path(tokenizer_dir)
    if not input_path.is_file():
        raise NemotronError(
            f"input JSONL not found: {input_path}; pass a file with one {{\"{text_field}\": ...}} per line"
        )
    if num_shards < 1:
        raise NemotronError(f"num_shards={num_shards} must be at least 1")
    if input_path.stat().st_size == 0:
        raise NemotronError(f"input JSONL {input_path} is empty; pass a file with at least one document")
    tokenizer = load_tokenizer(tokenizer_dir)
    if tokenizer.eos_token_id is None:
        raise NemotronError(
            f"the tokenizer in {tokenizer_dir} has no eos_token; set one so documents can be separated"
        )
    fingerprint = {
        "format_version": SHARD_FORMAT_VERSION,
        "input_sha256": sha256_file(input_path),
        "tokenizer_sha256": {
            path.name: sha256_file(path) for path in sorted(tokenizer_dir.iterdir()) if path.is_file()
        },
        "num_shards": num_shards,
        "text_field": text_field,
    }
    run_hash = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
    return ShardPlan(
        input_path=input_path,
        tokenizer_dir=tokenizer_dir,
        output_dir=Path(output_root) / run_hash[:16],
        run_hash=run_hash,
        fingerprint=fingerprint,
        dtype=best_dtype(len(tokenizer)).name,
        eos_id=tokenizer.eos_token_id,
        text_field=text_field,
        shards=_cut_into_shards(input_path, num_shards),
        tokenizer_json=tokenizer.backend_tokenizer.to_str(),
    )


def _cut_into_shards(path: Path, num_shards: int) -> tuple[ShardSpec, ...]:
    """Boundaries at k/num_shards of the file size, each moved forward to the next line start."""
    size = path.stat().st_size
    boundaries = [0]
    with open(path, "rb") as stream:
        for k in range(1, num_shards):
            target = k * size // num_shards
            stream.seek(max(target - 1, 0))
            stream.readline()  # ends just after the first newline at or after target-1: a line start
            boundaries.append(max(stream.tell(), boundaries[-1]))
    boundaries.append(size)
    ranges = [(start, end) for start, end in zip(boundaries, boundaries[1:]) if end > start]
    return tuple(ShardSpec(index, start, end) for index, (start, end) in enumerate(ranges))


# ---------------------------------------------------------------------------------------------
# 2. pipeline: one shard at a time, in a pool of worker processes
# ---------------------------------------------------------------------------------------------


def run_shards(plan: ShardPlan, workers: int = 1, progress: bool = True) -> RunStats:
    """Make every shard of the plan that is not already done, then finalize. Safe to re-run."""
    if plan.input_path.stat().st_size != plan.shards[-1].end:
        raise NemotronError(
            f"{plan.input_path} changed size since plan_run hashed it; call plan_run again (a new run hash)"
        )
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    _remove_temp_files(plan.output_dir, "plan.json")
    atomic.write_text(plan.output_dir / "plan.json", _plan_json(plan))
    statuses = {"skipped": 0, "redone": 0, "written": 0}
    with tqdm(total=len(plan.shards), desc="tokenize shards", unit="shard", file=sys.stderr,
              disable=not progress) as bar:
        for status in _shard_statuses(plan, workers):
            statuses[status] += 1
            bar.update()
    stats = finalize_run(plan)
    stats.skipped, stats.redone, stats.written = statuses["skipped"], statuses["redone"], statuses["written"]
    return stats


def _shard_statuses(plan: ShardPlan, workers: int) -> Iterator[str]:
    """Ensure every shard, in this process (workers=1) or in a pool; yield each status as it ends."""
    if workers <= 1:
        tokenizer = Tokenizer.from_str(plan.tokenizer_json)
        for spec in plan.shards:
            yield _ensure_shard(plan, spec, tokenizer)
        return
    # spawn, not fork: the parent's Rust thread pool must not be copied into the children, and it
    # behaves the same on Linux and macOS. Workers import no transformers, so they start quickly.
    # Each worker builds the tokenizer once; the jobs carry the plan without its tokenizer JSON.
    context = multiprocessing.get_context("spawn")
    light_plan = replace(plan, tokenizer_json="")
    with context.Pool(workers, initializer=_start_worker, initargs=(plan.tokenizer_json,)) as pool:
        yield from pool.imap_unordered(_ensure_shard_in_worker, [(light_plan, spec) for spec in plan.shards])


_WORKER_TOKENIZER: Tokenizer | None = None  # one per pool process, built by _start_worker


def _start_worker(tokenizer_json: str) -> None:
    global _WORKER_TOKENIZER
    # The pool's processes are the parallelism; a Rust thread pool in each would oversubscribe cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER_TOKENIZER = Tokenizer.from_str(tokenizer_json)


def _ensure_shard_in_worker(job: tuple[ShardPlan, ShardSpec]) -> str:
    plan, spec = job
    return _ensure_shard(plan, spec, _WORKER_TOKENIZER)


def _ensure_shard(plan: ShardPlan, spec: ShardSpec, tokenizer: Tokenizer) -> str:
    """Skip the shard if its receipt proves it done; otherwise (re)make it. Returns the status."""
    receipt = read_receipt(plan.output_dir, spec.name)
    if is_done(plan.output_dir, receipt, plan.run_hash, spec.name, spec.work):
        return "skipped"
    had_leftovers = _discard_shard(plan.output_dir, spec.name)
    stats = _tokenize_shard(plan, spec, tokenizer)
    outputs = [f"{spec.name}.bin", f"{spec.name}.idx"]
    receipt = make_receipt(plan.output_dir, plan.run_hash, spec.name, spec.work, outputs, stats)
    write_receipt(plan.output_dir, receipt)  # last: the commit point
    return "redone" if had_leftovers else "written"


def _discard_shard(run_dir: Path, shard: str) -> bool:
    """Delete whatever an earlier attempt left of this shard; True if there was anything."""
    receipt = receipt_path(run_dir, shard)
    # The receipt goes first: from here on, nothing claims this shard is done.
    leftovers = [receipt, run_dir / f"{shard}.bin", run_dir / f"{shard}.idx"]
    leftovers += sorted(run_dir.glob(f".{shard}.*.tmp")) + sorted(receipt.parent.glob(f".{shard}.*.tmp"))
    existing = [path for path in leftovers if path.exists()]
    for path in existing:
        path.unlink()
    return bool(existing)


def _tokenize_shard(plan: ShardPlan, spec: ShardSpec, tokenizer: Tokenizer) -> dict[str, int]:
    records = documents = tokens = 0
    with IndexedWriter(plan.prefix(spec), np.dtype(plan.dtype)) as writer:
        for texts in _read_text_batches(plan, spec):
            records += len(texts)
            texts = [text for text in texts if text]
            for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False):
                # append_eod: every document ends with EOS, so the model learns where documents stop
                # and Megatron's GPTDataset can pack documents back to back.
                writer.add_document(encoding.ids + [plan.eos_id])
                documents += 1
                tokens += len(encoding.ids) + 1
    return {"records": records, "documents": documents, "tokens": tokens}


def _read_text_batches(plan: ShardPlan, spec: ShardSpec) -> Iterator[list[str]]:
    """The `text_field` of every non-blank line in the shard's byte range, in batches."""
    batch: list[str] = []
    with open(plan.input_path, "rb") as stream:
        stream.seek(spec.start)
        position = spec.start
        while position < spec.end:
            line = stream.readline()
            if not line:  # the file shrank after planning: never loop forever on EOF
                raise NemotronError(f"{plan.input_path} ended early; it changed since plan_run, plan again")
            line_start, position = position, position + len(line)
            if line.strip():
                batch.append(_text_of(line, plan, line_start))
            if len(batch) == _BATCH_DOCUMENTS:
                yield batch
                batch = []
    if batch:
        yield batch


def _text_of(line: bytes, plan: ShardPlan, offset: int) -> str:
    try:
        record = json.loads(line)
        text = record[plan.text_field]
    except (ValueError, TypeError, KeyError) as error:
        problem = f"missing field {plan.text_field!r}" if isinstance(error, KeyError) else "not a JSON object"
        where = f"{plan.input_path} line {_line_number(plan.input_path, offset)}"
        expected = f'{{"{plan.text_field}": "..."}}'
        raise NemotronError(f"{where}: {problem}; each line must be {expected}") from None
    if not isinstance(text, str):
        where = f"{plan.input_path} line {_line_number(plan.input_path, offset)}"
        raise NemotronError(f"{where}: field {plan.text_field!r} is {type(text).__name__}, not a string")
    return text


def _line_number(path: Path, offset: int) -> int:
    """1-based line number of the line starting at byte `offset` (only computed for error messages)."""
    with open(path, "rb") as stream:
        return stream.read(offset).count(b"\n") + 1


# ---------------------------------------------------------------------------------------------
# 3. finalize: scan receipts, aggregate
# ---------------------------------------------------------------------------------------------


@dataclass
class RunStats:
    run_hash: str
    output_dir: Path
    dtype: str
    documents: int
    tokens: int
    shards: list[dict]  # per shard: name, records, documents, tokens
    prefixes: list[Path]  # shard prefixes holding at least one token, ready for a Megatron blend
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
    stats = RunStats(
        run_hash=plan.run_hash,
        output_dir=plan.output_dir,
        dtype=plan.dtype,
        documents=sum(shard["documents"] for shard in shards),
        tokens=sum(shard["tokens"] for shard in shards),
        shards=shards,
        prefixes=[plan.prefix(spec) for spec, shard in zip(plan.shards, shards) if shard["tokens"] > 0],
    )
    # Only what the inputs determine: no paths, no skipped/redone counts, no timestamps.
    summary = {key: getattr(stats, key) for key in ("run_hash", "dtype", "documents", "tokens", "shards")}
    _remove_temp_files(plan.output_dir, "summary.json")
    atomic.write_text(plan.output_dir / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return stats


def _plan_json(plan: ShardPlan) -> str:
    """The plan as JSON, without paths, so identical runs in different places write identical bytes."""
    shards = [{"name": spec.name, **spec.work} for spec in plan.shards]
    record = {"run_hash": plan.run_hash, "fingerprint": plan.fingerprint, "dtype": plan.dtype}
    return json.dumps({**record, "eos_id": plan.eos_id, "shards": shards}, indent=2, sort_keys=True) + "\n"


def _remove_temp_files(folder: Path, name: str) -> None:
    """Temp files an interrupted atomic write of `name` left behind (never read, just tidied)."""
    for path in folder.glob(f".{name}.*.tmp"):
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# command line: the same run, resumable from a shell
# ---------------------------------------------------------------------------------------------


@dataclass
class Config:
    input: Path  # JSONL, one {"text": ...} per line
    tokenizer: Path  # a Hugging Face tokenizer folder
    output_root: Path  # the run folder is created below it, named by the run hash
    num_shards: int = 8
    workers: int = 1
    text_field: str = "text"


def main(config: Config) -> RunStats:
    plan = plan_run(config.input, config.tokenizer, config.output_root, config.num_shards, config.text_field)
    return run_shards(plan, workers=config.workers)


if __name__ == "__main__":
    from nemotron.cli import EXIT_BAD_INPUT, parse

    try:
        result = main(parse(main))
    except NemotronError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    # stdout is reserved for artifact JSON; this is a library run, so its summary goes to stderr.
    print(json.dumps(result.to_dict(), indent=2), file=sys.stderr)
