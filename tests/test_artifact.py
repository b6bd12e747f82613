"""The artifact contract: validation, atomic saves, digests, loading from path and stdin."""

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from pydantic import Field

from conftest import PYTHON
from nemotron.artifact import (
    METADATA,
    SCHEMA_VERSION,
    Artifact,
    ArtifactPath,
    apply_scale,
    print_complete,
)
from nemotron.errors import NemotronError


class Dataset(Artifact):
    data_file: ArtifactPath
    num_examples: int = Field(gt=0)


def make_dataset(folder: Path, text: str = "hello\n", **config) -> Dataset:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.txt").write_text(text)
    return Dataset(
        path=folder,
        config={"vocab": 10, **config},
        data_file=folder / "data.txt",
        num_examples=1,
        metrics={"wall_seconds": 1.23},
    ).save(step="test")


@pytest.mark.parametrize(
    "scale,n,expected",
    [("tiny", 1000, 10), ("tiny", 10**9, 10_000), ("small", 1000, 100), ("medium", 1000, 300),
     ("full", 1000, 1000), ("tiny", 5, 1)],
)
def test_apply_scale(scale, n, expected):
    assert apply_scale(n, scale) == expected


def test_apply_scale_unknown_lists_valid_scales():
    with pytest.raises(NemotronError, match="tiny, small, medium, full"):
        apply_scale(10, "huge")


def test_save_load_roundtrip_records_producer_and_digest(tmp_path):
    art = make_dataset(tmp_path / "ds")
    meta = json.loads((tmp_path / "ds" / METADATA).read_text())
    assert meta["type"] == "dataset" and meta["schema_version"] == SCHEMA_VERSION
    assert meta["producer"]["step"] == "test" and meta["producer"]["version"]
    assert meta["producer"]["artifact_class"].endswith(":Dataset")
    loaded = Dataset.from_path(tmp_path / "ds")
    assert loaded.digest == art.digest == art.compute_digest()
    assert loaded.data_file.is_absolute()


def test_digest_ignores_locations_and_time_but_not_content_or_config(tmp_path):
    a = make_dataset(tmp_path / "a", output_dir=str(tmp_path / "a"))
    b = make_dataset(tmp_path / "b", output_dir=str(tmp_path / "b"))
    assert a.digest == b.digest  # same content + config, other folder
    assert make_dataset(tmp_path / "c", text="other\n").digest != a.digest
    assert make_dataset(tmp_path / "d", seed_words=3).digest != a.digest


def test_lineage_is_recorded_on_the_consumer(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "w.bin").write_bytes(b"\0" * 8)

    class Checkpoint(Artifact):
        weights: ArtifactPath

    ck = Checkpoint(path=tmp_path / "ck", inputs=[ds], weights=tmp_path / "ck" / "w.bin").save()
    assert ck.inputs[0].type == "dataset"
    assert ck.inputs[0].digest == ds.digest and Path(ck.inputs[0].path) == ds.path


def test_invalid_field_value_is_one_clear_error(tmp_path):
    make_dataset(tmp_path / "ds")
    meta = tmp_path / "ds" / METADATA
    meta.write_text(meta.read_text().replace('"num_examples": 1', '"num_examples": 0'))
    with pytest.raises(NemotronError, match="num_examples: Input should be greater than 0"):
        Dataset.from_path(tmp_path / "ds")


def test_newer_schema_version_is_refused_with_the_fix(tmp_path):
    make_dataset(tmp_path / "ds")
    meta = tmp_path / "ds" / METADATA
    data = json.loads(meta.read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    meta.write_text(json.dumps(data))
    with pytest.raises(NemotronError, match="newer than this nemotron understands.*upgrade"):
        Dataset.from_path(tmp_path / "ds")


def test_a_file_gone_since_save_fails_at_load_and_one_never_written_is_saved_recorded_missing(tmp_path, capsys):
    make_dataset(tmp_path / "ds")
    (tmp_path / "ds" / "data.txt").unlink()
    with pytest.raises(NemotronError, match="data.txt, which does not exist"):
        Dataset.from_path(tmp_path / "ds")
    saved = Dataset(path=tmp_path / "x", data_file=tmp_path / "nope.txt", num_examples=1).save()
    assert saved.missing_files == ["data_file"] and saved.file_hashes == {}
    assert capsys.readouterr().err.startswith("warning: Dataset.data_file is ")
    assert Dataset.from_path(tmp_path / "x").missing_files == ["data_file"]  # loads: nothing vanished since


def test_wrong_type_and_malformed_json(tmp_path):
    make_dataset(tmp_path / "ds")

    class Checkpoint(Artifact):
        pass

    with pytest.raises(NemotronError, match="type is 'dataset' but this step needs 'checkpoint'"):
        Checkpoint.from_path(tmp_path / "ds")
    (tmp_path / "ds" / METADATA).write_text("{not json")
    with pytest.raises(NemotronError, match="malformed JSON at line 1"):
        Dataset.from_path(tmp_path / "ds")


def test_scale_mismatch_is_refused(tmp_path):
    make_dataset(tmp_path / "ds")
    with pytest.raises(NemotronError, match="made at scale 'tiny' but this run is 'small'"):
        Dataset.load(path=tmp_path / "ds", scale="small")


@pytest.mark.slow
def test_save_killed_before_rename_leaves_no_metadata(tmp_path):
    """A real SIGKILL between writing the temp file and the rename: no metadata.json appears."""
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from nemotron.artifact import Artifact, ArtifactPath
        class Dataset(Artifact):
            data_file: ArtifactPath
        folder = Path({str(tmp_path / "ds")!r}); folder.mkdir()
        (folder / "data.txt").write_text("x")
        os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # die right before the rename
        Dataset(path=folder, data_file=folder / "data.txt").save()
    """)
    proc = subprocess.run([PYTHON, "-c", script], capture_output=True)
    assert proc.returncode == -9
    assert not (tmp_path / "ds" / METADATA).exists()
    with pytest.raises(NemotronError, match="metadata.json missing"):
        Dataset.from_path(tmp_path / "ds")


def test_print_complete_passes_stdin_artifacts_through(tmp_path, capsys):
    import nemotron.artifact.pipe as pipe

    ds = make_dataset(tmp_path / "ds")
    pipe._STDIN = {"upstream": {"type": "upstream", "path": "/x"}}
    print_complete({"dataset": ds})
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert set(out) == {"upstream", "dataset"} and out["dataset"]["digest"] == ds.digest
    assert "dataset" in captured.err and captured.out.count("\n") == 1


def pipe_in(monkeypatch, artifacts: dict) -> None:
    """What a previous step printed, as this process's stdin (read once, like a real pipe)."""
    import io
    import sys

    payload = {key: json.loads(art.model_dump_json()) for key, art in artifacts.items()}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(payload)))


def test_stdin_input_is_found_by_its_type_whatever_the_key(tmp_path, monkeypatch):
    ds = make_dataset(tmp_path / "ds")
    pipe_in(monkeypatch, {"data_curation": ds})  # keyed by the step's name, as the design writes it
    assert Dataset.load().digest == ds.digest


def test_two_different_stdin_artifacts_of_one_type_are_refused_naming_both_keys(tmp_path, monkeypatch):
    pipe_in(monkeypatch, {"first": make_dataset(tmp_path / "a"), "second": make_dataset(tmp_path / "b", "x\n")})
    with pytest.raises(NemotronError, match=r"2 different dataset artifacts \(keys 'first' and 'second'\)"):
        Dataset.load(flag="--dataset-path")


def test_one_artifact_under_two_stdin_keys_is_not_ambiguous(tmp_path, monkeypatch):
    ds = make_dataset(tmp_path / "ds")
    pipe_in(monkeypatch, {"data_curation": ds, "dataset": ds})
    assert Dataset.load().path == ds.path


def test_missing_stdin_type_names_what_stdin_carries(tmp_path, monkeypatch):
    class Checkpoint(Artifact):
        pass

    pipe_in(monkeypatch, {"data_curation": make_dataset(tmp_path / "ds")})
    with pytest.raises(NemotronError, match=r"stdin carries data_curation \(a dataset\) but this step needs a chec"):
        Checkpoint.load()


def test_reuse_returns_a_finished_step_only_when_config_and_files_match(tmp_path):
    from dataclasses import dataclass

    @dataclass
    class Config:
        output_dir: Path
        vocab: int = 10

    cfg = Config(output_dir=tmp_path / "ds")
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "data.txt").write_text("hello\n")
    saved = Dataset(path=cfg.output_dir, config={"output_dir": str(cfg.output_dir), "vocab": 10},
                    data_file=tmp_path / "ds" / "data.txt", num_examples=1).save()
    assert Dataset.reuse(cfg).digest == saved.digest
    assert Dataset.reuse(Config(output_dir=cfg.output_dir, vocab=11)) is None  # config changed
    (tmp_path / "ds" / "data.txt").write_text("tampered\n")
    assert Dataset.reuse(cfg) is None  # files changed behind its back
    assert Dataset.reuse(Config(output_dir=tmp_path / "never-run")) is None


def test_reuse_refuses_an_output_made_from_an_older_input(tmp_path):
    from dataclasses import dataclass

    @dataclass
    class Config:
        output_dir: Path

    class Report(Artifact):
        pass

    old_input = make_dataset(tmp_path / "in", text="v1\n")
    Report(path=tmp_path / "report", config={"output_dir": str(tmp_path / "report")},
           inputs=[old_input]).save()
    cfg = Config(output_dir=tmp_path / "report")
    assert Report.reuse(cfg, inputs=[old_input]) is not None
    new_input = make_dataset(tmp_path / "in", text="v2\n")
    assert Report.reuse(cfg, inputs=[new_input]) is None


def test_an_upstream_input_comes_from_its_flag_else_the_pipe_else_the_lineage(tmp_path, monkeypatch):
    """An evaluation step's second input (`--<name>-path`): the flag wins; given the checkpoint by path the
    step never reads stdin (it would wait on a terminal) and takes the recorded input; in a pipe, the pipe's."""
    from dataclasses import dataclass

    import nemotron.artifact.pipe as pipe
    from nemotron.artifact.upstream import load_upstream_input
    from nemotron.evaluation.settings import EvaluationSettings

    @dataclass
    class Config(EvaluationSettings):
        base_dataset_path: Path | None = None
        base_dataset_artifact: str | None = None

    class Checkpoint(Artifact):
        pass

    recorded, explicit, piped = (make_dataset(tmp_path / n, f"{n}\n") for n in ("recorded", "explicit", "piped"))
    (tmp_path / "ck").mkdir()
    checkpoint = Checkpoint(path=tmp_path / "ck", inputs=[recorded]).save()
    pipe_in(monkeypatch, {"data_curation": piped})

    def found(config: Config) -> Path:
        return load_upstream_input(Dataset, config, "base_dataset", made_from=[checkpoint]).path

    by_path = Config(checkpoint_path=checkpoint.path)
    assert found(Config(checkpoint_path=checkpoint.path, base_dataset_path=explicit.path)) == explicit.path
    assert found(by_path) == recorded.path and pipe._STDIN is None  # stdin never read
    assert found(Config()) == piped.path
    (tmp_path / "bare").mkdir()
    bare = Checkpoint(path=tmp_path / "bare", inputs=[]).save()  # explicit: this process loaded datasets above
    with pytest.raises(NemotronError, match="none recorded in the inputs of .*bare; pass its folder with --base-data"):
        load_upstream_input(Dataset, by_path, "base_dataset", made_from=[bare])
