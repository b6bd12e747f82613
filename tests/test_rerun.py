"""Re-runs that keep the contract, on a real nano2 tiny run (the session's `nano2_run`, copied first).

- A copied run folder is the same run: the orchestrator on the copy skips all ten steps.
- A forced re-run killed with SIGKILL midway leaves the finished artifact verifiable, and running
  again resumes the staged re-run and swaps it in. The stage re-run is stage 2 (pairs, DPO, evaluation; DPO
  checkpoints at step 20 of 55): the test takes ~37 s of one core, where stage 1's SFT, which it re-ran
  before, took 60-68 s for the same contract (each training step's own resume to the same bytes is tested
  beside it: tests/test_nano2_stage*_training.py).

The commands run on one core, as the background run that made `nano2_run` did (tests/runs.py: the
bytes of a run are reproducible for a given thread count), so a step that re-runs makes the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runs import RecipeRun, in_the_background, recipe_command

pytestmark = pytest.mark.slow

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def on_one_core(command: list[str], cwd: Path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=cwd, env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=in_the_background, **kwargs)


def finish(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout, stderr


def digests(document: str) -> dict[str, str]:
    return {kind: art["digest"] for kind, art in json.loads(document).items()}


def test_a_copied_run_is_up_to_date_step_for_step(nano2_run: RecipeRun, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(nano2_run.out, copy)
    code, stdout, stderr = finish(on_one_core(recipe_command("nano2", copy), cwd=tmp_path))
    assert code == 0, stderr[-3000:]
    assert len([line for line in stderr.splitlines() if line.startswith("[skip]")]) == 10, stderr
    assert "[run ]" not in stderr and "re-running" not in stderr, stderr
    assert digests(stdout) == digests(nano2_run.first.stdout)
    assert all(Path(art["path"]).is_relative_to(copy) for art in json.loads(stdout).values())


def test_a_forced_rerun_killed_midway_leaves_the_finished_artifact_and_resumes(nano2_run: RecipeRun, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(nano2_run.out, copy)
    stage = copy / "stage2_alignment"
    command = [sys.executable, "-m", "nemotron.recipes.nano2.stage2_alignment", "--scale", "tiny", "--output-dir",
               str(stage), "--checkpoint-path", str(copy / "stage1_sft" / "training"),
               "--dataset-path", str(copy / "stage1_sft" / "data_curation"), "--force"]
    before = json.loads((stage / "training" / "metadata.json").read_text())["digest"]

    # Kill the forced re-run once its training has written a checkpoint (into the staging folder).
    killed = on_one_core(command, cwd=tmp_path, start_new_session=True)
    deadline = time.monotonic() + 240
    while not list(stage.glob(".training.rerun-*/checkpoints/step_*")):
        assert killed.poll() is None, killed.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint of the re-run appeared"
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate()

    verify = subprocess.run([sys.executable, "-m", "nemotron.artifact", "verify", str(stage / "training")],
                            env=ENV, capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0 and before in verify.stdout + verify.stderr, verify.stdout + verify.stderr
    (staged,) = stage.glob(".training.rerun-*")
    assert not (staged / "metadata.json").exists()

    code, stdout, stderr = finish(on_one_core(command, cwd=tmp_path))
    assert code == 0, stderr[-3000:]
    assert f"[note] resuming the unfinished re-run in {staged}" in stderr, stderr
    rerun = [line for line in stderr.splitlines() if line.startswith("re-running stage2_alignment/training")]
    assert len(rerun) == 1 and ": --force;" in rerun[0], stderr
    made = json.loads(stdout)
    assert made["dpocheckpoint"]["metrics"]["resumed_from_step"] > 0
    assert made["dpocheckpoint"]["path"] == str((stage / "training").resolve())
    # One thread, a resumed run: the same bytes as the uninterrupted run that made nano2_run.
    wanted = digests(nano2_run.first.stdout)
    assert digests(stdout) == {kind: wanted[kind] for kind in made}
    assert sorted(p.name for p in stage.iterdir() if p.name.startswith(".training")) == []
