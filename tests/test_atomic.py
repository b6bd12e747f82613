"""Atomic writes: all or nothing, nothing left behind, and permissions that honour the umask."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHON, REPO
from nemotron import atomic


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_and_folders_are_readable_by_others_under_umask_022(tmp_path, umask_022):
    text = atomic.write_text(tmp_path / "a.json", "{}\n")
    data = atomic.write_bytes(tmp_path / "b.bin", b"\0\1")
    with atomic.output_path(tmp_path / "c.parquet") as temp:
        temp.write_bytes(b"x")
    with atomic.output_folder(tmp_path / "model") as staging:
        (staging / "config.json").write_text("{}")
    assert [mode(p) for p in (text, data, tmp_path / "c.parquet")] == [0o644] * 3
    assert mode(tmp_path / "model") == 0o755 and mode(tmp_path / "model" / "config.json") == 0o644
    assert text.read_text() == "{}\n" and data.read_bytes() == b"\0\1"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    atomic.write_text(tmp_path / "log.jsonl", "old\n")
    with pytest.raises(RuntimeError):
        with atomic.output_file(tmp_path / "log.jsonl") as stream:
            stream.write("half of the new")
            raise RuntimeError("killed mid-write")
    assert (tmp_path / "log.jsonl").read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"]


def test_a_folder_is_swapped_in_whole_or_not_at_all(tmp_path):
    with atomic.output_folder(tmp_path / "tok") as staging:
        (staging / "old.json").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic.output_folder(tmp_path / "tok") as staging:
            (staging / "new.json").write_text("2")
            raise RuntimeError("failed before the folder was complete")
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["old.json"]
    with atomic.output_folder(tmp_path / "tok") as staging:
        (staging / "new.json").write_text("2")
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["new.json"]  # replaced, not merged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]  # no staging or retired folders


@pytest.mark.skipif(sys.platform != "linux", reason="renameat2 RENAME_EXCHANGE is Linux's")
def test_two_folders_are_exchanged_in_one_step_so_the_name_never_goes_missing(tmp_path):
    """A reader (or a kill) between the steps of a folder swap finds the old folder or the new one."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "which").write_text(name)
    assert atomic.exchange_folders(tmp_path / "a", tmp_path / "b")
    assert [(tmp_path / n / "which").read_text() for n in ("a", "b")] == ["b", "a"]
    with pytest.raises(FileNotFoundError):
        atomic.exchange_folders(tmp_path / "a", tmp_path / "missing")


def test_a_real_step_writes_its_artifact_readable_by_group_and_others(tmp_path):
    """issue 14: artifacts, reports and metrics were 0600 (the temp-file default) instead of the umask's."""
    step = REPO / "examples" / "hello_pipeline" / "count_words.py"
    proc = subprocess.run(f"umask 022 && {PYTHON} {step} --output-dir out", shell=True, cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    files = [p for p in (tmp_path / "out").iterdir() if p.name != ".lock"]
    assert {p.name for p in files} == {"metadata.json", "counts.json", "heldout.txt"}
    assert {p.name: mode(p) for p in files} == {p.name: 0o644 for p in files}
