"""Shard receipts: a small JSON file per finished shard that proves the shard is complete.

Large data-prep runs get interrupted (preempted jobs, out-of-memory, Ctrl-C). The Nemotron data-prep
cookbook answers this with receipts, and so do we: when a worker has written a shard's output files
it writes `receipts/<shard>.json` last, atomically, recording

- `run_hash`: which run the shard belongs to (inputs + work items + every stage's parameters, see
  `stages/runner.py`),
- `work`: what the shard was asked to do (e.g. the input byte range),
- `outputs`: every output file's name and sha256,
- `stats`: counts to aggregate at the end (documents, tokens).

A shard is *done* only when its receipt exists, matches the run and the work, and every output file
still has the recorded checksum. A re-run skips done shards and redoes everything else, so an
interrupted run resumes without redoing finished work and without trusting half-written files.
Receipts hold no timestamps or host names: the same inputs give byte-identical receipts.

The run folder may be local or on an object store (`s3://...`, see `storage.py`); a receipt there is
one whole object, published after the outputs it vouches for.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from nemotron.data_prep import storage

RECEIPTS_DIR = "receipts"


@dataclass(frozen=True)
class Receipt:
    """The record that one shard of one run finished, with checksums of what it wrote."""

    run_hash: str
    shard: str  # e.g. "shard_00003"; the receipt lives at receipts/shard_00003.json
    work: dict  # what the shard was asked to do; a receipt for different work is not trusted
    outputs: dict[str, str]  # output file name (relative to the run folder) -> sha256
    stats: dict[str, int] = field(default_factory=dict)


def receipt_path(run_dir: storage.PathLike, shard: str) -> storage.PathLike:
    return storage.join(run_dir, RECEIPTS_DIR, f"{shard}.json")


def make_receipt(
    run_dir: storage.PathLike, run_hash: str, shard: str, work: dict, output_names: list[str], stats: dict
) -> Receipt:
    """Checksum the shard's finished output files and build its receipt (not yet written)."""
    outputs = {name: storage.sha256(storage.join(run_dir, name)) for name in sorted(output_names)}
    return Receipt(run_hash=run_hash, shard=shard, work=work, outputs=outputs, stats=stats)


def write_receipt(run_dir: storage.PathLike, receipt: Receipt) -> storage.PathLike:
    """Write the receipt atomically; this is the commit point of a shard."""
    path = receipt_path(run_dir, receipt.shard)
    storage.make_folder(storage.join(run_dir, RECEIPTS_DIR))
    storage.write_text(path, json.dumps(asdict(receipt), indent=2, sort_keys=True) + "\n")
    return path


def read_receipt(run_dir: storage.PathLike, shard: str) -> Receipt | None:
    """The shard's receipt, or None when it is missing or unreadable (an unreadable one is never trusted)."""
    path = receipt_path(run_dir, shard)
    try:
        return Receipt(**json.loads(storage.read_text(path)))
    except (OSError, ValueError, TypeError):  # missing, not JSON, or not a receipt's fields
        return None


def is_done(run_dir: storage.PathLike, receipt: Receipt | None, run_hash: str, shard: str, work: dict) -> bool:
    """True when `receipt` proves this exact shard of this exact run finished and is intact on disk."""
    if receipt is None or (receipt.run_hash, receipt.shard, receipt.work) != (run_hash, shard, work):
        return False
    for name, checksum in receipt.outputs.items():
        path = storage.join(run_dir, name)
        if not storage.exists(path) or storage.sha256(path) != checksum:
            return False
    return True


def scan_receipts(run_dir: storage.PathLike) -> list[Receipt]:
    """Every readable receipt of a run folder, sorted by shard name."""
    names = storage.list_names(storage.join(run_dir, RECEIPTS_DIR), ".json")
    shards = [name.removesuffix(".json") for name in names]
    return [receipt for shard in shards if (receipt := read_receipt(run_dir, shard)) is not None]
