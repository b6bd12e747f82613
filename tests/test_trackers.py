"""Trackers: the W&B tracker in offline mode, the file ledger, selection from the environment."""

import os

import pytest

from nemotron.artifact import Artifact, ArtifactPath
from nemotron.errors import NemotronError
from nemotron.trackers import (
    FileTracker,
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
    assert Shard.load(reference="shard:v0").digest == first.digest


def test_tracker_from_environment(tmp_path, monkeypatch):
    assert isinstance(tracker_from_env("none"), NoOpTracker)
    assert isinstance(tracker_from_env(f"file:{tmp_path / 'l.jsonl'}"), FileTracker)
    with pytest.raises(NemotronError, match="use none, file:PATH or wandb"):
        tracker_from_env("mlflow")
    monkeypatch.setenv("NEMOTRON_TRACKER", f"file:{tmp_path / 'env.jsonl'}")
    assert isinstance(get_lineage_tracker(), FileTracker)


def test_noop_tracker_cannot_resolve_references():
    with pytest.raises(NemotronError, match="no tracker is active"):
        Shard.load(reference="shard:latest")
