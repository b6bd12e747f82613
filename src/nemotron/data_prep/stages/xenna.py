"""cosmos-xenna as an opt-in executor: each of our stages a xenna `StageSpec`, run by its `run_pipeline`.

    run_pretrain_pipeline(blend, "data/pretrain", "tokenizer/", executor="xenna")        # streaming
    run_sft_pipeline(chats, "data/sft", "tokenizer/", executor="xenna-batch")            # batch

NVIDIA's Nemotron data-prep cookbook runs its stages on cosmos-xenna (0.3.0, on Ray; `pip install
'nemotron[xenna]'`, Linux x86_64 at Python 3.11 only). Here every stage of a plan becomes one xenna
stage: its actors set our stage up once (`Stage.setup`), it declares our stage's `resources`, and a
work item travels from stage to stage as an `ItemInFlight` (the item, the records the previous stage
made, the counts and checksummed outputs so far). The receipt protocol every executor keeps
(`attempt.py`) wraps the chain: the first stage passes an item whose receipt proves it done straight
through (as "skipped") and clears what an earlier attempt left of the others; the last writes the
receipt, the commit point. So the files and run hash are those of every other executor.

- "xenna": streaming. Every stage has actors at once; items flow between them through xenna's
  bounded queues (back-pressure), and its autoscaler moves CPUs to the slowest stage.
- "xenna-batch": one stage at a time over every item, everything in between held in Ray's object store.

Unlike our own executors, which fuse the stages on one worker, an item's records (up to
`work_item_bytes` of text) cross processes between stages: a worker holds one item, not one batch.

What xenna 0.3.0 needs, and its defects, handled here:
- Ray's dashboard: xenna lists its actors through Ray's state API (served by the dashboard), 40,000
  at a time, which a Ray started without RAY_MAX_LIMIT_FROM_API_SERVER=40000 refuses. A local Ray is
  started with both; a Ray started elsewhere (RAY_ADDRESS, ray.init) must have them, or the run stops
  with one line saying so.
- CPUs: xenna gives its actors `cpu_allocation_percentage` (default 0.95) of each node's CPUs, and
  streaming needs one actor per stage at once: 0.95 x 2 CPUs fits one 1-CPU actor. We pass 1.0 and
  give the local Ray at least the sum of the stages' CPUs (logical ones: read and filter are light).
- Its `ray::NodeResourceMonitor` and `ray::StageWorker` processes outlive every run, even
  `ray.shutdown()` (non-daemon threads). Once Ray lists those actors dead, we end them by pid.
- A worker that dies fails the whole run (xenna retries no task). It is reported as one error line;
  items done before it have receipts, so a re-run redoes only the rest.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.data_prep import storage
from nemotron.data_prep.executors import check_executor
from nemotron.data_prep.receipts import Receipt, make_receipt, write_receipt
from nemotron.data_prep.stages.attempt import begin
from nemotron.data_prep.stages.base import ItemContext, Stage, WorkItem
from nemotron.errors import NemotronError

MODES = {"xenna": "STREAMING", "xenna-batch": "BATCH"}
# xenna actors whose processes outlive every run (non-daemon threads): ended by pid after it.
LEFTOVER_CLASSES = ("NodeResourceMonitor", "StageWorker")


@dataclass
class ItemInFlight:
    """A work item between two xenna stages: what the next one needs to go on, all picklable."""

    run_hash: str
    run_dir: storage.PathLike
    item: WorkItem
    status: str = ""  # "" until the first stage decides: skipped | redone | written
    records: list = field(default_factory=list)  # what the previous stage yielded (batches)
    counts: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)  # output file -> sha256, as the receipt holds them


def run_on_xenna(run_hash: str, run_dir: storage.PathLike, items: tuple[WorkItem, ...], stages: tuple[Stage, ...],
                 mode: str = "xenna", workers: int = 1) -> list[tuple[str, str, dict]]:
    """Every item through `stages` on cosmos-xenna; (item name, status, counts) per item, in plan order."""
    check_executor(mode)  # one line naming the install, if the extra is missing
    import ray
    from cosmos_xenna.pipelines import v1

    started_here = _start_ray(ray, workers, sum(stage.resources.cpus for stage in stages))
    specs = [v1.StageSpec(_xenna_stage(v1, stage, stages, first=n == 0, last=n == len(stages) - 1))
             for n, stage in enumerate(stages)]
    # Progress is ours (one line on stderr); xenna's status tables (60 lines every interval) are off.
    quiet = v1.VerbosityLevel.NONE
    config = v1.PipelineConfig(execution_mode=getattr(v1.ExecutionMode, MODES[mode]), return_last_stage_outputs=True,
                               cpu_allocation_percentage=1.0, monitoring_verbosity_level=quiet,
                               actor_pool_verbosity_level=quiet,
                               mode_specific=v1.StreamingSpecificSpec(executor_verbosity_level=quiet)
                               if mode == "xenna" else None)
    jobs = [ItemInFlight(run_hash, run_dir, item) for item in items]
    # Ray's state API (xenna's and ours) finds its Ray by RAY_ADDRESS, else by looking in /tmp/ray, and
    # refuses when several Rays run on the machine (measured: three other users' Rays here). Name ours.
    address = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = address or ray.get_runtime_context().gcs_address
    done, failure = None, None
    try:
        done = v1.run_pipeline(v1.PipelineSpec(input_data=jobs, stages=specs, config=config))
    except Exception as error:  # xenna raises what Ray raised in an actor, wrapped in its own errors
        failure = _one_line(error, ray)  # keeps no traceback: xenna's frames hold its actors' handles
    try:
        _end_leftovers(ray, started_here)
    finally:
        if address is None:
            os.environ.pop("RAY_ADDRESS", None)
    if failure is not None:
        raise failure
    by_name = {job.item.name: job for job in done or []}
    missing = [item.name for item in items if item.name not in by_name]
    if missing:
        raise NemotronError(f"cosmos-xenna returned no result for work items {', '.join(missing[:5])} of {run_dir}; "
                            "re-run to make them (the others are receipted)")
    return [(item.name, by_name[item.name].status, by_name[item.name].counts) for item in items]


def _xenna_stage(v1, stage: Stage, stages: tuple[Stage, ...], first: bool, last: bool):
    """Our stage as a xenna Stage (a class made here, since cosmos_xenna is imported only on demand)."""

    class XennaStage(v1.Stage):
        def __init__(self):
            self.stage, self.stages, self.first, self.last = stage, stages, first, last

        @property
        def required_resources(self):
            return v1.Resources(cpus=self.stage.resources.cpus)

        def setup(self, worker_metadata) -> None:
            os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the actors are the parallelism
            self.stage.setup()

        def process_data(self, in_data: list[ItemInFlight]) -> list[ItemInFlight]:
            return [self._one(job) for job in in_data]

        def _one(self, job: ItemInFlight) -> ItemInFlight:
            if self.first:  # the receipt protocol's first half: skip a receipted item, else clear leftovers
                job.status, job.counts = begin(job.run_hash, job.run_dir, job.item, self.stages)
            if job.status != "skipped":
                _run_stage(self.stage, job)
            if self.last and job.status != "skipped":
                write_receipt(job.run_dir, Receipt(run_hash=job.run_hash, shard=job.item.name, work=job.item.work,
                                                   outputs=dict(sorted(job.outputs.items())), stats=job.counts))
            return job

    XennaStage.__name__ = XennaStage.__qualname__ = f"{type(stage).__name__}_{stage.name}"  # xenna's stage name
    return XennaStage()


def _run_stage(stage: Stage, job: ItemInFlight) -> None:
    """One stage over one item: its records in, its records out (held for the next stage); the files it
    wrote are checksummed here, in the process that wrote them (and published, for an object store)."""
    with tempfile.TemporaryDirectory(prefix=f"{job.item.name}.") as scratch:
        remote = storage.is_url(job.run_dir)
        folder = Path(scratch) / "out" if remote else Path(job.run_dir)
        context = ItemContext(job.item, Path(scratch), folder, counts=job.counts)
        job.records = list(stage.process(context, iter(job.records)))
        if context.outputs:
            receipt = make_receipt(folder, job.run_hash, job.item.name, job.item.work, context.outputs, {})
            job.outputs.update(receipt.outputs)
            for name in context.outputs if remote else ():
                storage.publish(folder / name, storage.join(job.run_dir, name))


def _start_ray(ray, workers: int, stage_cpus: float) -> bool:
    """Join RAY_ADDRESS or a running Ray, else start a local one with the dashboard; True if started here."""
    if ray.is_initialized():
        return False
    # What xenna's own init sets before ray.init: the dashboard reads these when it starts, and xenna
    # asks the state API for up to 40,000 actors (Ray's default limit, 10,000, refuses the request).
    for name, value in (("RAY_MAX_LIMIT_FROM_API_SERVER", "40000"), ("RAY_MAX_LIMIT_FROM_DATA_SOURCE", "40000"),
                        ("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "1")):
        os.environ.setdefault(name, value)
    # log_to_driver=False: actor output must never reach this process's stdout (artifact JSON only).
    address = os.environ.get("RAY_ADDRESS")
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
            return False
        ray.init(num_cpus=max(workers, int(-(-stage_cpus // 1))), include_dashboard=True, log_to_driver=False)
    except (ConnectionError, RuntimeError) as error:
        raise NemotronError(f"cosmos-xenna could not start or join Ray (RAY_ADDRESS={address or 'unset'}): "
                            f"{error}") from error
    return True


def _end_leftovers(ray, started_here: bool, wait_s: float = 5.0) -> None:
    """End this node's processes of xenna actors that Ray already lists DEAD, and shut down a Ray started
    here. xenna lets go of its NodeResourceMonitor and StageWorker actors, Ray marks them dead, yet their
    non-daemon threads (a metrics loop; a stage worker's download and process loops) keep the processes
    running for good, even after `ray.shutdown()`. An actor still ALIVE after `wait_s` belongs to another
    run: left be (ending a live actor's process would also make Ray print an error line on stdout)."""
    gc.collect()  # the last references to xenna's actors may sit in reference cycles
    deadline = time.monotonic() + wait_s
    try:
        from ray.util.state import list_actors

        here = ray.get_runtime_context().get_node_id()
        while True:
            actors = [actor for name in LEFTOVER_CLASSES
                      for actor in list_actors(filters=[("class_name", "=", name)], detail=True, limit=10_000,
                                               raise_on_missing_output=False) if actor.node_id == here]
            for actor in actors:
                if actor.state == "DEAD" and actor.pid:
                    _end_process(actor.pid, actor.class_name)
            if all(actor.state == "DEAD" for actor in actors) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    except Exception as error:  # the state API is best effort; a leftover process is not worth a failed run
        print(f"xenna: could not end the processes xenna leaves ({error}); end any "
              f"{' or '.join(f'ray::{name}' for name in LEFTOVER_CLASSES)} left by its pid", file=sys.stderr)
    if started_here:
        ray.shutdown()


def _end_process(pid: int, title: str) -> None:
    """SIGKILL a dead actor's process (nothing left to flush), if its pid still names that actor."""
    try:
        if title in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
            os.kill(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass  # gone already


def _one_line(error: BaseException, ray: Any) -> NemotronError:
    """What failed, in one line: our own error from a stage as it is, a dead worker as what to do next."""
    seen, cause = set(), error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        # First: Ray's RayTaskError(NemotronError) is also a NemotronError, its text Ray's traceback header.
        if isinstance(cause, ray.exceptions.RayTaskError) and isinstance(cause.cause, NemotronError):
            return NemotronError(str(cause.cause).splitlines()[0])
        if isinstance(cause, NemotronError) and not isinstance(cause, ray.exceptions.RayTaskError):
            return NemotronError(str(cause).splitlines()[0])
        if "exceeds the supported limit" in str(cause):
            return NemotronError("the running Ray's dashboard refuses cosmos-xenna's actor listing (40,000 at once); "
                                 "start that Ray with RAY_MAX_LIMIT_FROM_API_SERVER=40000 and "
                                 "RAY_MAX_LIMIT_FROM_DATA_SOURCE=40000 in its environment, or let the executor "
                                 "start a local Ray (no ray.init, no RAY_ADDRESS)")
        if isinstance(cause, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError):
            return NemotronError("a cosmos-xenna worker died mid-run (killed, out of memory, or its node was lost) "
                                 "and xenna 0.3.0 fails the whole run; the work items done before it are receipted: "
                                 "re-run the same call to make the rest")
        cause = cause.__cause__ or cause.__context__
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return NemotronError(f"cosmos-xenna run failed: {type(error).__name__}: {first}; re-run to resume from the "
                         "receipts, or run with executor='local' to see the error in this process")
