"""The pretraining curation's bookkeeping (`nemotron.data_prep.curation`), which both recipes' stage-0 steps call.

The whole curation runs in tests/test_nano2_stage0_data.py and tests/test_nano3_stages.py; these pin the
named pieces a step relies on: what enters the run hash, the receipt that makes re-runs cheap, the share
of rephrased records, the refusals.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron.artifact import ArtifactRef
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.curation import (
    RephrasedRecords,
    check_settings,
    curation_run_hash,
    load_pretrain_blend,
    reused_curation,
    save_curation,
    split_files,
    write_synthetic,
)
from nemotron.data_prep.settings import PretrainCurationSettings
from nemotron.errors import NemotronError


def blend_of(tmp_path: Path, split=(0.9, 0.05, 0.05)) -> DataBlend:
    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "1", "text": "hello"}) + "\n")
    return DataBlend.from_dict({"sources": [{"path": "a.jsonl"}], "split": list(split)}, base_dir=tmp_path)


def test_the_run_hash_moves_with_every_knob_the_split_files_depend_on(tmp_path):
    settings, blend = PretrainCurationSettings(), blend_of(tmp_path)
    sources = [ArtifactRef(type="source", path="a.jsonl", digest="d1")]
    base = curation_run_hash(settings, blend, sources)
    assert base == curation_run_hash(settings, blend_of(tmp_path), sources)  # same inputs, same hash
    moved = [curation_run_hash(replace(settings, seed=1), blend, sources),
             curation_run_hash(replace(settings, near_duplicate_threshold=0.9), blend, sources),
             curation_run_hash(replace(settings, scale="small"), blend, sources),
             curation_run_hash(settings, blend, [ArtifactRef(type="source", path="a.jsonl", digest="d2")]),
             curation_run_hash(settings, blend, sources, RephrasedRecords(Path("x.parquet"), "s1", 0.1))]
    assert len({base, *moved}) == 6
    # what only tokenization reads is not part of it: the split files are re-used across vocabularies
    assert base == curation_run_hash(replace(settings, vocab_size=512, num_shards=2, workers=3), blend, sources)


def test_the_curation_receipt_is_re_used_until_a_split_file_changes(tmp_path, capsys):
    out = tmp_path / "out"
    for split in ("train", "valid"):
        (out / "splits" / "run" / split).mkdir(parents=True)
        (out / "splits" / "run" / split / "shard_00000.jsonl").write_text(f'{{"id": "{split}"}}\n')
    runs, counts = [out / "splits" / "run"], {"documents_curated": 2}
    assert split_files(runs, "train") == [out / "splits" / "run" / "train" / "shard_00000.jsonl"]
    save_curation(out, "hash1", ["train", "valid"], counts, runs)
    assert reused_curation(out, "hash1", ["train", "valid"]) == (counts, runs)
    assert "re-using the split files of run hash1" in capsys.readouterr().err
    assert reused_curation(out, "hash2", ["train", "valid"]) == (None, [])  # other inputs: nothing re-used
    save_curation(out, "hash1", ["train", "valid"], counts, runs)
    (out / "splits" / "run" / "valid" / "shard_00000.jsonl").write_text("edited\n")
    assert reused_curation(out, "hash1", ["train", "valid"]) == (None, [])  # a file changed: redone
    assert not (out / "receipts" / "curation.json").exists()


def test_rephrased_records_make_up_their_weight_of_the_train_split(tmp_path):
    records = [{"id": f"seed{i}/{strategy}", "text": f"text {i} {strategy}"}
               for i in range(3) for strategy in ("diverse_qa", "wikipedia_rephrase")]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "records.parquet")
    synthetic = RephrasedRecords(tmp_path / "records.parquet", "digest", weight=0.2)
    counted = write_synthetic(tmp_path / "train", 90, synthetic, seed=0)  # 90 curated: 22.5 -> 22 records
    lines = (tmp_path / "train" / "synthetic.jsonl").read_text().splitlines()
    assert counted["drawn"] == len(lines) == 22 and counted["records"] == 6
    assert sum(counted["by_strategy"].values()) == 22 and counted["digest"] == "digest"
    again = tmp_path / "again"
    write_synthetic(again, 90, synthetic, seed=0)
    assert (again / "synthetic.jsonl").read_bytes() == (tmp_path / "train" / "synthetic.jsonl").read_bytes()


def test_impossible_knobs_and_a_blend_without_held_out_text_are_refused(tmp_path):
    with pytest.raises(NemotronError, match="--num-shards"):
        check_settings(PretrainCurationSettings(num_shards=0))
    with pytest.raises(NemotronError, match="--vocab-size 100 is too small"):
        check_settings(PretrainCurationSettings(vocab_size=100))
    with pytest.raises(NemotronError, match="scale"):
        check_settings(PretrainCurationSettings(scale="huge"))
    path = tmp_path / "blend.json"
    path.write_text(json.dumps({"sources": [{"path": "a.jsonl"}], "split": [1.0, 0, 0]}))
    (tmp_path / "a.jsonl").write_text("")
    with pytest.raises(NemotronError, match="no valid split"):
        load_pretrain_blend(path)
    assert "valid" in load_pretrain_blend(None).splits  # Shakespeare's, split 90/5/5
