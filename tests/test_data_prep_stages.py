"""The stage pipeline (data_prep/stages): plan without reading, per-item reads equal to the whole-file
readers, the same bytes from every executor and worker count, SIGKILL-and-resume, blend weights,
filter counts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron.data_prep import DataBlend, run_pretrain_pipeline
from nemotron.data_prep.quality import apply_filters, default_filters
from nemotron.data_prep.sources import read_jsonl, read_parquet
from nemotron.data_prep.stages import ItemContext, ReadStage, plan_work_items
from nemotron.data_prep.tokenizer import train_tokenizer

REPO = Path(__file__).resolve().parents[1]
WORDS = "the a of and to king queen crown sword river night day love war peace bread".split()


def _texts(count: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 90))) + "." for _ in range(count)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("stages")
    texts = _texts(400, seed=1)
    lines = [json.dumps({"text": t} if n % 3 else {"id": f"d{n}", "text": t}) for n, t in enumerate(texts)]
    lines.insert(7, "")  # a blank line: line numbers (and so fallback ids) must still match read_jsonl
    lines.insert(50, json.dumps({"body": "no text field"}))
    (root / "docs.jsonl").write_text("\n".join(lines) + "\n")
    table = pa.table({"text": _texts(300, seed=2), "id": [None if n % 2 else f"p{n}" for n in range(300)]})
    pq.write_table(table, root / "docs.parquet", row_group_size=40)
    tokenizer = train_tokenizer(texts, 400, root / "tokenizer")
    return {"root": root, "tokenizer": tokenizer}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _documents(blend: DataBlend, work_item_bytes: int, tmp_path: Path):
    items, _ = plan_work_items(blend, work_item_bytes)
    stage, documents = ReadStage(), []
    for item in items:
        context = ItemContext(item, tmp_path, tmp_path)
        documents += [doc for batch in stage.process(context, iter(())) for doc in batch]
    return items, documents


@pytest.mark.parametrize("name,reader", [("docs.jsonl", read_jsonl), ("docs.parquet", read_parquet)])
def test_work_items_read_the_documents_the_whole_file_reader_reads(data, tmp_path, name, reader):
    blend = DataBlend(sources=[{"path": str(data["root"] / name)}])
    items, documents = _documents(blend, work_item_bytes=2_000, tmp_path=tmp_path)
    assert len(items) > 3
    whole = reader(data["root"] / name, source=str(data["root"] / name)).documents
    assert [(d.id, d.text) for d in documents] == [(d.id, d.text) for d in whole]


def test_every_executor_and_worker_count_writes_the_same_bytes(data, tmp_path):
    blend = DataBlend(sources=[{"path": str(data["root"] / "docs.jsonl"), "weight": 3.0},
                               {"path": str(data["root"] / "docs.parquet"), "weight": 1.0}], split=[0.8, 0.1, 0.1])
    runs = {}
    for executor, workers in (("local", 1), ("local", 2)):
        result = run_pretrain_pipeline(blend=blend, output_dir=tmp_path / f"{executor}{workers}",
                                       tokenizer=data["tokenizer"], executor=executor, workers=workers,
                                       work_item_bytes=4_000)
        runs[(executor, workers)] = (result.run_hash, _files(Path(result.output_dir)))
    (hash_one, files_one), (hash_two, files_two) = runs.values()
    assert hash_one == hash_two and files_one == files_two
    assert sum(name.endswith(".bin") for name in files_one) > 6


def test_blend_weights_are_the_sources_weights_spread_over_their_shards(data, tmp_path):
    blend = DataBlend(sources=[{"path": str(data["root"] / "docs.jsonl"), "weight": 3.0, "name": "j"},
                               {"path": str(data["root"] / "docs.parquet"), "weight": 1.0, "name": "p"}])
    result = run_pretrain_pipeline(blend=blend, output_dir=tmp_path, tokenizer=data["tokenizer"],
                                   work_item_bytes=4_000)
    train = json.loads((tmp_path / "blend.json").read_text())["train"]
    assert train["paths"] == result.data_paths["train"]
    sources = [shard["source"] for shard in result.splits["train"].shards]
    by_source = {name: sum(w for w, s in zip(train["weights"], sources, strict=True) if s == name) for name in "jp"}
    assert by_source == pytest.approx({"j": 0.75, "p": 0.25})
    tokens = [shard["tokens"] for shard in result.splits["train"].shards if shard["source"] == "j"]
    weights = [w for w, s in zip(train["weights"], sources, strict=True) if s == "j"]
    assert weights == pytest.approx([0.75 * t / sum(tokens) for t in tokens])  # within a source: by tokens


def test_what_each_filter_removes_is_counted(data, tmp_path):
    blend = DataBlend(sources=[{"path": str(data["root"] / "docs.jsonl")}])
    result = run_pretrain_pipeline(blend=blend, output_dir=tmp_path, tokenizer=data["tokenizer"], filters="default",
                                   work_item_bytes=4_000)
    whole = read_jsonl(data["root"] / "docs.jsonl").documents
    kept, removed = apply_filters(whole, default_filters())
    counted = {key.removeprefix("filter/removed: "): value for key, value in result.counts.items()
               if key.startswith("filter/removed: ")}
    assert counted == {name: n for name, n in removed.items() if n} and sum(counted.values()) > 0
    assert result.total_documents == len(kept)
    assert result.counts["read/skipped: missing text field 'text'"] == 1


KILLED_RUN = """
import sys
from nemotron.data_prep import DataBlend, run_pretrain_pipeline
if __name__ == "__main__":
    blend = DataBlend(sources=[{"path": sys.argv[1]}], split=[0.9, 0.1, 0.0])
    run_pretrain_pipeline(blend=blend, output_dir=sys.argv[2], tokenizer=sys.argv[3], workers=2,
                          work_item_bytes=1_500)
"""


def test_a_run_killed_with_sigkill_resumes_from_its_receipts_to_the_same_bytes(data, tmp_path):
    source, tokenizer = str(data["root"] / "docs.jsonl"), str(data["tokenizer"])
    blend = DataBlend(sources=[{"path": source}], split=[0.9, 0.1, 0.0])
    reference = run_pretrain_pipeline(blend=blend, output_dir=tmp_path / "reference", tokenizer=tokenizer,
                                      work_item_bytes=1_500)
    total = sum(reference.statuses.values())
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    killed = subprocess.Popen([sys.executable, "-c", KILLED_RUN, source, str(tmp_path / "killed"), tokenizer],
                              env=env, stderr=subprocess.DEVNULL, start_new_session=True)
    receipts = tmp_path / "killed" / "runs" / Path(reference.output_dir).name / "receipts"
    deadline = time.monotonic() + 240
    while killed.poll() is None and len(list(receipts.glob("*.json"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)  # the driver and its pool workers, mid-run
    killed.wait()
    done_before = len(list(receipts.glob("*.json")))
    assert 0 < done_before < total, "the kill must land mid-run"
    resumed = run_pretrain_pipeline(blend=blend, output_dir=tmp_path / "killed", tokenizer=tokenizer,
                                    work_item_bytes=1_500)
    assert resumed.statuses["skipped"] >= done_before - 2  # receipts written while the kill landed may vary
    assert resumed.run_hash == reference.run_hash
    assert _files(Path(resumed.output_dir)) == _files(Path(reference.output_dir))


@pytest.mark.slow
def test_ray_writes_the_bytes_of_one_process(data, tmp_path):
    ray = pytest.importorskip("ray")
    blend = DataBlend(sources=[{"path": str(data["root"] / "docs.jsonl")}], split=[0.8, 0.1, 0.1])
    local = run_pretrain_pipeline(blend=blend, output_dir=tmp_path / "local", tokenizer=data["tokenizer"],
                                  work_item_bytes=4_000)
    try:  # more work items (~30) than the bounded queue's window (2 per CPU)
        on_ray = run_pretrain_pipeline(blend=blend, output_dir=tmp_path / "ray", tokenizer=data["tokenizer"],
                                       executor="ray", workers=2, work_item_bytes=4_000)
    finally:
        ray.shutdown()  # the local Ray it started; other test modules start their own
    assert on_ray.run_hash == local.run_hash and sum(on_ray.statuses.values()) > 8
    assert _files(Path(on_ray.output_dir)) == _files(Path(local.output_dir))


def test_a_run_where_no_document_reaches_a_shard_is_one_clear_error(data, tmp_path):
    from nemotron.errors import NemotronError

    source = tmp_path / "empty_texts.jsonl"
    source.write_text(json.dumps({"text": ""}) + "\n" + json.dumps({"body": "x"}) + "\n")
    with pytest.raises(NemotronError, match="no document reached a shard .*check the sources' text field"):
        run_pretrain_pipeline(blend=DataBlend(sources=[{"path": str(source)}]), output_dir=tmp_path / "out",
                              tokenizer=data["tokenizer"])


def test_the_stage_counts_reach_a_wandb_run_as_a_table(data, tmp_path, monkeypatch):
    from nemotron.trackers import NoOpTracker, WandbTracker, set_lineage_tracker

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = set_lineage_tracker(WandbTracker(project="nemotron-test", run_dir=tmp_path))
    try:
        result = run_pretrain_pipeline(blend=DataBlend(sources=[{"path": str(data["root"] / "docs.jsonl")}]),
                                       output_dir=tmp_path / "out", tokenizer=data["tokenizer"], filters="default",
                                       work_item_bytes=20_000)
    finally:
        tracker.finish()
        set_lineage_tracker(NoOpTracker())
    table = next(json.loads(p.read_text()) for p in tmp_path.rglob("*.table.json") if p.name.startswith("counts"))
    assert table["columns"] == ["stage", "what", "count"]
    rows = {(stage, what): count for stage, what, count in table["data"]}
    assert rows[("write", "train/tokens")] == result.total_tokens
    assert rows[("items", "written")] == sum(result.statuses.values())
    removed = {what: n for (stage, what), n in rows.items() if stage == "filter" and what.startswith("removed")}
    assert removed == {k.removeprefix("filter/"): v for k, v in result.counts.items() if k.startswith("filter/removed")}
