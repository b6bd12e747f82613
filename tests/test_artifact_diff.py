"""`python -m nemotron.artifact diff A B`: what differs between two artifacts or two runs, kept apart, and
the first step at which their lineages part. Unit tests on artifacts saved here with the real Artifact
class; the slow test diffs two real stage-0 runs that differ in one data-curation setting."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builders import write_plays_blend  # tests/ is on sys.path under pytest
from nemotron.artifact import METADATA, Artifact, ArtifactPath, source_ref
from nemotron.artifact.diff import diff_paths, render
from nemotron.errors import NemotronError

PY = sys.executable


class Shards(Artifact):
    shards: ArtifactPath
    documents: int


class Model(Artifact):
    weights: ArtifactPath
    training_loss: float


def make_shards(folder: Path, config: dict, texts: list[str], documents: int = 3) -> Shards:
    (folder / "shards").mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (folder / "shards" / f"{i:02d}.bin").write_text(text)
    return Shards(path=folder, config={"output_dir": str(folder), **config}, shards=folder / "shards",
                  documents=documents, metrics={"kept": documents, "wall_seconds": 1.0}).save(step="curate")


def make_model(folder: Path, data: Shards, weights: str, loss: float, config: dict | None = None) -> Model:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "weights.pt").write_text(weights)
    return Model(path=folder, config={"steps": 4, "output_dir": str(folder), "data_path": str(data.path),
                                      **(config or {})},
                 inputs=[data], weights=folder / "weights.pt", training_loss=loss,
                 metrics={"training_loss": loss, "tokens": 100}).save(step="train")


def make_run(root: Path, shards: dict, texts: list[str], weights: str, loss: float) -> Path:
    data = make_shards(root / "stage0" / "data", shards, texts)
    make_model(root / "stage0" / "train", data, weights, loss)
    return root


def edit_metadata(folder: Path, **producer) -> None:
    """Producer facts written as a newer nemotron records them (they are outside the digest)."""
    meta = json.loads((folder / METADATA).read_text())
    meta["producer"].update(producer)
    (folder / METADATA).write_text(json.dumps(meta, indent=2))


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "nemotron.artifact", "diff", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_the_same_artifact_made_in_two_folders_is_identical_and_only_its_locations_move(tmp_path):
    # Each folder's own files and output_dir are compared as seen from the folder ("./shards"); a path
    # outside the tree stays absolute, and is where, not what.
    a = make_shards(tmp_path / "a", {"num_shards": 2, "cache": {"hub_dir": "/data/one"}}, ["x", "y"])
    b = make_shards(tmp_path / "b", {"num_shards": 2, "cache": {"hub_dir": "/data/two"}}, ["x", "y"])
    report = diff_paths(a.path, b.path)
    assert report["identical"] and report["first_difference"] is None
    (pair,) = report["artifacts"]
    assert pair["config"] == [] and pair["content"]["data_identical"]
    assert [(c["key"], c["a"], c["b"]) for c in pair["locations"]] == [("cache.hub_dir", "/data/one", "/data/two")]
    assert "identical: 1 artifact, same digests" in "\n".join(render(report))


def test_a_changed_setting_that_removed_nothing_is_a_config_difference_with_identical_data(tmp_path):
    # Near-duplicate thresholds 0.3 and 0.1 that removed no document: same shards, other digests.
    a = make_shards(tmp_path / "a", {"threshold": 0.3, "synthetic": {"weight": 0.1}}, ["x", "y"])
    b = make_shards(tmp_path / "b", {"threshold": 0.1, "synthetic": {"weight": 0.2}}, ["x", "y"])
    report = diff_paths(a.path, b.path)
    assert not report["identical"] and a.digest != b.digest
    (pair,) = report["artifacts"]
    assert [(c["key"], c["a"], c["b"]) for c in pair["config"]] == [("synthetic.weight", 0.1, 0.2),
                                                                     ("threshold", 0.3, 0.1)]
    assert pair["content"]["data_identical"] and pair["content"]["differing_files"] == []
    assert report["first_difference"]["reason"] == "synthetic.weight 0.1 -> 0.2; threshold 0.3 -> 0.1"
    text = "\n".join(render(report))
    assert "data identical (2 files)" in text and "2 config fields differ, data identical" in text


def test_files_typed_fields_and_metrics_differences_are_reported_apart_with_deltas(tmp_path):
    a = make_model(tmp_path / "a", make_shards(tmp_path / "d", {}, ["x"]), "w1", 2.5)
    b = make_model(tmp_path / "b", make_shards(tmp_path / "d", {}, ["x"]), "w2", 2.0)
    (pair,) = [p for p in diff_paths(a.path, b.path)["artifacts"] if p["a"] == str(a.path)]
    # a typed field is what was made: apart from the config (the same) and from the metrics
    assert pair["differs"] and pair["config"] == []
    assert [(c["key"], c["a"], c["b"], c["delta"]) for c in pair["fields"]] == [("training_loss", 2.5, 2.0, -0.5)]
    assert [(f["name"], f["a"] is not None, f["b"] is not None) for f in pair["content"]["differing_files"]] == \
        [("weights.pt", True, True)]
    assert {c["key"]: c["delta"] for c in pair["metrics"]} == {"training_loss": -0.5}
    assert pair["locations"] == []  # the same dataset (../d) and files (./weights.pt), seen from each folder
    assert pair["summary"] == "same config, 1 typed field differs, 1 of 1 files differ"


def test_same_config_other_thread_count_is_said_and_does_not_make_two_artifacts_differ(tmp_path):
    a = make_shards(tmp_path / "a", {"num_shards": 2}, ["x"])
    b = make_shards(tmp_path / "b", {"num_shards": 2}, ["x"])
    edit_metadata(a.path, num_threads=2, torch_version="2.13.0", command="python -m curate")
    edit_metadata(b.path, num_threads=1, torch_version="2.13.0", command="python -m curate")
    report = diff_paths(a.path, b.path)
    assert report["identical"]
    assert report["artifacts"][0]["summary"] == "same config, data identical, other thread count (2 -> 1)"
    assert "other thread count (2 -> 1)" in "\n".join(render(report))


def test_two_runs_pair_by_folder_and_name_the_most_upstream_step_that_differs(tmp_path):
    a = make_run(tmp_path / "A", {"num_shards": 4}, ["ab", "cd"], "w", 2.0)
    b = make_run(tmp_path / "B", {"num_shards": 8}, ["a", "b", "c", "d"], "w", 2.0)
    (b / "extra").mkdir()
    make_shards(b / "extra", {}, ["z"])
    report = diff_paths(a, b)
    assert report["mode"] == "runs" and not report["identical"]
    assert [p["name"] for p in report["artifacts"]] == ["stage0/data", "stage0/train"]  # inputs first
    assert report["only_in_b"] == ["extra"] and report["only_in_a"] == []
    assert report["first_difference"]["name"] == "stage0/data"
    assert report["first_difference"]["reason"] == "num_shards 4 -> 8"
    train = report["artifacts"][1]
    # same weights bytes, but trained on other data: the input's digest is what differs
    assert train["differs"] and train["content"]["data_identical"] and train["inputs"][0]["type"] == "shards"
    assert render(report)[2] == "first difference: stage0/data: num_shards 4 -> 8"
    # Two artifacts: the same answer by following their inputs upstream.
    by_lineage = diff_paths(a / "stage0" / "train", b / "stage0" / "train")
    assert by_lineage["mode"] == "artifacts"
    assert by_lineage["first_difference"]["name"] == "data"
    assert by_lineage["first_difference"]["reason"] == "num_shards 4 -> 8"


def test_an_upstream_step_whose_config_is_the_same_but_whose_files_differ_is_named_by_its_content(tmp_path):
    a = make_run(tmp_path / "A", {"num_shards": 4}, ["ab"], "w", 2.0)
    b = make_run(tmp_path / "B", {"num_shards": 4}, ["ax"], "w", 2.0)
    first = diff_paths(a, b)["first_difference"]
    assert first["name"] == "stage0/data"
    assert first["reason"] == "same config, other content, 1 of 1 files differ"


def test_a_raw_source_that_changed_under_the_same_config_is_named_as_the_cause(tmp_path):
    for run, text in (("A", "to be"), ("B", "not to be")):
        (tmp_path / run).mkdir()
        (tmp_path / run / "corpus.txt").write_text(text)
        (tmp_path / run / "data" / "shards").mkdir(parents=True)
        (tmp_path / run / "data" / "shards" / "0.bin").write_text(text)
        Shards(path=tmp_path / run / "data", shards=tmp_path / run / "data" / "shards", documents=1,
               inputs=[source_ref(tmp_path / run / "corpus.txt")]).save(step="curate")
    first = diff_paths(tmp_path / "A", tmp_path / "B")["first_difference"]
    assert first["name"] == "data"
    assert first["reason"].startswith(f"input source {tmp_path / 'A' / 'corpus.txt'} changed (")


def test_the_command_line_exit_codes_json_and_one_error_line(tmp_path):
    a = make_run(tmp_path / "A", {"num_shards": 4}, ["ab"], "w", 2.0)
    b = make_run(tmp_path / "B", {"num_shards": 8}, ["ab"], "w", 2.0)
    same = make_run(tmp_path / "C", {"num_shards": 4}, ["ab"], "w", 2.0)
    differ = cli(a, b)
    assert differ.returncode == 1, differ.stderr
    assert "first difference: stage0/data: num_shards 4 -> 8" in differ.stdout.splitlines()
    as_json = cli(a, b, "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout) == diff_paths(a, b)
    assert cli(a, same).returncode == 0
    for bad in ([a, tmp_path / "missing"], [a, a / "stage0" / "data"], [a, tmp_path / "A" / "stage0" / "nothing"]):
        if bad[1].name == "nothing":
            bad[1].mkdir()
        done = cli(*bad)
        assert done.returncode == 2 and done.stdout == ""
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: ")
    with pytest.raises(NemotronError, match="holds no artifact folder"):
        diff_paths(a, tmp_path / "A" / "stage0" / "nothing")


# ------------------------------------------------------------------ two real stage-0 runs

STAGE = "nemotron.recipes.nano2.stage0_pretrain"


@pytest.mark.slow
def test_two_stage0_runs_that_differ_in_one_curation_setting_part_at_data_curation(tmp_path):
    write_plays_blend(tmp_path, {"hamlet", "macbeth"}, [0.8, 0.2, 0.0])
    for run, shards in (("A", 4), ("B", 8)):
        pipe = (f"{PY} -m {STAGE}.data_curation --blend-path blend.json --vocab-size 512 --num-shards {shards}"
                f" --output-dir {run}/stage0_pretrain/data_curation"
                f" | {PY} -m {STAGE}.training --steps 3 --seq-len 64 --micro-batch-size 4 --eval-every 3"
                f" --checkpoint-every 3 --output-dir {run}/stage0_pretrain/training")
        done = subprocess.run(pipe, shell=True, cwd=tmp_path, capture_output=True, text=True, executable="/bin/bash",
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 0, done.stderr[-3000:]
    done = cli(tmp_path / "A", tmp_path / "B")
    assert done.returncode == 1, done.stderr
    assert "first difference: stage0_pretrain/data_curation: num_shards 4 -> 8" in done.stdout.splitlines()
    report = json.loads(cli(tmp_path / "A", tmp_path / "B", "--json").stdout)
    curation, training = report["artifacts"]
    assert [c["key"] for c in curation["config"]] == ["num_shards"]
    assert curation["content"]["differing_files"]  # other shard files
    assert training["inputs"][0]["type"] == "pretraindataset"
    # The two checkpoints alone: their lineages followed upstream give the same first difference.
    by_lineage = diff_paths(tmp_path / "A" / "stage0_pretrain" / "training",
                            tmp_path / "B" / "stage0_pretrain" / "training")
    assert by_lineage["first_difference"]["name"] == "data_curation"
    assert by_lineage["first_difference"]["reason"] == "num_shards 4 -> 8"


def test_files_under_other_run_hash_folders_pair_by_content_then_by_path_and_the_counts_add_up(tmp_path):
    # nano2 vs nano3 stage-0 curation: the same shards under each run's own hash folder, one file changed.
    def curated(folder: Path, run_hash: str, tokenizer: str) -> Shards:
        shards = folder / "shards"
        for i in range(3):
            (shards / run_hash).mkdir(parents=True, exist_ok=True)
            (shards / run_hash / f"train_{i:02d}.bin").write_text(f"tokens {i}")
        (shards / run_hash / "tokenizer.json").write_text(tokenizer)
        return Shards(path=folder, config={}, shards=shards, documents=3).save(step="curate")

    curated(tmp_path / "a", "3f9c0a1b2d4e5f60", "template A")
    curated(tmp_path / "b", "0d1e2f3a4b5c6d7e", "template B")
    pair = diff_paths(tmp_path / "a", tmp_path / "b")["artifacts"][0]
    assert pair["content"]["files"] == 4
    assert pair["content"]["differing_files"] == [{
        "name": "shards/3f9c0a1b2d4e5f60/tokenizer.json | shards/0d1e2f3a4b5c6d7e/tokenizer.json",
        "a": pair["content"]["differing_files"][0]["a"], "b": pair["content"]["differing_files"][0]["b"]}]
    assert "1 of 4 files differ" in pair["summary"]

    # Equal bytes everywhere: data identical, though no file has the same name on both sides.
    curated(tmp_path / "c", "0d1e2f3a4b5c6d7e", "template A")
    same = diff_paths(tmp_path / "a", tmp_path / "c")["artifacts"][0]
    assert same["content"]["data_identical"] and not same["content"]["differing_files"]
