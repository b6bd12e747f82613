"""Dedup as stages: workers compute per-document signatures, the driver decides from signatures alone.

Exact and near dedup are global (whether a document is a duplicate depends on every document before
it), so they cannot be decided per document like a quality filter. They run in three steps, and no
process ever holds the corpus's text:

1. `SignatureStage` (workers, pass 1): for each document of a work item, in reading order, one row
   of `signatures/<item>.npy`: the scale-cap key (sha256 of seed and id, `blend.cap_documents`'s
   rule), the first quality filter that rejects it, the split (a hash of its id), the exact-dedup key
   (`dedup.exact_key`: sha256 of the normalized text) and the MinHash sketch (`dedup.minhash`, whose
   LSH bands the driver indexes). About 1.1 KB a document at 128 permutations, whatever its length.
2. `resolve_signatures` (driver): walks the rows in plan order (the blend's reading order) and
   decides each document exactly as the in-memory curation did: scale cap, then quality, then exact
   duplicates (`dedup.exact_key` seen before), then near duplicates (`dedup.NearDuplicates`, greedy,
   the first of a cluster survives), then the blend's weighted draw from counts
   (`DataBlend.draw_plan`: how many copies of each kept document). It holds 32-byte keys, the LSH
   bands of kept documents (their sketches stay memory-mapped on disk) and counts, and writes one
   `decisions/<item>.npy` per item.
3. `DecisionStage` (workers, pass 2): drops what the item's decisions drop, counting each reason
   (`removed: exact_duplicate`, ...), and passes each kept document on, with its split, as many times
   as the draw took it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nemotron import atomic
from nemotron.data_prep.blend import SPLITS, DataBlend, assign_split
from nemotron.data_prep.sources import Document
from nemotron.data_prep.stages.base import ItemContext, Stage, WorkItem
from nemotron.data_prep.stages.filter_split import FILTER_SETS
from nemotron.data_prep.stages.runner import StagePlan
from nemotron.errors import NemotronError

# Why a document is dropped (a decision's `reason`); quality filters count from QUALITY on, in filter order.
KEPT, SCALE_CAP, EXACT, NEAR, QUALITY = 0, 1, 2, 3, 10
DECISION = np.dtype([("reason", "<i2"), ("split", "i1"), ("copies", "<i4")])


def signature_dtype(num_perm: int) -> np.dtype:
    return np.dtype([("cap", "u1", (32,)), ("exact", "u1", (32,)), ("minhash", "<u8", (num_perm,)),
                     ("rejected", "<i2"), ("split", "i1")])


class SignatureStage(Stage):
    """Pass 1: one signature row per document (what the driver's dedup needs, never the text)."""

    name = "signatures"

    def __init__(self, ratios: list[float] | None, filters: str = "default", seed: int = 0,
                 num_perm: int = 128, ngram: int = 5, quality_threshold: float = 1.0):
        if filters not in FILTER_SETS:
            raise NemotronError(f"unknown filter set {filters!r}; use one of {', '.join(FILTER_SETS)}")
        self.ratios, self.filters, self.seed, self.num_perm, self.ngram = ratios, filters, seed, num_perm, ngram
        # A document's quality score is the share of the filters it passes; it is rejected (counted under the
        # first filter it fails) below the threshold. 1.0: every filter must pass.
        self.quality_threshold = quality_threshold
        self._filters: list = []

    def setup(self) -> None:
        self._filters = FILTER_SETS[self.filters]()

    def fingerprint(self) -> dict:
        bounds = [[f.name, f.min_value, f.max_value] for f in FILTER_SETS[self.filters]()]
        threshold = {} if self.quality_threshold == 1.0 else {"quality_threshold": self.quality_threshold}
        return {"ratios": self.ratios, "filters": bounds, "seed": self.seed, "num_perm": self.num_perm,
                "ngram": self.ngram, **threshold}

    def output_names(self, item: WorkItem) -> list[str]:
        return [f"signatures/{item.name}.npy"]

    def process(self, context: ItemContext, records: Iterator[list[Document]]) -> Iterator[None]:
        from nemotron.data_prep.dedup import exact_key, minhash
        from nemotron.data_prep.quality import TextStats

        rows = []
        for batch in records:
            for document in batch:
                stats = TextStats(document.text)
                rejected = self.rejected_by(stats)
                split = context.item.split or assign_split(document.id, self.ratios)
                sketch = (minhash(document.text, num_perm=self.num_perm, ngram=self.ngram).hashvalues if rejected < 0
                          else np.zeros(self.num_perm, "<u8"))  # a rejected document is never compared
                cap = hashlib.sha256(f"{self.seed}\0{document.id}".encode()).digest()
                rows.append((np.frombuffer(cap, "u1"), np.frombuffer(exact_key(document.text), "u1"), sketch,
                             rejected, SPLITS.index(split)))
        table = np.array(rows, dtype=signature_dtype(self.num_perm))
        [name] = self.output_names(context.item)
        with atomic.output_file(context.folder / name, "wb") as out:
            np.save(out, table, allow_pickle=False)
        context.outputs.append(name)
        context.count(self.name, "documents", len(rows))
        return iter(())


    def rejected_by(self, stats) -> int:
        """The index of the first filter a document fails when its score is below the threshold, else -1."""
        if self.quality_threshold == 1.0:  # the first failure decides: the other filters need not run
            return next((i for i, f in enumerate(self._filters) if not f.keep(stats)), -1)
        failed = [i for i, f in enumerate(self._filters) if not f.keep(stats)]
        passed = 1 - len(failed) / len(self._filters)
        return failed[0] if failed and passed < self.quality_threshold else -1


@dataclass
class Resolution:
    """What the driver decided from the signatures: counts, and where the per-item decisions are."""

    folder: Path  # decisions/<item>.npy
    fingerprint: str  # sha256 over every decision file: into the writing pass's run hash
    reasons: list[str]  # a decision's reason code -> its name
    removed: dict[str, int] = field(default_factory=dict)  # scale_cap, exact_duplicate, near_duplicate
    removed_by_quality: dict[str, int] = field(default_factory=dict)  # per filter, 0 included
    draws: dict[str, dict] = field(default_factory=dict)  # per split: DataBlend.draw_plan counts per source
    curated: int = 0  # documents kept (before the draw's repeats)
    drawn: dict[str, int] = field(default_factory=dict)  # documents per split after the draw


def resolve_signatures(run: StagePlan, blend: DataBlend, folder: Path, *, limit: int, seed: int,
                       threshold: float, filters: str = "default") -> Resolution:
    """Decide every document of a finished signature run, in plan order; write decisions/<item>.npy."""
    from nemotron.data_prep.dedup import NearDuplicates

    tables = [np.load(Path(run.output_dir) / "signatures" / f"{item.name}.npy", mmap_mode="r") for item in run.items]
    num_perm = tables[0].dtype["minhash"].shape[0] if tables else 128
    names = [f.name for f in FILTER_SETS[filters]()]
    resolution = Resolution(folder, "", ["kept", "scale_cap", "exact_duplicate", "near_duplicate"]
                            + [""] * (QUALITY - 4) + [f"quality: {name}" for name in names])
    decisions = [np.zeros(len(table), DECISION) for table in tables]
    for table, decided in zip(tables, decisions, strict=True):
        decided["split"] = table["split"]
    # The scale cap: the `limit` documents with the smallest seeded hash of their ids (cap_documents).
    total = sum(len(table) for table in tables)
    if total > limit:
        where = [(i, row) for i, table in enumerate(tables) for row in range(len(table))]
        order = sorted(range(total), key=lambda k: tables[where[k][0]]["cap"][where[k][1]].tobytes())
        for k in order[limit:]:
            decisions[where[k][0]]["reason"][where[k][1]] = SCALE_CAP
    seen, near = set(), NearDuplicates(threshold, num_perm)
    pools: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (split, source) -> kept documents in order
    for i, (item, table, decided) in enumerate(zip(run.items, tables, decisions, strict=True)):
        for row in range(len(table)):
            if decided["reason"][row] == SCALE_CAP:
                continue
            if table["rejected"][row] >= 0:
                decided["reason"][row] = QUALITY + table["rejected"][row]
                continue
            key = table["exact"][row].tobytes()
            if key in seen:
                decided["reason"][row] = EXACT
                continue
            seen.add(key)
            if near.is_duplicate(table["minhash"][row]):
                decided["reason"][row] = NEAR
                continue
            pools.setdefault((SPLITS[table["split"][row]], item.source), []).append((i, row))
    counts = np.bincount(np.concatenate([d["reason"] for d in decisions] or [np.zeros(0, "<i2")]),
                         minlength=QUALITY + len(names))
    resolution.removed = {"scale_cap": int(counts[SCALE_CAP]), "exact_duplicate": int(counts[EXACT]),
                          "near_duplicate": int(counts[NEAR])}
    resolution.removed_by_quality = {name: int(counts[QUALITY + k]) for k, name in enumerate(names)}
    resolution.curated = int(counts[KEPT])
    if not resolution.curated:
        raise NemotronError(f"every document was removed (quality: {resolution.removed_by_quality}, "
                            f"{resolution.removed}); check the blend's sources and their text_field")
    # The blend's weighted draw, from counts: each kept document's number of copies.
    for split in blend.splits:
        available = {source: len(pool) for (where, source), pool in pools.items() if where == split}
        plan = blend.draw_plan(split, available, seed=seed, given=resolution.curated)
        resolution.draws[split] = {source: {"available": p["available"], "drawn": p["drawn"]}
                                   for source, p in plan.items()}
        resolution.drawn[split] = sum(p["drawn"] for p in plan.values())
        for source, take in plan.items():
            for i, row in pools[(split, source)]:
                decisions[i]["copies"][row] = take["passes"]
            for position in take["extra"]:
                i, row = pools[(split, source)][position]
                decisions[i]["copies"][row] += 1
    resolution.fingerprint = write_decisions(run, decisions, folder)
    return resolution


def write_decisions(run: StagePlan, decisions: list[np.ndarray], folder: Path) -> str:
    """Write one `decisions/<item>.npy` per work item; returns the sha256 over all of them (it goes into
    the run hash of the pass that applies them, so new decisions make new files)."""
    digest = hashlib.sha256()
    for item, decided in zip(run.items, decisions, strict=True):
        with atomic.output_file(folder / f"{item.name}.npy", "wb") as out:
            np.save(out, decided, allow_pickle=False)
        digest.update(decided.tobytes())
    return digest.hexdigest()


class DecisionStage(Stage):
    """Pass 2: drop what the driver decided to drop (counted per reason), pass the rest on with their
    split, each as many times as the blend's draw took it."""

    name = "curate"

    def __init__(self, resolution: Resolution):
        self.folder, self.reasons, self.digest = str(resolution.folder), resolution.reasons, resolution.fingerprint

    def fingerprint(self) -> dict:
        return {"decisions_sha256": self.digest, "reasons": self.reasons}

    def process(self, context: ItemContext, records: Iterator[list[Document]]) -> Iterator[list[tuple[str, Document]]]:
        decided = np.load(Path(self.folder) / f"{context.item.name}.npy")
        row = 0
        for batch in records:
            kept = []
            for document in batch:
                if row >= len(decided):
                    break
                reason, split, copies = (int(value) for value in decided[row])
                row += 1
                if reason != KEPT:
                    context.count(self.name, f"removed: {self.reasons[reason]}")
                    continue
                context.count(self.name, f"kept: {SPLITS[split]}", copies)
                kept += [(SPLITS[split], document)] * copies
            yield kept
        if row != len(decided) or context.counts.get("read/documents", row) != row:
            raise NemotronError(f"{context.item.path}: read {context.counts.get('read/documents')} documents, but "
                                f"its signatures hold {len(decided)}; it changed since the signature pass, re-run")
