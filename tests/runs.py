"""The expensive runs the suite shares: each made once per pytest session, for every test that reads them.

Whole recipes:

A whole tiny recipe takes minutes on 2 cores (nano2 about 2.5, nano3 about 6 on one core), so the suite runs
each at most once. The runs start in the background as soon as collection ends (`start_recipe_runs`, called
by conftest.py for the recipes the selected tests need), one after another, on one core and ahead of the
rest of the suite, which runs beside them at a lower priority (they are its longest path); their tests run
last (conftest.py's order) and wait for them. One core, because the steps take their torch threads from the
cores they may use (`nemotron.cpu.allowed_cores`): the runs are the user's command as `taskset -c N` would
run it, the same steps and claims, rounded as one thread rounds (the bytes of a run are reproducible for a
given thread count, not across counts).

`make test` runs the suite in pytest-xdist workers, one per core (`-n auto --dist loadfile`: a module's
tests stay in one worker, so its fixtures are made once). The runs are still made once: the first worker
to claim `recipe-runs.owner` in the folder all workers share makes them and writes each one's outcome
beside it (`<recipe>_run.json`); a test in another worker waits for that file. The owner's session waits
for its runs to end before it ends (another worker may still need them), unless it was interrupted.

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

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
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


RECIPES = ("nano2", "nano3")  # the whole runs below, in the order the background starts them
RECIPE_FIXTURES = {f"{recipe}_run": recipe for recipe in RECIPES}  # the fixture a test asks for: its recipe
FOREGROUND_NICENESS = 5  # CFS weight 335 against the runs' 1024: the runs keep a core, the tests share the rest
WAIT_SECONDS = 2400  # longest a test waits for a run (both runs, one after another, on a loaded core: ~15 min)


class RecipeRuns:
    """The session's whole recipe runs, made one after another in a background thread.

    `start` is called once collection knows which runs the selected tests need; in the process that claims
    the shared folder it makes them, and each run leaves its outcome file there. `get` waits for that file,
    in whichever process made the run, or, for a run not started with the session, makes one here in the
    foreground. Each run is the user's command in its own subprocess; the thread only waits on it. `finish`
    ends the session's runs: it waits for them, or on an interrupted session (Ctrl-C, -x) kills them, so no
    recipe outlives the suite."""

    def __init__(self):
        self.started: list[str] = []  # the runs the session asked for, whichever process makes them
        self.processes: list[subprocess.Popen] = []
        self.shared: Path | None = None  # where the runs leave their outcome files
        self.thread: threading.Thread | None = None
        self.stopped = False

    def start(self, recipes: list[str], shared: Path) -> None:
        self.shared, self.started = shared, recipes
        try:  # one process per session makes the runs: the first to create this file
            os.close(os.open(shared / "recipe-runs.owner", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        self.thread = threading.Thread(target=self._make_all, args=(recipes,), daemon=True, name="recipe-runs")
        self.thread.start()

    def _make_all(self, recipes: list[str]) -> None:
        for recipe in recipes:
            try:
                out = self.shared / f"{recipe}_run"
                out.mkdir()
                made = self._make(recipe, out, background=True)
                outcome = {"out": str(made.out), "report_text": made.report_text, **vars(made.first)}
            except BaseException as error:  # reported to the test that asks for this run, in any worker
                outcome = {"error": f"the {recipe} run could not be made: {error!r}"}
            written = self.shared / f"{recipe}_run.json.partial"
            written.write_text(json.dumps(outcome))
            written.rename(self.shared / f"{recipe}_run.json")  # whole, or not there

    def _make(self, recipe: str, out: Path, background: bool) -> RecipeRun:
        started = time.perf_counter()
        if self.stopped:
            raise RuntimeError("the test session ended before this run started")
        process = subprocess.Popen(
            recipe_command(recipe, out), cwd=out, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, preexec_fn=in_the_background if background else None,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
        self.processes.append(process)
        try:
            stdout, stderr = process.communicate(timeout=1800)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        first = Run(process.returncode, stdout, stderr, time.perf_counter() - started)
        report = out / "report" / "report.md"
        return RecipeRun(out=out, first=first, report_text=report.read_text() if report.exists() else "")

    def _wait_for_outcome(self, recipe: str) -> RecipeRun:
        outcome_file, waited = self.shared / f"{recipe}_run.json", time.monotonic()
        while not outcome_file.exists():
            if time.monotonic() - waited > WAIT_SECONDS:
                pytest.fail(f"no {recipe} run after {WAIT_SECONDS} s: the process that makes it (the one that "
                            f"created {self.shared / 'recipe-runs.owner'}) ended or hangs")
            time.sleep(1)
        outcome = json.loads(outcome_file.read_text())
        if "error" in outcome:
            pytest.fail(outcome["error"])
        return RecipeRun(out=Path(outcome.pop("out")), report_text=outcome.pop("report_text"), first=Run(**outcome))

    def get(self, recipe: str, tmp_path_factory) -> RecipeRun:
        if recipe in self.started:
            made = self._wait_for_outcome(recipe)
        else:  # not started with the session (a plugin or hook missing): made here, in the foreground
            made = self._make(recipe, tmp_path_factory.mktemp(f"{recipe}_run"), background=False)
        if made.first.returncode != 0:
            pytest.fail(f"the {recipe} recipe failed (exit {made.first.returncode}):\n{made.first.stderr[-3000:]}")
        return made

    def finish(self, interrupted: bool) -> None:
        if self.thread is not None and not interrupted:
            self.thread.join()  # another worker may be waiting for a run this one makes
        self.stopped = True
        for process in self.processes:
            if process.poll() is None:
                process.kill()


def in_the_background() -> None:
    """In the child before exec: the last core this process may use (one thread), and death with pytest: a
    suite killed outright (SIGTERM, SIGKILL: no `finish`) leaves no recipe running on."""
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # Linux: sent when the thread that forked it ends


PR_SET_PDEATHSIG = 1  # <sys/prctl.h>


RECIPE_RUNS = RecipeRuns()


def start_recipe_runs(items, tmp_path_factory) -> None:
    """Start, in the background, the whole runs that the selected test items ask for (none for test-fast).
    Under pytest-xdist every worker calls this; the folder above each worker's basetemp is the one they
    share (without xdist, basetemp itself)."""
    asked = {name for item in items for name in getattr(item, "fixturenames", ())}
    needed = [recipe for fixture, recipe in RECIPE_FIXTURES.items() if fixture in asked]
    if needed:
        basetemp = tmp_path_factory.getbasetemp()
        RECIPE_RUNS.start(needed, basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp)
        # The runs are the suite's longest path (nano2 then nano3, ~10 min of one core), so they go first: this
        # thread, and what it starts from now on (the tests, their subprocesses, torch's threads), runs at a
        # lower priority. Linux keeps a nice value per thread, and the runs' thread was started above, at 0.
        os.nice(FOREGROUND_NICENESS)


@pytest.fixture(scope="session")
def nano2_run(tmp_path_factory) -> RecipeRun:
    """`python -m nemotron.recipes.nano2 --scale tiny`, run once per session (nine steps, three stages)."""
    return RECIPE_RUNS.get("nano2", tmp_path_factory)


@pytest.fixture(scope="session")
def nano3_run(tmp_path_factory) -> RecipeRun:
    """`python -m nemotron.recipes.nano3 --scale tiny`, run once per session (pretrain, SFT, GRPO)."""
    return RECIPE_RUNS.get("nano3", tmp_path_factory)


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
