"""nano2 stage 0 data curation: counts, shards, tokenizer, lineage, determinism, resume, bad input.

Most tests share one run on a reduced blend (four plays, plus planted junk and duplicates) to keep CI
fast; one test runs the default tiny step (all of Shakespeare) through its command line.
"""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nemotron.artifact import source_ref
from nemotron.data_prep.blend import cap_documents
from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE
from nemotron.data_prep.indexed import IndexedReader
from nemotron.data_prep.sources import (
    Document,
    read_jsonl,
    read_shakespeare,
    write_jsonl,
)
from nemotron.data_prep.tokenizer import EOS_ID, SPECIAL_TOKENS, load_tokenizer
from nemotron.recipes.nano2.artifacts import PretrainDataset
from nemotron.recipes.nano2.stage0_pretrain.data_curation import Config, main

STEP = "nemotron.recipes.nano2.stage0_pretrain.data_curation"
PLAYS = {"hamlet", "macbeth", "tempest", "comedy_of_errors"}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", STEP, *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, cwd=cwd, env=env)


def split_records(dataset: PretrainDataset, split: str) -> list[dict]:
    """The records of a split's JSONL files (one per work item of the curation), in order."""
    files = sorted((dataset.path / "splits").glob(f"*/{split}/*.jsonl"))
    return [json.loads(line) for path in files for line in path.open()]


@pytest.fixture(scope="module")
def blend_dir(tmp_path_factory) -> Path:
    """Scenes of four plays as JSONL, with one junk, one empty, one exact and one near duplicate."""
    folder = tmp_path_factory.mktemp("blend")
    scenes = [d for d in read_shakespeare().documents if d.meta.get("play") in PLAYS]
    records = [{"id": d.id, "text": d.text} for d in scenes]
    first = scenes[3].text
    lines = first.split("\n")
    lines[len(lines) // 2] = "  Good my lord, I pray you pardon me."  # one line of ~1,000 words changed
    near = "\n".join(lines)
    records += [
        {"id": "planted/exact", "text": first.replace("\n", "\n\n  ")},  # same text up to spacing
        {"id": "planted/near", "text": near},
        {"id": "planted/junk", "text": "BUY CHEAP PILLS NOW!!! click here"},
        {"id": "planted/empty", "text": "   "},
    ]
    (folder / "scenes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    blend = {"sources": [{"path": "scenes.jsonl", "name": "scenes"}], "split": [0.8, 0.1, 0.1]}
    (folder / "blend.json").write_text(json.dumps(blend))
    return folder


@pytest.fixture(scope="module")
def config(blend_dir, tmp_path_factory) -> Config:
    out = tmp_path_factory.mktemp("run") / "data"
    return Config(blend_path=blend_dir / "blend.json", vocab_size=1024, num_shards=2, workers=2, output_dir=out)


@pytest.fixture(scope="module")
def dataset(config) -> PretrainDataset:
    return main(config)


def test_every_removed_document_is_counted_by_reason(dataset, blend_dir):
    m = dataset.metrics
    assert m["skipped_by_reader"] == {"scenes": {"empty text": 1}}
    assert m["removed_exact_duplicates"] == 1
    assert m["removed_near_duplicates"] == 1
    assert m["removed_by_quality_filter"]["word_count"] >= 1  # the junk line, at least
    read = sum(m["documents_read"].values())
    removed = m["removed_by_scale_cap"] + m["removed_by_quality_total"] + 2
    assert read == removed + m["documents_curated"]
    assert sum(m["documents"].values()) == m["documents_curated"] == dataset.num_documents
    ids = {split: [record["id"] for record in split_records(dataset, split)] for split in ("train", "valid", "test")}
    kept = {i for split_ids in ids.values() for i in split_ids}
    assert not kept & {"planted/exact", "planted/near", "planted/junk", "planted/empty"}
    assert not set(ids["train"]) & (set(ids["valid"]) | set(ids["test"]))


def test_shards_hold_the_split_text_tokenized_with_eos(dataset):
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    for split, prefixes in (("train", dataset.train_prefixes), ("valid", dataset.valid_prefixes),
                            ("test", dataset.test_prefixes)):
        texts = [record["text"] for record in split_records(dataset, split)]
        docs = [doc for prefix in prefixes for doc in IndexedReader(prefix)]
        assert len(docs) == len(texts) > 0
        assert all(doc[-1] == EOS_ID for doc in docs)
        assert tokenizer.decode(docs[0][:-1].tolist()) == texts[0]
    assert sum(len(d) for p in dataset.train_prefixes for d in IndexedReader(p)) == dataset.num_train_tokens
    assert len(dataset.train_prefixes) == 2 and dataset.metrics["shard_runs"]["train"]["written"] == 2


def test_tokenizer_has_special_tokens_chat_template_and_requested_vocab(dataset):
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    assert tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS) == [0, 1, 2, 3, 4]
    assert tokenizer.chat_template == NANO2_CHAT_TEMPLATE
    assert dataset.vocab_size == len(tokenizer) == 1024


@pytest.mark.slow
def test_artifact_reloads_and_lineage_reaches_the_raw_source(dataset, blend_dir):
    loaded = PretrainDataset.from_path(dataset.path)
    assert loaded.digest == dataset.digest == loaded.compute_digest()
    assert [ref.model_dump() for ref in loaded.inputs] == [source_ref(blend_dir / "scenes.jsonl").model_dump()]
    shown = subprocess.run([sys.executable, "-m", "nemotron.artifact", "lineage", str(dataset.path)],
                           capture_output=True, text=True, check=True).stdout
    assert str((blend_dir / "scenes.jsonl").resolve()) in shown


def test_same_config_and_seed_give_the_same_digest_elsewhere(dataset, config, tmp_path):
    again = main(replace(config, output_dir=tmp_path / "again"))
    assert again.digest == dataset.digest
    assert again.num_train_tokens == dataset.num_train_tokens


def test_rerun_reuses_curation_and_tokenizer_and_redoes_only_a_damaged_shard(dataset, config):
    damaged = dataset.train_prefixes[0]
    Path(f"{damaged}.bin").write_bytes(b"garbage")
    rerun = main(config)
    assert rerun.metrics["curation_reused"] is True and "dedup" not in rerun.metrics["seconds_by_phase"]
    assert rerun.metrics["removed_near_duplicates"] == 1  # the counts come back with the split files
    assert rerun.metrics["tokenizer_reused"] is True
    assert rerun.metrics["shard_runs"]["train"] == {**dataset.metrics["shard_runs"]["train"],
                                                    "written": 0, "redone": 1, "skipped": 1}
    assert rerun.metrics["shard_runs"]["valid"]["skipped"] == 1
    assert rerun.digest == dataset.digest


@pytest.mark.slow
def test_bad_inputs_fail_with_one_line_and_exit_2(blend_dir, tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "empty.json").write_text(json.dumps({"sources": [{"path": "empty.jsonl"}], "split": [0.9, 0.1, 0]}))
    (tmp_path / "broken.json").write_text('{"sources": [')
    for name, weight in (("zero", 0), ("negative", -1)):
        blend = {"sources": [{"path": str(blend_dir / "scenes.jsonl"), "weight": weight}], "split": [0.9, 0.1, 0]}
        (tmp_path / f"{name}.json").write_text(json.dumps(blend))
    no_valid = {"sources": [{"path": str(blend_dir / "scenes.jsonl")}], "split": [1.0, 0.0, 0.0]}
    (tmp_path / "no_valid.json").write_text(json.dumps(no_valid))
    expected = {"empty": "no documents found", "broken": "not a readable JSON blend",
                "zero": "sources[0].weight", "negative": "sources[0].weight", "no_valid": "no valid split"}
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    running = {name: subprocess.Popen(  # all at once, so the interpreters start in parallel
        [sys.executable, "-m", STEP, "--blend-path", f"{name}.json", "--output-dir", f"out_{name}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in expected}
    for name, process in running.items():
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 2, (name, stderr)
        assert stdout == ""
        assert len(stderr.strip().splitlines()) == 1 and stderr.startswith("error: "), (name, stderr)
        assert expected[name] in stderr and f"{name}.json" in stderr, (name, stderr)
        assert not (tmp_path / f"out_{name}" / "metadata.json").exists()


def test_write_jsonl_round_trips_and_cap_documents_is_a_stable_seeded_subset(tmp_path):
    docs = [Document(f"doc/{i}", f"text {i} with ünïcode\nand a second line", "src") for i in range(50)]
    path = write_jsonl(docs, tmp_path / "docs.jsonl")
    assert [(d.id, d.text) for d in read_jsonl(path).documents] == [(d.id, d.text) for d in docs]
    kept, dropped = cap_documents(docs, 20, seed=0)
    assert len(kept) == 20 and dropped == 30
    assert kept == [d for d in docs if d in kept]  # input order kept
    assert cap_documents(list(reversed(docs)), 20, seed=0)[0] == list(reversed(kept))  # order-independent choice
    assert cap_documents(docs, 20, seed=1)[0] != kept
    assert cap_documents(docs, 50, seed=0) == (docs, 0)


@pytest.mark.slow
def test_default_tiny_run_curates_all_of_shakespeare(tmp_path):
    result = _cli("--scale", "tiny", "--output-dir", "data", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    artifact = json.loads(result.stdout)["pretraindataset"]  # stdout is pure JSON
    assert "data_prep: 1/1 items" in result.stderr  # progress goes to stderr
    metrics = artifact["metrics"]
    assert sum(metrics["documents_read"].values()) > 900  # the whole corpus: tiny does not cut it
    assert metrics["removed_by_scale_cap"] == 0
    assert artifact["num_documents"] == metrics["documents_curated"] > 900
    assert artifact["vocab_size"] == 4096
    assert artifact["num_train_tokens"] > 1_000_000 and artifact["num_valid_tokens"] > 10_000
    assert artifact["inputs"][0]["path"].endswith(os.path.join("shksprdata", "texts"))
    dataset = PretrainDataset.from_path(tmp_path / "data")
    assert dataset.digest == artifact["digest"]
