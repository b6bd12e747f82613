"""Finalize: receipts -> statistics, `summary.json`, `data_paths.json` and the blend file.

Only receipts are read (small JSON files with counts), never a shard. A run with a work item
missing its receipt is refused, so a killed run cannot be mistaken for a finished one.

Blends are honoured the way Megatron-Core does it at training time, not by a global draw here: every
work item keeps its own shard per split, and `blend.json` gives each shard a weight, so that
`BlendedMegatronDatasetConfig(blend_per_split=...)` samples source s with probability
w_s / sum(w): a shard's weight is its source's weight times the shard's share of that source's tokens
in the split (records, for formats without tokens). The driver then needs only counts, and no
process ever holds the corpus.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from nemotron.data_prep import storage
from nemotron.data_prep.blend import SPLITS, DataBlend
from nemotron.data_prep.formats import get_format
from nemotron.data_prep.receipts import read_receipt, scan_receipts
from nemotron.data_prep.stages.runner import StagePlan
from nemotron.errors import NemotronError


@dataclass
class SplitStats:
    """One split of a finished run: its shards (in plan order) with counts, and their blend weights."""

    paths: list[str] = field(default_factory=list)  # bin/idx prefixes or output files
    weights: list[float] = field(default_factory=list)  # one per path (Megatron blend weights)
    shards: list[dict] = field(default_factory=list)  # per shard: name, source and the writer's counts
    totals: dict[str, int] = field(default_factory=dict)
    skipped: int = 0  # work items whose receipt proved them done (set by the pipeline)


def finalize(plan: StagePlan, blend: DataBlend, output_format: str) -> tuple[dict[str, SplitStats], dict[str, int]]:
    """Per-split statistics from the receipts, and the run's counts per stage; writes `summary.json`."""
    receipts = {r.shard: r for r in scan_receipts(plan.output_dir) if r.run_hash == plan.run_hash}
    missing = [item.name for item in plan.items if item.name not in receipts or receipts[item.name].work != item.work]
    if missing:
        raise NemotronError(
            f"run {plan.output_dir} is incomplete: {len(missing)} work item(s) have no receipt "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); re-run the pipeline to finish it")
    fmt, splits, totals = get_format(output_format), {}, {}
    for item in plan.items:  # plan order, not finish order
        receipt = receipts[item.name]
        for key, value in receipt.stats.items():
            totals[key] = totals.get(key, 0) + value
        for split in SPLITS:
            counts = {k.split("/", 2)[2]: v for k, v in receipt.stats.items() if k.startswith(f"write/{split}/")}
            if not counts:
                continue
            stats = splits.setdefault(split, SplitStats())
            files = sorted(name for name in receipt.outputs if name.startswith(f"{split}/"))
            shard = {"name": f"{split}/{item.name}", "source": item.source, **counts}
            stats.shards.append(shard)
            for key, value in counts.items():
                stats.totals[key] = stats.totals.get(key, 0) + value
            if fmt.indexed and counts.get("tokens", 0) > 0:
                stats.paths.append(str(storage.join(plan.output_dir, split, item.name)))
            elif not fmt.indexed:
                stats.paths += [str(storage.join(plan.output_dir, name)) for name in files]
    if not any(stats.paths for stats in splits.values()):
        raise NemotronError(f"run {plan.output_dir}: no document reached a shard (counts: {totals}); "
                            "check the sources' text field and the filters")
    splits = {split: splits[split] for split in SPLITS if split in splits}
    _weigh(splits, blend, output_format)
    summary = {"run_hash": plan.run_hash, "counts": totals,
               "splits": {split: {"totals": s.totals, "shards": s.shards} for split, s in splits.items()}}
    text = json.dumps(summary, indent=2, sort_keys=True) + "\n"
    storage.write_text(storage.join(plan.output_dir, "summary.json"), text)
    return splits, totals


def _weigh(splits: dict[str, SplitStats], blend: DataBlend, output_format: str) -> None:
    """Each path's blend weight: its source's weight x its share of the source's size in the split."""
    measure = "tokens" if get_format(output_format).indexed else "records"
    for split, stats in splits.items():
        weight_of = {entry.label: entry.weight for where, entry in blend.entries() if where in (None, split)}
        written = [shard for shard in stats.shards if _has_output(shard, output_format)]
        per_source = {}
        for shard in written:
            per_source[shard["source"]] = per_source.get(shard["source"], 0) + shard.get(measure, 0)
        raw = [weight_of[s["source"]] * s.get(measure, 0) / per_source[s["source"]]
               if per_source[s["source"]] else 0.0 for s in written]
        total = sum(raw) or 1.0
        stats.weights = [value / total for value in raw]
        if len(stats.weights) != len(stats.paths):  # a format writing several files per shard: equal shares
            stats.weights = [1.0 / len(stats.paths)] * len(stats.paths) if stats.paths else []


def _has_output(shard: dict, output_format: str) -> bool:
    if get_format(output_format).indexed:
        return shard.get("tokens", 0) > 0
    return any(shard.get(key, 0) > 0 for key in ("rows", "written"))


def stage_counts(plan: StagePlan) -> dict[str, int]:
    """The run's counts per stage ("<stage>/<what>"), summed over its work items' receipts in plan order."""
    totals: dict[str, int] = {}
    for item in plan.items:
        receipt = read_receipt(plan.output_dir, item.name)
        if receipt is None or receipt.run_hash != plan.run_hash:
            raise NemotronError(f"run {plan.output_dir}: work item {item.name} has no receipt; re-run to finish it")
        for key, value in receipt.stats.items():
            totals[key] = totals.get(key, 0) + value
    return totals


def reader_counts(plan: StagePlan) -> dict[str, dict]:
    """Per blend source: the documents read and those the reader skipped (per reason), from the receipts."""
    counts: dict[str, dict] = {}
    for item in plan.items:
        source = counts.setdefault(item.source, {"read": 0, "skipped": {}})
        receipt = read_receipt(plan.output_dir, item.name)
        if receipt is None:
            raise NemotronError(f"run {plan.output_dir}: work item {item.name} has no receipt; re-run to finish it")
        for key, value in receipt.stats.items():
            if key == "read/documents":
                source["read"] += value
            elif key.startswith("read/skipped: "):
                reason = key.removeprefix("read/skipped: ")
                source["skipped"][reason] = source["skipped"].get(reason, 0) + value
    return {name: {"read": c["read"], "skipped": dict(sorted(c["skipped"].items()))} for name, c in counts.items()}


def write_data_paths(output_dir: storage.PathLike, splits: dict[str, SplitStats]) -> dict[str, list[str]]:
    """`data_paths.json` (per split, the files or prefixes) and `blend.json` (per split, Megatron-Core's
    `blend_per_split` entry: paths with their weights)."""
    paths = {split: stats.paths for split, stats in splits.items()}
    blend = {split: {"paths": stats.paths, "weights": stats.weights} for split, stats in splits.items()}
    storage.write_text(storage.join(output_dir, "data_paths.json"), json.dumps(paths, indent=2) + "\n")
    storage.write_text(storage.join(output_dir, "blend.json"), json.dumps(blend, indent=2) + "\n")
    return paths
