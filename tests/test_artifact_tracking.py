"""What `save()` records when a step does not say it: inputs, config, file checks, run facts.

A step written the plain way (no `inputs=`, no `config=`, plain `Path` fields) keeps the contract: every
artifact its process loaded is an input of what it saves, the Config `cli.run` parsed is its config, a
`Path` field naming nothing is refused in one line, and a field edited in metadata.json fails `verify`.
"""

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from nemotron.artifact import METADATA, Artifact, Producer
from nemotron.artifact.provenance import run_facts
from nemotron.cli import run
from nemotron.errors import NemotronError


class Notes(Artifact):
    notes_path: Path  # a plain Path: checked, hashed and relocated as an ArtifactPath is
    lines: int


class Summary(Artifact):
    summary_path: Path | None = None
    words: int = 0


def notes(folder: Path, text: str = "a b\nc\n") -> Notes:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text(text)
    return Notes(path=folder, notes_path=folder / "notes.txt", lines=text.count("\n")).save()


def test_what_the_process_loaded_is_an_input_unless_the_step_says_otherwise(tmp_path):
    first, second = notes(tmp_path / "first"), notes(tmp_path / "second", "other\n")
    Notes.load(path=first.path)
    Notes.load(path=second.path)
    made = Summary(path=tmp_path / "summary", words=3).save()
    assert [(i.type, i.digest) for i in made.inputs] == [("notes", first.digest), ("notes", second.digest)]
    assert Summary(path=tmp_path / "explicit", inputs=[second]).save().inputs == [second.ref()]
    assert Summary(path=tmp_path / "none", inputs=[]).save().inputs == []
    # An artifact is never its own input: a step that read its previous output before rewriting it.
    again = Notes(path=first.path, notes_path=first.notes_path, lines=9).save()
    assert [i.path for i in again.inputs] == [str(second.path)]
    # Recorded in metadata.json, so lineage sees it.
    saved = json.loads((made.path / METADATA).read_text())
    assert [i["path"] for i in saved["inputs"]] == ["../first", "../second"]


@dataclass
class Config:
    output_dir: Path = Path("out")
    words: int = 2
    """How many words."""
    scale: str = "tiny"
    seed: int = 0


def summarize(config: Config) -> Summary:
    return Summary(path=config.output_dir, words=config.words).save()


def test_a_step_run_by_cli_run_records_its_config(tmp_path, capsys):
    run(summarize, ["--output-dir", str(tmp_path / "s"), "--words", "5"])
    printed = json.loads(capsys.readouterr().out)["summary"]
    assert printed["config"] == {"output_dir": str(tmp_path / "s"), "words": 5, "scale": "tiny", "seed": 0}
    assert printed["producer"]["command"] == shlex.join(["python", *sys.orig_argv[1:]])  # as typed: this process
    # An explicit config wins.
    assert Summary(path=tmp_path / "x", config={"mine": 1}).save().config == {"mine": 1}


def test_a_path_field_naming_nothing_is_saved_recorded_missing_with_one_warning_naming_the_field(tmp_path, capsys):
    (tmp_path / "n").mkdir()
    saved = Notes(path=tmp_path / "n", notes_path=tmp_path / "n" / "missing.txt", lines=1).save()
    [warning] = capsys.readouterr().err.splitlines()
    assert warning.startswith("warning: Notes.notes_path is ") and "missing.txt, which does not exist" in warning
    assert saved.missing_files == ["notes_path"] and saved.file_hashes == {}
    assert json.loads((tmp_path / "n" / METADATA).read_text())["missing_files"] == ["notes_path"]
    summary = Summary(path=tmp_path / "optional").save()
    assert summary.summary_path is None and summary.missing_files is None  # None is not a file


def test_a_plain_path_field_is_hashed_and_relocated(tmp_path):
    made = notes(tmp_path / "n")
    assert json.loads((made.path / METADATA).read_text())["notes_path"] == "./notes.txt"
    assert made.file_hashes == {"notes.txt": made.file_hashes["notes.txt"]}
    (made.notes_path).write_text("changed\n")
    with pytest.raises(NemotronError, match=r"n: notes.txt changed since the step saved it"):
        Notes.from_path(made.path).verify()


def test_verify_fails_on_a_typed_field_edited_in_metadata(tmp_path):
    made = notes(tmp_path / "n")
    meta = made.path / METADATA
    data = json.loads(meta.read_text())
    data["lines"] = 7
    meta.write_text(json.dumps(data))
    with pytest.raises(NemotronError, match="a field of metadata.json was edited"):
        Notes.from_path(made.path).verify()


def test_metadata_written_before_the_new_fields_still_loads(tmp_path):
    made = notes(tmp_path / "n")
    meta = made.path / METADATA
    data = json.loads(meta.read_text())
    del data["file_hashes"]
    for key in ("command", "python_version", "torch_version", "num_threads", "device"):
        del data["producer"][key]
    meta.write_text(json.dumps(data))
    old = Notes.from_path(made.path)
    assert old.file_hashes is None and old.producer.command is None and old.producer.step


def test_the_run_facts_read_torch_only_when_the_step_imported_it():
    import torch

    facts = run_facts()
    assert facts["torch_version"] == torch.__version__ and facts["num_threads"] == torch.get_num_threads()
    assert facts["device"] == "cpu" and facts["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert Producer(step="s", **facts).num_threads == torch.get_num_threads()
