"""Artifact folders a user can move, copy and trust; one run per folder; errors that name the fix.

Everything runs the real hello-pipeline steps (examples/hello_pipeline) as separate processes, the
way a user meets them: `mv` and `cp -r` of a runs/ tree, a second run started on a busy folder, a
misspelled input path, code with uncommitted changes.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PYTHON, REPO
from nemotron.artifact import METADATA, git_revision
from nemotron.artifact.lineage import load_any
from nemotron.errors import NemotronError

HELLO = REPO / "examples" / "hello_pipeline"
COUNT, FIT, REPORT = (f"{PYTHON} {HELLO / n}.py" for n in ("count_words", "fit_unigram", "report_perplexity"))
ARTIFACT_CLI = f"{PYTHON} -m nemotron.artifact"


def sh(cmd: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True, **kwargs)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.fixture
def pipeline(tmp_path) -> Path:
    """The three hello steps piped, run in `tmp_path/a`: runs/hello/{word_counts,unigram,perplexity}."""
    (tmp_path / "a").mkdir()
    proc = sh(f"{COUNT} | {FIT} | {REPORT}", tmp_path / "a")
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "a" / "runs" / "hello"


# ---------------------------------------------------------------------------------------------
# Relocatable: paths in metadata.json are relative to the folder
# ---------------------------------------------------------------------------------------------


def test_metadata_stores_paths_relative_to_the_folder_and_inputs_relative_to_the_tree(pipeline):
    counts = json.loads((pipeline / "word_counts" / METADATA).read_text())
    assert counts["path"] == "." and counts["counts_path"] == "./counts.json"
    assert counts["inputs"][0]["type"] == "source" and Path(counts["inputs"][0]["path"]).is_absolute()
    model = json.loads((pipeline / "unigram" / METADATA).read_text())
    assert model["inputs"][0]["path"] == "../word_counts"


def test_a_moved_runs_tree_loads_verifies_and_feeds_the_next_step(pipeline, tmp_path):
    moved = tmp_path / "elsewhere" / "runs"
    moved.parent.mkdir()
    shutil.move(pipeline.parent, moved)  # mv runs elsewhere/runs
    report = next(p for p in (moved / "hello").iterdir() if p.name not in ("word_counts", "unigram"))
    verify = sh(f"{ARTIFACT_CLI} verify {report}", tmp_path)
    assert verify.returncode == 0, verify.stderr
    assert "3 artifacts checked" in verify.stderr
    lineage = sh(f"{ARTIFACT_CLI} lineage {report}", tmp_path).stdout
    assert str(moved / "hello" / "word_counts") in lineage and str(pipeline) not in lineage
    fit = sh(f"{FIT} --counts-path {moved / 'hello' / 'word_counts'} --output-dir refit", tmp_path,
             stdin=subprocess.DEVNULL)
    assert fit.returncode == 0, fit.stderr
    assert json.loads(fit.stdout)["unigrammodel"]["inputs"][0]["path"] == str(moved / "hello" / "word_counts")


def test_a_copy_reads_and_verifies_its_own_files(pipeline, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(pipeline, copy)  # cp -r runs/hello copy
    assert load_any(copy / "word_counts").heldout_path == copy / "word_counts" / "heldout.txt"
    (copy / "word_counts" / "heldout.txt").write_text("changed in the copy only\n")
    verify = sh(f"{ARTIFACT_CLI} verify {copy / 'word_counts'}", tmp_path)
    assert verify.returncode == 1 and "word_counts: heldout.txt changed since" in verify.stderr  # names the file
    # The consumer in the copy sees that its input changed; the original is untouched.
    assert sh(f"{ARTIFACT_CLI} verify {copy / 'unigram'}", tmp_path).returncode == 1
    assert sh(f"{ARTIFACT_CLI} verify {pipeline / 'unigram'}", tmp_path).returncode == 0


def test_old_metadata_with_absolute_paths_still_loads(pipeline):
    meta = pipeline / "word_counts" / METADATA
    data = json.loads(meta.read_text())
    data |= {"path": str(meta.parent), "counts_path": str(meta.parent / "counts.json"),
             "heldout_path": str(meta.parent / "heldout.txt")}
    meta.write_text(json.dumps(data))
    loaded = load_any(meta.parent)
    assert loaded.counts_path == meta.parent / "counts.json"
    loaded.verify()


# ---------------------------------------------------------------------------------------------
# One run per output folder
# ---------------------------------------------------------------------------------------------


def test_a_second_run_on_a_busy_folder_stops_at_once_and_a_killed_run_leaves_no_stale_lock(pipeline, tmp_path):
    counts_json = sh(f"{COUNT} --output-dir counts", tmp_path).stdout
    # The first run holds the folder while it waits for its input on a pipe that stays open.
    first = subprocess.Popen([*FIT.split(), "--output-dir", "busy"], cwd=tmp_path, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = tmp_path / "busy" / ".lock"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text().strip() == str(first.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        second = sh(f"{FIT} --output-dir busy", tmp_path, input=counts_json)
        assert one_error_line(second) == (
            f"error: busy is in use by another run (pid {first.pid}); wait for it or pass another --output-dir"
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    third = sh(f"{FIT} --output-dir busy", tmp_path, input=counts_json)
    assert third.returncode == 0, third.stderr
    assert (tmp_path / "busy" / METADATA).exists()


def test_a_refused_run_leaves_no_folder_behind(tmp_path):
    proc = sh(f"{FIT} --counts-path nowhere --output-dir new/deep/out", tmp_path, stdin=subprocess.DEVNULL)
    one_error_line(proc)
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------------------------------------
# Errors that name the fix
# ---------------------------------------------------------------------------------------------


def test_a_missing_input_folder_says_it_does_not_exist_and_names_the_flag_and_the_step(tmp_path):
    line = one_error_line(sh(f"{FIT} --counts-path runs/hello/word_count", tmp_path, stdin=subprocess.DEVNULL))
    assert line == (
        "error: runs/hello/word_count does not exist; pass the folder of a finished wordcounts with "
        f"--counts-path (made by python {HELLO / 'count_words.py'})"
    )


def test_a_folder_without_metadata_says_it_holds_no_artifact(tmp_path):
    (tmp_path / "half").mkdir()
    line = one_error_line(sh(f"{FIT} --counts-path half", tmp_path, stdin=subprocess.DEVNULL))
    assert line.startswith("error: half holds no artifact (metadata.json missing: the step writing it has not "
                           "finished, or this is not a step's output folder); pass the folder of a finished "
                           "wordcounts with --counts-path")


def test_the_wrong_artifact_on_stdin_names_the_flag_and_the_step(tmp_path):
    line = one_error_line(sh(f"echo '{{\"unigrammodel\": {{}}}}' | {FIT}", tmp_path))
    assert line == (
        "error: stdin carries unigrammodel but this step needs a wordcounts: pipe in the step that makes one, "
        f"or pass the folder of a finished wordcounts with --counts-path (made by python {HELLO / 'count_words.py'})"
    )


# ---------------------------------------------------------------------------------------------
# The producer's git commit, and whether the code had uncommitted changes
# ---------------------------------------------------------------------------------------------


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def test_an_artifact_made_by_uncommitted_code_is_recorded_as_dirty(tmp_path):
    """The newcomer's path: edit the code, run a step, and the artifact says the commit is not all of it."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "src" / "nemotron", checkout / "src" / "nemotron",
                    ignore=shutil.ignore_patterns("__pycache__"))
    git("init", "-q", cwd=checkout)
    git("add", ".", cwd=checkout)
    git("commit", "-q", "-m", "code", cwd=checkout)
    head = git("rev-parse", "HEAD", cwd=checkout).strip()
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}

    def producer(out: str) -> dict:
        proc = sh(f"{COUNT} --output-dir {out}", tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr
        return json.loads((tmp_path / out / METADATA).read_text())["producer"]

    clean = producer("clean")
    assert (clean["git_commit"], clean["git_dirty"]) == (head, False)
    with open(checkout / "src" / "nemotron" / "errors.py", "a") as f:
        f.write("# a local change\n")
    dirty = producer("dirty")
    assert (dirty["git_commit"], dirty["git_dirty"]) == (head, True)


def test_git_revision_outside_a_checkout_is_unknown(tmp_path):
    assert git_revision(tmp_path) == (None, None)


# ---------------------------------------------------------------------------------------------
# The artifact command line
# ---------------------------------------------------------------------------------------------


def test_artifact_cli_help_exits_0_and_bad_use_exits_2(tmp_path):
    help_text = sh(f"{ARTIFACT_CLI} --help", tmp_path)
    assert help_text.returncode == 0 and "show" in help_text.stdout and "verify" in help_text.stdout
    assert sh(f"{ARTIFACT_CLI} verify --help", tmp_path).returncode == 0
    assert sh(f"{ARTIFACT_CLI}", tmp_path).returncode == 2
    assert sh(f"{ARTIFACT_CLI} verify", tmp_path).returncode == 2
    error = one_error_line(sh(f"{ARTIFACT_CLI} verify nowhere", tmp_path))
    assert error == "error: nowhere does not exist; check the path"


def test_import_nemotron_artifact_stays_light():
    """The artifact package (and its lineage helpers) import without torch, transformers or tyro."""
    code = ("import sys, nemotron.artifact, nemotron.artifact.lineage, nemotron.artifact.lock; "
            "print(sorted(m for m in ('torch', 'transformers', 'tyro') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def test_load_names_the_flag_it_was_given(tmp_path):
    from nemotron.artifact import Artifact

    class Checkpoint(Artifact):
        pass

    with pytest.raises(NemotronError, match=r"does not exist; pass the folder of a finished checkpoint with "
                                            r"--checkpoint-path$"):
        Checkpoint.load(path=tmp_path / "nope", flag="--checkpoint-path")
    with pytest.raises(NemotronError, match="no checkpoint given: pass the folder of a finished checkpoint "
                                            "with --base-checkpoint-path"):
        Checkpoint.load(stdin=False, flag="--base-checkpoint-path")
