"""Trackers: the W&B tracker in offline mode, the file ledger, selection from the environment."""

import pytest

import nemotron.trackers as trackers
import wandb_records  # tests/ is on sys.path under pytest
from nemotron.artifact import Artifact, ArtifactPath
from nemotron.data_prep.progress import LiveProgress
from nemotron.errors import NemotronError
from nemotron.trackers import (
    FileTracker,
    FollowerTracker,
    NoOpTracker,
    WandbTracker,
    get_lineage_tracker,
    set_lineage_tracker,
    tracker_from_env,
)


class Shard(Artifact):
    data: ArtifactPath


def saved_shard(folder, text="tokens"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "shard.bin").write_text(text)
    return Shard(path=folder, data=folder / "shard.bin", metrics={"tokens": 6}).save(step="test")


def test_wandb_offline_creates_run_directory_and_logs_the_artifact(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)
    tracker = set_lineage_tracker(WandbTracker(project="nemotron-test", run_dir=tmp_path))
    shard = saved_shard(tmp_path / "shard")
    tracker.log_metrics({"loss": 2.5}, step=1)
    tracker.finish()
    assert shard.producer.run_id == tracker.run_id != "local"
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    log = (runs[0] / f"run-{tracker.run_id}.wandb").read_bytes()
    # The offline run log holds the artifact record: its name and its content digest.
    assert b"shard" in log and shard.digest.encode() in log


def test_file_tracker_resolves_versions(tmp_path):
    tracker = set_lineage_tracker(FileTracker(tmp_path / "ledger.jsonl"))
    first = saved_shard(tmp_path / "a", "one")
    second = saved_shard(tmp_path / "b", "two")
    assert tracker.resolve("shard") == tracker.resolve("shard:latest") == second.path
    assert tracker.resolve("shard:v0") == first.path
    with pytest.raises(NemotronError, match="no version 'v7'"):
        tracker.resolve("shard:v7")
    with pytest.raises(NemotronError, match="no saved artifact of type 'checkpoint'"):
        tracker.resolve("checkpoint:latest")
    assert Shard.load(tracked_artifact="shard:v0").digest == first.digest


def test_tracker_from_environment(tmp_path, monkeypatch):
    assert isinstance(tracker_from_env("none"), NoOpTracker)
    assert isinstance(tracker_from_env(f"file:{tmp_path / 'l.jsonl'}"), FileTracker)
    with pytest.raises(NemotronError, match="use none, file:PATH or wandb"):
        tracker_from_env("mlflow")
    monkeypatch.setenv("NEMOTRON_TRACKER", f"file:{tmp_path / 'env.jsonl'}")
    assert isinstance(get_lineage_tracker(), FileTracker)


def test_noop_tracker_cannot_resolve_references():
    with pytest.raises(NemotronError, match="no tracker is active"):
        Shard.load(tracked_artifact="shard:latest")


# ---------------------------------------------------------------------------------------------
# torchrun: only rank 0 talks to the tracker
# ---------------------------------------------------------------------------------------------


def test_ranks_other_than_0_record_nothing_but_resolve_from_the_ledger(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("NEMOTRON_TRACKER", f"file:{ledger}")
    first = saved_shard(tmp_path / "a")  # rank 0 (RANK unset): recorded
    trackers._ACTIVE = None
    monkeypatch.setenv("RANK", "1")
    assert isinstance(get_lineage_tracker(), FollowerTracker)
    saved_shard(tmp_path / "b")
    assert Shard.load(tracked_artifact="shard:latest").path == first.path
    assert [e["event"] for e in FileTracker(ledger).entries()] == ["save"]


# Two processes under torchrun write one ledger line per artifact event (every rank loads the dataset, only
# rank 0 tells the tracker): checked on the 2-rank stage-0 training that
# tests/test_nano2_stage0_training.py::test_two_processes_under_torchrun_train_like_one_with_the_same_global_batch
# runs anyway, with NEMOTRON_TRACKER set to a file ledger.


def test_wandb_live_progress_rows_never_make_training_steps_be_dropped(tmp_path, monkeypatch):
    # A recipe runs data prep and then training in one process, so one W&B run: data prep's live rows
    # come first, training's steps 0, 1, 2 after; every row must arrive, each against its own x-axis.
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = set_lineage_tracker(WandbTracker(project="nemotron-test", run_dir=tmp_path))
    try:
        progress = LiveProgress("data_prep/abc", total=3, enabled=False, interval=0.0)
        for _ in range(3):
            progress.advance(counts={"read/bytes": 1000, "filter/removed: too short": 1})
        progress.close()
        for step in range(3):
            tracker.log_metrics({"loss": 3.0 - step}, step=step)
    finally:
        tracker.finish()
        set_lineage_tracker(NoOpTracker())
    rows = wandb_records.history(tmp_path)
    live = [row for row in rows if "data_prep/abc/items_done" in row]
    assert [row["data_prep/abc/items_done"] for row in live] == [1, 2, 3]  # one row per report, while it ran
    assert [row["data_prep/abc/read/bytes"] for row in live] == [1000, 2000, 3000]
    assert live[-1]["data_prep/abc/filter/removed: too short"] == 3 and live[-1]["data_prep/abc/items_total"] == 3
    assert [(row["step"], row["loss"]) for row in rows if "loss" in row] == [(0, 3.0), (1, 2.0), (2, 1.0)]
    axes = wandb_records.step_metrics(tmp_path)
    assert axes["loss"] == "step" and axes["data_prep/abc/read/bytes"] == "data_prep/abc/items_done"
