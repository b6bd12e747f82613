"""The expensive runs the suite shares: each made once per pytest session, for every test that reads them.

Whole recipes:

A whole tiny recipe takes minutes on 2 cores (nano2 about 2.5, nano3 about 5), so the suite runs each at
most once: the fixtures below are session-scoped and start only when the first test that asks for them
runs (conftest.py sorts the all-slow modules last, so cheap checks report first).

    def test_something(nano2_run):          # or nano3_run
        nano2_run.out                       # the --output-dir folder, as the user would have it
        nano2_run.first.artifacts()         # the JSON document the run printed on stdout
        nano2_run.first.stderr              # its progress lines and summaries
        nano2_run.report_text               # report/report.md as the first run wrote it

The folders are shared: a test may read them, re-run a step that skips (same digests), or rebuild a file
byte for byte; a test that writes anything else writes under its own tmp_path, never into `out`.

Step outputs that several modules read, made in-process with the defaults (seconds each, so test-fast
uses them too): `tiny_base_checkpoint` (builders.make_pretrain_checkpoint: a real tokenizer and an
untrained nano2 tiny model), `tiny_sft_dataset` (nano2 stage-1 data curation from it) and
`nano3_two_plays` (builders.curate_two_plays_nano3: the PretrainDataset the nano3 tests train on).
The same rule holds: read them, and write only under your own tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Run:
    """What one command left behind."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def artifacts(self) -> dict[str, dict]:
        """stdout must be exactly one JSON document: the artifacts keyed by type."""
        document, end = json.JSONDecoder().raw_decode(self.stdout)
        assert not self.stdout[end:].strip(), f"more than one JSON document on stdout: {self.stdout[end:][:200]!r}"
        return document

    def lines(self, prefix: str) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith(prefix)]


def run(args: list[str] | str, cwd: Path, timeout: float = 600) -> Run:
    """Run a command (a shell line when `args` is a string) with the test environment."""
    started = time.perf_counter()
    done = subprocess.run(
        args if isinstance(args, list) else ["bash", "-o", "pipefail", "-c", args],
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        stdin=subprocess.DEVNULL,
        check=False,  # the tests assert on the exit status themselves
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(done.returncode, done.stdout, done.stderr, time.perf_counter() - started)


def recipe_command(recipe: str, out: Path) -> list[str]:
    """`python -m nemotron.recipes.<recipe> --scale tiny --output-dir OUT`: the default tiny run."""
    return [sys.executable, "-m", f"nemotron.recipes.{recipe}", "--scale", "tiny", "--output-dir", str(out)]


@dataclass
class RecipeRun:
    """One whole tiny recipe run: its output folder, what it printed, and its report card."""

    out: Path
    first: Run
    report_text: str  # report/report.md as the first run wrote it

    @property
    def artifacts(self) -> dict[str, dict]:
        return self.first.artifacts()


def run_recipe(recipe: str, out: Path) -> RecipeRun:
    first = run(recipe_command(recipe, out), cwd=out, timeout=1800)
    if first.returncode != 0:
        pytest.fail(f"the {recipe} recipe failed (exit {first.returncode}):\n{first.stderr[-3000:]}")
    report = out / "report" / "report.md"
    return RecipeRun(out=out, first=first, report_text=report.read_text() if report.exists() else "")


@pytest.fixture(scope="session")
def nano2_run(tmp_path_factory) -> RecipeRun:
    """`python -m nemotron.recipes.nano2 --scale tiny`, run once per session (nine steps, three stages)."""
    return run_recipe("nano2", tmp_path_factory.mktemp("nano2_run"))


@pytest.fixture(scope="session")
def nano3_run(tmp_path_factory) -> RecipeRun:
    """`python -m nemotron.recipes.nano3 --scale tiny`, run once per session (pretrain, SFT, GRPO)."""
    return run_recipe("nano3", tmp_path_factory.mktemp("nano3_run"))


@pytest.fixture(scope="session")
def tiny_base_checkpoint(tmp_path_factory):
    from builders import make_pretrain_checkpoint

    return make_pretrain_checkpoint(tmp_path_factory.mktemp("stage0"))


@pytest.fixture(scope="session")
def tiny_sft_dataset(tiny_base_checkpoint, tmp_path_factory):
    from nemotron.recipes.nano2.stage1_sft import data_curation

    out = tmp_path_factory.mktemp("sft_data")
    return data_curation.main(data_curation.Config(checkpoint_path=tiny_base_checkpoint.path, output_dir=out))


@pytest.fixture(scope="session")
def nano3_two_plays(tmp_path_factory):
    from builders import curate_two_plays_nano3

    return curate_two_plays_nano3(tmp_path_factory.mktemp("blend"), tmp_path_factory.mktemp("data"))
