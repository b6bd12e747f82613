"""The step conventions end to end: real shell pipes, lineage, and one-line errors."""

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, REPO

HELLO = REPO / "examples" / "hello_pipeline"
COUNT, FIT, REPORT = (f"{PYTHON} {HELLO / n}.py" for n in ("count_words", "fit_unigram", "report_perplexity"))


def sh(cmd: str, cwd: Path, stdin=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, shell=True, cwd=cwd, capture_output=True, text=True, stdin=stdin,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, pattern: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert pattern in lines[0], lines[0]


@pytest.mark.slow
def test_three_step_shell_pipe_records_lineage_back_to_the_source(tmp_path):
    proc = sh(f"{COUNT} --scale tiny | {FIT} --scale tiny | {REPORT}", tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # stdout is exactly one JSON document
    assert set(out) == {"wordcounts", "unigrammodel", "perplexityreport"}
    report = out["perplexityreport"]
    assert 50 < report["perplexity"] < 5000
    assert [i["type"] for i in report["inputs"]] == ["unigrammodel", "wordcounts"]

    lineage = sh(f"{PYTHON} -m nemotron.artifact lineage {report['path']}", tmp_path)
    assert lineage.returncode == 0
    assert [line.split()[0] for line in lineage.stdout.splitlines()][:4] == [
        "perplexityreport", "unigrammodel", "wordcounts", "source"]
    assert "hamlet_gut.txt" in lineage.stdout

    verify = sh(f"{PYTHON} -m nemotron.artifact verify {report['path']}", tmp_path)
    assert verify.returncode == 0, verify.stderr
    # Change a file behind the artifact's back: verify names it and fails.
    (Path(out["wordcounts"]["path"]) / "heldout.txt").write_text("tampered\n")
    verify = sh(f"{PYTHON} -m nemotron.artifact verify {report['path']}", tmp_path)
    assert verify.returncode == 1 and "word_counts: heldout.txt changed since" in verify.stderr  # names the file


@pytest.mark.slow
def test_stage_main_matches_the_pipe_and_is_deterministic(tmp_path):
    a = json.loads(sh(f"{PYTHON} {HELLO} --output-dir a", tmp_path).stdout)
    b = json.loads(sh(f"{PYTHON} {HELLO} --output-dir b", tmp_path).stdout)
    piped = json.loads(sh(f"{COUNT} | {FIT} | {REPORT}", tmp_path).stdout)
    for key in ("wordcounts", "unigrammodel", "perplexityreport"):
        assert a[key]["digest"] == b[key]["digest"] == piped[key]["digest"]


@pytest.mark.slow
def test_file_tracker_ledger_lists_every_artifact_in_order_and_resolves_references(tmp_path):
    env = {"NEMOTRON_TRACKER": f"file:{tmp_path / 'ledger.jsonl'}"}
    assert sh(f"{COUNT} | {FIT} | {REPORT}", tmp_path, env=env).returncode == 0
    ledger = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    assert [(e["event"], e["type"]) for e in ledger] == [
        ("save", "wordcounts"),
        ("use", "wordcounts"), ("save", "unigrammodel"),
        ("use", "unigrammodel"), ("use", "wordcounts"), ("save", "perplexityreport"),
    ]
    # A tracked reference instead of a path or a pipe.
    proc = sh(f"{FIT} --counts-artifact wordcounts:latest --output-dir u2", tmp_path, env=env,
              stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["unigrammodel"]["inputs"][0]["path"] == ledger[0]["path"]


@pytest.mark.slow
def test_garbage_and_empty_stdin(tmp_path):
    assert_one_line_error(sh(f"echo '{{oops' | {FIT}", tmp_path), "stdin is not artifact JSON")
    assert_one_line_error(sh(f"{FIT} < /dev/null", tmp_path), "stdin is empty")
    assert_one_line_error(sh(f"echo '[1, 2]' | {FIT}", tmp_path), "must be an object of artifacts")


@pytest.mark.slow
def test_stdin_from_a_terminal_with_no_path(tmp_path):
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [PYTHON, str(HELLO / "fit_unigram.py")], cwd=tmp_path, stdin=follower,
            capture_output=True, text=True, timeout=60,
        )
    finally:
        os.close(leader)
        os.close(follower)
    assert_one_line_error(proc, "stdin is a terminal")


@pytest.mark.slow
def test_wrong_type_on_stdin_and_unknown_scale(tmp_path):
    assert sh(f"{COUNT} | {FIT}", tmp_path).returncode == 0
    counts = tmp_path / "runs/hello/word_counts"
    assert_one_line_error(
        sh(f"{REPORT} --model-path {counts}", tmp_path, stdin=subprocess.DEVNULL),
        "type is 'wordcounts' but this step needs 'unigrammodel'",
    )
    assert_one_line_error(sh(f"{COUNT} --scale huge", tmp_path), "unknown scale 'huge'")
    assert not (tmp_path / "runs/hello/word_counts2").exists()


@pytest.mark.parametrize("edit,pattern", [
    (lambda m: m.update(num_words=0), "num_words: Input should be greater than 0"),
    (lambda m: m.update(schema_version=99), "newer than this nemotron understands"),
    (lambda m: m.update(counts_path="/nonexistent/counts.json"), "which does not exist"),
])
@pytest.mark.slow
def test_bad_artifact_on_disk_is_one_line(tmp_path, edit, pattern):
    assert sh(f"{COUNT}", tmp_path).returncode == 0
    meta_path = tmp_path / "runs/hello/word_counts/metadata.json"
    meta = json.loads(meta_path.read_text())
    edit(meta)
    meta_path.write_text(json.dumps(meta))
    proc = sh(f"{FIT} --counts-path runs/hello/word_counts", tmp_path, stdin=subprocess.DEVNULL)
    assert_one_line_error(proc, pattern)
    assert not (tmp_path / "runs/hello/unigram/metadata.json").exists()
