"""Shared test setup: everything runs offline on the CPU; whole recipes run once per session (see runs.py)."""

import logging
import os
import sys
from pathlib import Path

import pytest

from runs import (  # noqa: F401  (session fixtures: each made once per pytest run; see runs.py)
    RECIPE_FIXTURES,
    RECIPE_RUNS,
    nano2_run,
    nano3_run,
    nano3_two_plays,
    start_recipe_runs,
    tiny_base_checkpoint,
    tiny_sft_dataset,
)

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("NEMOTRON_TRACKER", None)

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def pytest_collection_modifyitems(items):
    """Cheap checks first: modules whose every test is slow (servers, torchrun) run after the rest, and the
    modules that read a whole recipe run (`nano2_run`, `nano3_run`) run last, so their background runs
    (runs.py) have the whole suite's idle cycles to finish in.

    Whole modules move, never single tests, so a module's fixtures are still made once; the order inside
    a module and among the moved modules stays as written (alphabetical by file). Under pytest-xdist
    (`make test`) this is the order inside a worker's share only: xdist hands out the largest modules first."""
    all_slow: dict[object, bool] = {}
    reads_a_recipe: dict[object, bool] = {}
    for item in items:
        module = getattr(item, "module", None)
        all_slow[module] = all_slow.get(module, True) and item.get_closest_marker("slow") is not None
        reads_a_recipe[module] = reads_a_recipe.get(module, False) or bool(
            RECIPE_FIXTURES.keys() & set(getattr(item, "fixturenames", ())))
    items.sort(key=lambda item: (all_slow[getattr(item, "module", None)],
                                 reads_a_recipe[getattr(item, "module", None)]))  # sort is stable


def pytest_sessionstart(session):
    """SmolLM2's converted copy (nemotron.models.reference.smollm2_folder) goes to a folder the session's
    workers share, not to the user's cache: a suite from a clean clone converts it once, the first load."""
    basetemp = session.config._tmp_path_factory.getbasetemp()
    os.environ["NEMOTRON_CACHE"] = str((basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp)
                                       / "nemotron-cache")


def pytest_collection_finish(session):
    """Start the whole recipe runs the selected tests read, in the background (runs.py)."""
    if not session.config.option.collectonly:
        start_recipe_runs(session.items, session.config._tmp_path_factory)


def pytest_sessionfinish(session, exitstatus):
    RECIPE_RUNS.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop)


@pytest.fixture(autouse=True)
def _fresh_tracker_and_stdin():
    """Each test starts with the default (NoOp) tracker, no cached stdin artifacts, and a process that
    has loaded no artifact and parsed no step Config (as a fresh step process)."""
    import nemotron.artifact.pipe as pipe
    import nemotron.trackers as trackers
    from nemotron.artifact.provenance import forget_process_state

    trackers._ACTIVE = None
    pipe._STDIN = None
    forget_process_state()
    yield
    trackers._ACTIVE = None
    pipe._STDIN = None
    forget_process_state()


@pytest.fixture(autouse=True)
def _root_logger_as_found():
    """A test leaves the root logger's level and handlers as it found them. Data Designer's `DataDesigner(...)`
    sets the root logger to INFO for the rest of the process (test_sdg_server.py runs it in-process); after that,
    every INFO record of every library (Megatron logs ~58 per shard merge) is kept by pytest's log capture until
    the test ends, and the deep tier of test_indexed_random.py, whose Megatron merges call gc.collect() each,
    walked a list of up to ~116,000 records on every call: 207 s of one core in a whole-suite run, 21 s alone."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    for handler in set(root.handlers) - set(handlers):
        root.removeHandler(handler)
