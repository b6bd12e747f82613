"""Where shard work items run: in this process, in a local process pool, or as Ray tasks.

A data-prep run is a list of independent work items (one per shard); each one checks its receipt
and, if needed, makes its shard. Where they run changes nothing in what they write:

    for result in run_work_items(work, items, setup, payload, executor="local", workers=2):
        ...  # results arrive as items finish, in any order

- `work(state, item) -> result` is a module-level function (it is sent to other processes by name).
- `setup(payload) -> state` builds what every item shares (a tokenizer) once per process, from a
  small picklable `payload` (the tokenizer's JSON): jobs stay small, and no process builds it twice.

Executors:
- "local", workers=1: every item in this process, one after the other (no start-up cost at all).
- "local", workers=N: a pool of N spawned processes on this machine. Spawn, not fork: the parent's
  Rust thread pools must not be copied into the children, and it behaves the same on Linux and macOS.
- "ray": one Ray task per item (1 CPU each), at most two per CPU in flight (a bounded queue).
  `RAY_ADDRESS` names a running cluster (`ray start --head` on one node, `ray start --address=...` on
  the others, the nemotron package installed on every node); without it a local Ray starts with
  `workers` CPUs. An already initialised Ray (e.g. a notebook's `ray.init()`) is used as it is. A
  worker that dies (a killed process, a lost node) has its task retried by Ray (`max_retries`); a
  work item is idempotent, because it redoes a shard only when its receipt does not prove it done and
  clears what an interrupted attempt left behind.
- "xenna", "xenna-batch" (opt-in extra): for stage lists only; `stages/runner.py` hands each stage to
  cosmos-xenna as its own stage (`data_prep/stages/xenna.py`), so `run_work_items` refuses them.

In pool and Ray workers the processes are the parallelism, so library thread pools (the Rust
tokenizer's) are switched off there: two layers of parallelism would only oversubscribe the cores.
"""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

from nemotron.errors import NemotronError

# cosmos-xenna (opt-in extra): each stage a xenna stage, streaming or one stage at a time (stages/xenna.py).
XENNA_EXECUTORS = ("xenna", "xenna-batch")
EXECUTORS = ("local", "ray", *XENNA_EXECUTORS)
# Ray retries a task this many times when its worker process dies (not when the task raises).
RAY_MAX_RETRIES = 3

Item = TypeVar("Item")
Result = TypeVar("Result")


def check_executor(executor: str) -> None:
    if executor not in EXECUTORS:
        raise NemotronError(f"unknown executor {executor!r}; use one of {', '.join(EXECUTORS)}")
    if executor in XENNA_EXECUTORS:  # before any work: the extra is opt-in
        try:
            import cosmos_xenna.pipelines.v1  # noqa: F401
        except ImportError as error:
            raise NemotronError(f"executor {executor!r} needs cosmos-xenna 0.3.0 ({error}); install it with "
                                "pip install 'nemotron[xenna]' (Linux x86_64, Python 3.11 only)") from error


def run_work_items(
    work: Callable[[Any, Item], Result],
    items: Sequence[Item],
    setup: Callable[[Any], Any],
    payload: Any,
    *,
    executor: str = "local",
    workers: int = 1,
    cpus_per_item: float = 1.0,
) -> Iterator[Result]:
    """Run `work(setup(payload), item)` for every item; yield each result as its item finishes.

    `cpus_per_item` is what Ray reserves for one item's task (the stages' declared resources)."""
    if executor in XENNA_EXECUTORS:
        raise NemotronError(f"executor {executor!r} runs stage lists (run_pretrain_pipeline, run_sft_pipeline, "
                            "stages.run_stages), not single work functions; use executor='local' or 'ray' here")
    check_executor(executor)
    if not items:
        return
    if executor == "ray":
        yield from _run_on_ray(work, items, setup, payload, workers, cpus_per_item)
    elif workers <= 1:
        state = setup(payload)
        for item in items:
            yield work(state, item)
    else:
        context = multiprocessing.get_context("spawn")
        with context.Pool(min(workers, len(items)), initializer=_start_pool_worker, initargs=(setup, payload)) as pool:
            yield from pool.imap_unordered(partial(_pool_task, work), items)


# ---------------------------------------------------------------------------------------------------
# local pool
# ---------------------------------------------------------------------------------------------------

_POOL_STATE: Any = None  # one per pool process, built by _start_pool_worker


def _start_pool_worker(setup: Callable[[Any], Any], payload: Any) -> None:
    global _POOL_STATE
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _POOL_STATE = setup(payload)


def _pool_task(work: Callable[[Any, Item], Result], item: Item) -> Result:
    return work(_POOL_STATE, item)


# ---------------------------------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------------------------------

_RAY_STATES: dict[str, Any] = {}  # per Ray worker process: payload key -> built state


def connect_ray(workers: int = 1) -> None:
    """Use the running Ray, connect to RAY_ADDRESS, or start a local Ray with `workers` CPUs."""
    try:
        import ray
    except ImportError as error:
        raise NemotronError("executor 'ray' needs Ray: pip install 'ray==2.60.0'") from error
    if ray.is_initialized():
        return
    # log_to_driver=False: worker output must never reach this process's stdout (artifact JSON only).
    options = {"include_dashboard": False, "log_to_driver": False}
    address = os.environ.get("RAY_ADDRESS")
    try:
        if address:
            ray.init(address=address, **options)
        else:
            ray.init(num_cpus=max(1, workers), **options)
    except ConnectionError as error:
        raise NemotronError(f"cannot connect to the Ray cluster at RAY_ADDRESS={address}: {error}") from error


def _ray_task(work, setup, key: str, payload_box: list, item):
    state = _RAY_STATES.get(key)
    if state is None:
        import ray

        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        # The payload travels once to each node's object store and is fetched only on a cache miss.
        state = _RAY_STATES[key] = setup(ray.get(payload_box[0]))
    return work(state, item)


def _run_on_ray(work, items, setup, payload, workers: int, cpus_per_item: float = 1.0) -> Iterator:
    import ray

    connect_ray(workers)
    key = hashlib.sha256(repr((work.__qualname__, setup.__qualname__, payload)).encode()).hexdigest()
    payload_box = [ray.put(payload)]  # in a list, so Ray does not fetch it for every task
    task = ray.remote(num_cpus=cpus_per_item, max_retries=RAY_MAX_RETRIES)(_ray_task)
    # A bounded queue: at most two tasks per CPU in flight, the next submitted as one finishes, so a
    # plan of a million work items never sits in Ray's scheduler (or its object store) at once.
    window = 2 * max(workers, int(ray.cluster_resources().get("CPU", 1)))
    waiting = iter(items)
    pending = [task.remote(work, setup, key, payload_box, item) for item in itertools.islice(waiting, window)]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            pending += [task.remote(work, setup, key, payload_box, item) for item in itertools.islice(waiting, 1)]
            try:
                yield ray.get(done[0])
            except ray.exceptions.RayTaskError as error:
                if isinstance(error.cause, NemotronError):
                    raise NemotronError(str(error.cause)) from None
                raise
    finally:
        for ref in pending:  # an error, or the caller stopped early: do not leave tasks running
            ray.cancel(ref)
