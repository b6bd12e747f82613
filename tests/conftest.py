"""Shared test setup: everything runs offline on the CPU."""

import os
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("NEMOTRON_TRACKER", None)

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


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
