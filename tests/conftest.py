"""Shared test setup: everything runs offline on the CPU; whole recipes run once per session (see runs.py)."""

import os
import sys
from pathlib import Path

import pytest

from runs import (  # noqa: F401  (session fixtures: each made once per pytest run; see runs.py)
    nano2_run,
    nano3_run,
    nano3_two_plays,
    tiny_base_checkpoint,
    tiny_sft_dataset,
)

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("NEMOTRON_TRACKER", None)


def _own_cores_per_worker() -> None:
    """On pytest-xdist worker i of N, keep to cores i, i+N, ... of this machine (N = 2 on 2 cores: one
    core each). Child processes inherit the set, and `compute.allowed_cores` reads it, so every torch
    in the worker's tests uses its own cores' threads: two workers whose OpenMP threads share the same
    cores wait for each other (measured: two whole recipes side by side, 2 threads each on 2 cores,
    were several times slower than one after the other)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    share = cores[int(worker.removeprefix("gw")) % count :: count]
    if share:
        os.sched_setaffinity(0, share)
        os.environ["OMP_NUM_THREADS"] = str(len(share))


_own_cores_per_worker()

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


# The whole runs: the fixtures of tests/runs.py that take minutes. With workers (`make test` runs
# `pytest -n 2`), the modules that ask for one start first, so the longest work overlaps the rest.
WHOLE_RUNS = {"nano2_run", "nano3_run"}


def pytest_collection_modifyitems(config, items):
    """Cheap checks first: modules whose every test is slow (whole recipes, servers, torchrun) run last.

    Whole modules move, never single tests, so a module's fixtures are still made once; the order inside
    a module and among the moved modules stays as written (alphabetical by file).

    With pytest-xdist workers (`-n N --dist loadfile --no-loadscope-reorder`, what `make test` runs), a
    worker takes each module whole, so it makes the module's fixtures once, and the order is reversed to
    longest first: the modules holding a whole recipe run, then the all-slow modules, then the cheap
    ones, which fill in while the other worker finishes (a long module started last would run alone)."""
    all_slow: dict[object, bool] = {}
    whole_run: dict[object, bool] = {}
    for item in items:
        module = getattr(item, "module", None)
        all_slow[module] = all_slow.get(module, True) and item.get_closest_marker("slow") is not None
        whole_run[module] = whole_run.get(module, False) or bool(WHOLE_RUNS & set(getattr(item, "fixturenames", ())))
    if hasattr(config, "workerinput"):  # a pytest-xdist worker (workers see numprocesses as None)
        items.sort(key=lambda item: (not whole_run[getattr(item, "module", None)],
                                     not all_slow[getattr(item, "module", None)]))
    else:
        items.sort(key=lambda item: all_slow[getattr(item, "module", None)])  # sort is stable


@pytest.fixture(autouse=True)
def _fresh_tracker_and_stdin():
    """Each test starts with the default (NoOp) tracker and no cached stdin artifacts."""
    import nemotron.artifact.pipe as pipe
    import nemotron.trackers as trackers

    trackers._ACTIVE = None
    pipe._STDIN = None
    yield
    trackers._ACTIVE = None
    pipe._STDIN = None
