"""SFT conversation curation as stages: the driver validates, dedups and splits from signatures alone.

Whether a conversation is a duplicate, and which split its question lives in, depend on every other
conversation, so (as `stages/dedup.py` does for pretraining text) they are decided in three steps,
and no process holds the conversations' text:

1. `ConversationSignatureStage` (workers, pass 1): for each conversation of a work item, in reading
   order, one 68-byte row of `signatures/<item>.npy`: why it is invalid (`conversations.PROBLEMS`,
   or -1), its exact-dedup key (`conversation_fingerprint`: sha256 of the normalized turns), its
   question key's sha256 (`question_key`: the normalized first user message) and its split by the
   seeded hash of its id (`splits.split_of`).
2. `resolve_conversations` (driver): walks the rows in plan order (the order the in-memory curation
   gathered its pools) and decides each conversation exactly as that curation did: the scale cap
   keeps the first `limit` read, then validation (rejects counted per reason), then exact dedup (the
   first copy wins), then the grouped split (`splits.repair_groups`: every question that landed in
   several splits moves wholly into the one holding most of it, so no held-out question is trained
   on). It holds two 32-byte keys and a split per conversation, and writes `decisions/<item>.npy` in
   the decision layout of `stages.dedup`, so `dedup.DecisionStage` applies them in pass 2.
3. `join_split_files` (finalize): per split, the per-item files of pass 2 concatenated in plan order
   into the one file a trainer reads (packed Parquet a row group at a time, JSONL as a byte stream).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nemotron import atomic
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.packing import PackingStats
from nemotron.data_prep.sources import Document
from nemotron.data_prep.splits import SPLITS, SplitReport, check_ratios, repair_groups, split_of
from nemotron.data_prep.stages.base import ItemContext, Stage, WorkItem
from nemotron.data_prep.stages.dedup import DECISION, EXACT, KEPT, SCALE_CAP, write_decisions
from nemotron.data_prep.stages.plan import plan_work_items
from nemotron.data_prep.stages.runner import StagePlan
from nemotron.errors import NemotronError

SIGNATURE = np.dtype([("problem", "<i2"), ("split", "i1"), ("exact", "u1", (32,)), ("question", "u1", (32,))])
INVALID = 10  # decision reason of the first problem in `conversations.PROBLEMS`; the others follow


def plan_conversation_items(blend: DataBlend, lineage: list[str], work_item_bytes: int | str,
                            ) -> tuple[list[WorkItem], list[dict]]:
    """The chat sources' work items and input fingerprint (with `lineage`: content digests of sources
    whose files the planner does not checksum, such as the chatterbot corpus)."""
    items, fingerprint = plan_work_items(blend, work_item_bytes)  # reads no conversation
    if not items:  # every source an empty file
        raise NemotronError(f"no conversations in {', '.join(e.path for _, e in blend.entries())}; add data")
    return items, fingerprint + [{"lineage": digest} for digest in lineage]


class ConversationSignatureStage(Stage):
    """Pass 1: one signature row per conversation (what the driver's curation needs, never the text)."""

    name = "signatures"

    def __init__(self, ratios: tuple[float, float, float], seed: int):
        self.ratios, self.seed = check_ratios(ratios), seed

    def fingerprint(self) -> dict:
        return {"ratios": list(self.ratios), "seed": self.seed}

    def output_names(self, item: WorkItem) -> list[str]:
        return [f"signatures/{item.name}.npy"]

    def process(self, context: ItemContext, records: Iterator[list[Document]]) -> Iterator[None]:
        from nemotron.data_prep.conversations import (
            PROBLEMS,
            conversation_fingerprint,
            conversation_problem,
            question_key,
        )

        rows = []
        for batch in records:
            for document in batch:
                conversation = json.loads(document.text)
                problem = conversation_problem(conversation)
                split = SPLITS.index(split_of(document.id, self.ratios, self.seed))
                if problem is not None:  # never compared: its keys stay zero
                    rows.append((PROBLEMS.index(problem), split, np.zeros(32, "u1"), np.zeros(32, "u1")))
                    continue
                exact = bytes.fromhex(conversation_fingerprint(conversation))
                question = hashlib.sha256(question_key(conversation).encode()).digest()
                rows.append((-1, split, np.frombuffer(exact, "u1"), np.frombuffer(question, "u1")))
        [name] = self.output_names(context.item)
        with atomic.output_file(context.folder / name, "wb") as out:
            np.save(out, np.array(rows, dtype=SIGNATURE), allow_pickle=False)
        context.outputs.append(name)
        context.count(self.name, "conversations", len(rows))
        return iter(())


@dataclass
class ConversationResolution:
    """What the driver decided: counts, and where the per-item decisions are (`dedup.DecisionStage` reads
    `folder`, `reasons` and `fingerprint`)."""

    folder: Path  # decisions/<item>.npy
    fingerprint: str = ""  # sha256 over every decision file: into the writing pass's run hash
    reasons: list[str] = field(default_factory=list)  # a decision's reason code -> its name
    scale_limit_dropped: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    exact_duplicates: int = 0
    curated: int = 0  # conversations kept (valid, first copies)
    split: SplitReport = field(default_factory=SplitReport)


def resolve_conversations(run: StagePlan, folder: Path, *, limit: int) -> ConversationResolution:
    """Decide every conversation of a finished signature run, in plan order; write decisions/<item>.npy."""
    from nemotron.data_prep.conversations import PROBLEMS

    tables = [np.load(Path(run.output_dir) / "signatures" / f"{item.name}.npy") for item in run.items]
    resolution = ConversationResolution(folder, reasons=["kept", "scale_limit", "exact_duplicate"]
                                        + [""] * (INVALID - 3) + [f"invalid: {problem}" for problem in PROBLEMS])
    decisions = [np.zeros(len(table), DECISION) for table in tables]
    rejects: dict[str, int] = {}
    seen: set[bytes] = set()
    kept: list[tuple[int, int]] = []  # (table, row) of every curated conversation, in order
    read = 0
    for i, (table, decided) in enumerate(zip(tables, decisions, strict=True)):
        for row in range(len(table)):
            read += 1
            if read > limit:  # the first `limit` conversations read, as gathered[:limit] kept them
                decided["reason"][row] = SCALE_CAP
            elif table["problem"][row] >= 0:
                problem = PROBLEMS[table["problem"][row]]
                rejects[problem] = rejects.get(problem, 0) + 1
                decided["reason"][row] = INVALID + table["problem"][row]
            elif (key := table["exact"][row].tobytes()) in seen:
                decided["reason"][row] = EXACT
            else:
                seen.add(key)
                kept.append((i, row))
    resolution.scale_limit_dropped = max(0, read - limit)
    resolution.rejected_by_reason = dict(sorted(rejects.items()))
    resolution.exact_duplicates = sum(int((d["reason"] == EXACT).sum()) for d in decisions)
    resolution.curated = len(kept)
    assigned = [SPLITS[tables[i]["split"][row]] for i, row in kept]
    homes, resolution.split = repair_groups(assigned, [tables[i]["question"][row].tobytes() for i, row in kept])
    for (i, row), home in zip(kept, homes, strict=True):
        decisions[i][row] = (KEPT, SPLITS.index(home), 1)
    shutil.rmtree(folder, ignore_errors=True)  # decisions of an earlier run with other inputs
    resolution.fingerprint = write_decisions(run, decisions, folder)
    return resolution


def join_split_files(run: StagePlan, split: str, suffix: str, path: Path) -> Path | None:
    """One split's per-item files of a finished run (`<split>/<item><suffix>`), joined in plan order
    into `path`: packed Parquet by `packing.concat_packed_parquet`, anything else as bytes. None when
    no item wrote a file of that split."""
    from nemotron.data_prep.packing import concat_packed_parquet

    parts = [Path(run.output_dir) / split / f"{item.name}{suffix}" for item in run.items]
    parts = [part for part in parts if part.is_file()]
    if not parts:
        return None
    if suffix == ".parquet":
        return concat_packed_parquet(parts, path)
    with atomic.output_file(path, "wb") as out:
        for part in parts:
            with part.open("rb") as stream:
                shutil.copyfileobj(stream, out)  # a buffer at a time: a split may be bigger than memory
    return path


def packing_stats(path: Path | None, counts: dict[str, int], prefix: str, pack_size: int) -> PackingStats:
    """A split's `PackingStats` from its writers' summed counts (`prefix`: "write/<split>/") and its
    joined file (the most conversations in one row, which counts cannot sum)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if path is None:
        raise NemotronError(f"no packed rows for {prefix.split('/')[1]}; every conversation was dropped, "
                            "check overflow/pack_size")
    starts = pq.read_table(path, columns=["seq_start_id"])["seq_start_id"]
    most = pc.max(pc.list_value_length(starts)).as_py() or 0
    get = {key: counts.get(prefix + key, 0) for key in ("rows", "conversations", "tokens", "loss_tokens", "padding",
                                                        "truncated", "truncated_tokens", "dropped")}
    slots = get["rows"] * pack_size
    return PackingStats(pack_size=pack_size, utilisation=get["tokens"] / slots if slots else 0.0,
                        max_conversations_per_row=most, **get)


def check_splits_filled(resolution: ConversationResolution, ratios) -> None:
    """Refuse a curation that left a split empty (too few conversations for the ratios)."""
    for split in SPLITS:
        if not resolution.split.final.get(split):
            raise NemotronError(
                f"the {split} split is empty ({resolution.curated} conversations after curation, ratios "
                f"{list(ratios)}); add data or raise its share in --split-ratios")
