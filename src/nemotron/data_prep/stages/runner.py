"""Run a stage list over work items: receipts, executors, progress.

    plan = plan_stages(items, input_fingerprint, stages, output_root)   # the run hash names the folder
    receipts = run_stages(plan, executor="local", workers=2)            # one receipt per work item

Each work item runs through every worker stage on one worker (the stages are fused: a generator
chain, so memory is one batch of one item), inside the receipt protocol of `receipts.py`: skipped
when its receipt proves it done, otherwise leftovers of an interrupted attempt are cleared, the
item's files are written (locally, or to scratch and published whole to an object store) and its
receipt goes last, as the commit point. The executor (`executors.py`: this process, a local process
pool, Ray) sets each worker's stages up once and keeps at most a bounded number of items in flight.
A work item's bytes depend only on the item and the stages, so every executor and every worker count
writes the same files; a run killed at any point (even SIGKILL) resumes from its receipts.

Progress goes to stderr while items finish: items done, bytes read, documents, tokens per second,
and what each filter removed; with W&B active, the same numbers are live metrics (`progress.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nemotron.data_prep import storage
from nemotron.data_prep.executors import XENNA_EXECUTORS, run_work_items
from nemotron.data_prep.progress import LiveProgress
from nemotron.data_prep.receipts import is_done, make_receipt, read_receipt, write_receipt
from nemotron.data_prep.stages.attempt import begin
from nemotron.data_prep.stages.base import ItemContext, Stage, WorkItem
from nemotron.data_prep.stages.xenna import run_on_xenna
from nemotron.errors import NemotronError
from nemotron.trackers import get_lineage_tracker

# Part of the run hash: bump it when a code change alters the bytes a work item would produce.
STAGES_VERSION = 1


@dataclass(frozen=True)
class StagePlan:
    run_hash: str
    output_dir: storage.PathLike  # <output_root>/<run_hash[:16]>
    items: tuple[WorkItem, ...]
    stages: tuple[Stage, ...]
    fingerprint: dict  # exactly what was hashed into run_hash


def plan_stages(items: list[WorkItem], input_fingerprint: list[dict], stages: list[Stage],
                output_root: storage.PathLike) -> StagePlan:
    """The run hash over the inputs' checksums, the work items and every stage's parameters."""
    if not items:
        raise NemotronError("the plan has no work items; the blend's sources hold no files")
    fingerprint = {"version": STAGES_VERSION, "inputs": input_fingerprint,
                   "items": [item.work for item in items],
                   "stages": [{"name": stage.name, **stage.fingerprint()} for stage in stages]}
    run_hash = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()
    return StagePlan(run_hash, storage.join(output_root, run_hash[:16]), tuple(items), tuple(stages), fingerprint)


def run_stages(plan: StagePlan, executor: str = "local", workers: int = 1, progress: bool = True) -> dict[str, str]:
    """Make every work item not already done; returns {item name: status}. Safe to re-run."""
    storage.make_folder(plan.output_dir)
    storage.write_text(storage.join(plan.output_dir, "plan.json"), json.dumps(plan.fingerprint, indent=2,
                                                                              sort_keys=True) + "\n")
    jobs = [(plan.run_hash, plan.output_dir, item) for item in plan.items]
    report = Progress(plan.run_hash, len(jobs), [stage.name for stage in plan.stages], enabled=progress)
    statuses = {}
    # The stages are fused on one worker, so an item needs what its most demanding stage declares.
    cpus = max(stage.resources.cpus for stage in plan.stages)
    if executor in XENNA_EXECUTORS:  # each stage a cosmos-xenna stage, the receipts the same (xenna.py)
        results = run_on_xenna(plan.run_hash, plan.output_dir, plan.items, plan.stages, executor, workers)
    else:
        results = run_work_items(_item_job, jobs, _setup_stages, plan.stages, executor=executor, workers=workers,
                                 cpus_per_item=cpus)
    for name, status, counts in results:
        statuses[name] = status
        report.update(status, counts)
    report.close()
    _report_to_tracker(plan, report.counts, statuses, executor)
    return statuses


def run_pending(plan: StagePlan, executor: str = "local", workers: int | None = None) -> dict[str, str]:
    """`run_stages`, starting no more processes than there are items left to make: a re-run whose
    receipts all hold checks them in this process instead of paying for a pool or a cluster (spawned
    interpreters take seconds). `workers=None`: every core (a local Ray gets them all anyway: starting
    it is what costs, not using it)."""
    pending = [item for item in plan.items
               if not is_done(plan.output_dir, read_receipt(plan.output_dir, item.name), plan.run_hash, item.name,
                              item.work)]
    executor = executor if pending else "local"  # checking receipts needs no cluster
    workers = workers or os.cpu_count() or 1
    return run_stages(plan, executor=executor, workers=max(1, min(workers, len(pending))))


def remove_other_runs(plans: list[StagePlan]) -> None:
    """Delete the runs other inputs left beside these (sibling folders holding a plan.json): a folder
    re-used with new data keeps only what its current runs made."""
    for plan in plans:
        current = Path(plan.output_dir)
        for folder in current.parent.iterdir():
            if folder != current and (folder / "plan.json").is_file():
                shutil.rmtree(folder)


def _report_to_tracker(plan: StagePlan, counts: dict[str, int], statuses: dict[str, str], executor: str) -> None:
    """The run's counts per stage (read, removed by each filter, written per split) and its work items'
    statuses as one table on the active tracker (W&B, a ledger line, or nothing); the same numbers went
    out live while the run went (`Progress`), this is the final count to read as a table."""
    log_table = getattr(get_lineage_tracker(), "log_table", None)
    if log_table is None:
        return
    rows = [[*key.split("/", 1), value] for key, value in sorted(counts.items())]
    rows += [["items", status, list(statuses.values()).count(status)] for status in sorted(set(statuses.values()))]
    rows.append(["items", f"executor {executor}", len(statuses)])
    log_table(f"data_prep/stages/{plan.run_hash[:16]}/counts", ["stage", "what", "count"], rows)


def _setup_stages(stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    for stage in stages:
        stage.setup()
    return stages


def _item_job(stages: tuple[Stage, ...], job: tuple[str, storage.PathLike, WorkItem]) -> tuple[str, str, dict]:
    run_hash, run_dir, item = job
    status, counts = begin(run_hash, run_dir, item, stages)  # skipped when receipted, else leftovers cleared
    if status == "skipped":
        return item.name, status, counts
    with tempfile.TemporaryDirectory(prefix=f"{item.name}.") as scratch:
        remote = storage.is_url(run_dir)
        folder = Path(scratch) / "out" if remote else Path(run_dir)
        context = ItemContext(item, Path(scratch), folder)
        records = iter(())
        for stage in stages:
            records = stage.process(context, records)
        for _ in records:  # drain the last stage
            pass
        receipt = make_receipt(folder, run_hash, item.name, item.work, context.outputs, context.counts)
        if remote:
            for name in context.outputs:
                storage.publish(folder / name, storage.join(run_dir, name))
    write_receipt(run_dir, receipt)  # last: the commit point
    return item.name, status, context.counts


class Progress(LiveProgress):
    """Per-stage progress: items done, bytes read, documents, tokens per second and what each filter
    removed, on stderr and, with W&B active, as live metrics `data_prep/<run hash>/<stage>/<what>`."""

    def __init__(self, run_hash: str, total: int, stages: list[str], enabled: bool = True):
        super().__init__(f"data_prep/{run_hash[:16]}", total, enabled)
        self.stages, self.statuses = stages, {}

    def update(self, status: str, counts: dict[str, int]) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.advance(counts=counts)

    def tokens(self) -> int:
        return sum(value for key, value in self.counts.items() if key.startswith("write/") and key.endswith("/tokens"))

    def numbers(self) -> dict[str, float]:
        tokens = self.tokens()
        return {**self.counts, **{f"items/{status}": n for status, n in self.statuses.items()},
                "write/tokens": tokens, "write/tokens_per_s": round(tokens / self.seconds, 1)}

    def line(self) -> str:
        parts = [f"{self.done}/{self.total} items ({', '.join(f'{n} {s}' for s, n in sorted(self.statuses.items()))})"]
        for stage in self.stages:
            mine = {key.split("/", 1)[1]: value for key, value in self.counts.items() if key.startswith(f"{stage}/")}
            if stage == "write":
                tokens = self.tokens()
                parts.append(f"write: {tokens:,} tokens ({tokens / self.seconds:,.0f}/s)")
            elif mine:
                shown = {k: (f"{v / 1e6:.1f} MB" if k == "bytes" else f"{v:,}") for k, v in sorted(mine.items())}
                parts.append(f"{stage}: " + ", ".join(f"{k} {v}" for k, v in shown.items()))
        return "data_prep: " + " | ".join(parts)
