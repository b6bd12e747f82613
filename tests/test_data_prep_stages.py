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


# ---------------------------------------------------------------------------------------------------
# One JSONL file tokenized whole into the train split: exact documents, the run hash, repairs, bad lines,
# and the shards read as one Megatron-Core blend.
# ---------------------------------------------------------------------------------------------------


def _train_only(path: Path) -> DataBlend:
    return DataBlend.from_dict({"train": [{"path": str(path)}]})


def _write_texts(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path


def test_bin_idx_shards_hold_every_document_in_input_order_with_one_eos(data, tmp_path):
    from nemotron.data_prep.indexed import IndexedReader
    from nemotron.data_prep.tokenizer import EOS_ID, load_tokenizer

    texts = _texts(300, seed=3)
    result = run_pretrain_pipeline(_train_only(_write_texts(tmp_path / "docs.jsonl", texts)), tmp_path / "out",
                                   data["tokenizer"], num_shards=4)
    assert len(result.data_paths["train"]) == 4 and result.statuses == {"written": 4, "redone": 0, "skipped": 0}
    documents = [doc for prefix in result.data_paths["train"] for doc in IndexedReader(prefix)]
    assert len(documents) == result.total_documents == len(texts)
    assert all(doc[-1] == EOS_ID and EOS_ID not in doc[:-1] for doc in documents)
    tokenizer = load_tokenizer(data["tokenizer"])
    assert [tokenizer.decode(doc[:-1].tolist()) for doc in documents] == texts
    assert result.total_tokens == sum(len(doc) for doc in documents)


def test_the_run_hash_follows_the_inputs_and_the_parameters(data, tmp_path):
    from nemotron.data_prep.stages import FilterSplitStage, TokenizeWriteStage, plan_stages
    from nemotron.data_prep.stages.plan import line_cuts
    from nemotron.data_prep.tokenizer import train_tokenizer

    def run_hash(path: Path, pieces: int, tokenizer: Path = data["tokenizer"]) -> str:
        items, inputs = plan_work_items(_train_only(path), 1 << 20, min_items_per_file=pieces)
        stages = [ReadStage(), FilterSplitStage(None), TokenizeWriteStage("bin_idx", tokenizer)]
        return plan_stages(items, inputs, stages, tmp_path).run_hash

    texts = _texts(100, seed=4)
    source = _write_texts(tmp_path / "docs.jsonl", texts)
    assert run_hash(source, 4) == run_hash(source, 4)
    assert run_hash(source, 3) != run_hash(source, 4)  # other work items
    assert run_hash(_write_texts(tmp_path / "changed.jsonl", texts[1:]), 4) != run_hash(source, 4)
    other = train_tokenizer(texts, 300, tmp_path / "other_tokenizer")
    assert run_hash(source, 4, other) != run_hash(source, 4)
    # More pieces than lines: empty byte ranges are dropped, never planned as empty work items.
    assert line_cuts(_write_texts(tmp_path / "two.jsonl", ["one", "two"]), 10) == [(0, 16), (16, 32)]


def test_damaged_unreceipted_or_half_written_items_are_redone_and_nothing_else(data, tmp_path):
    blend = _train_only(data["root"] / "docs.jsonl")
    first = run_pretrain_pipeline(blend, tmp_path, data["tokenizer"], num_shards=5)
    run = Path(first.output_dir)
    before = _files(run)
    names = sorted(path.stem for path in (run / "train").glob("*.bin"))
    assert len(names) == 5
    damaged = run / "train" / f"{names[1]}.bin"
    data_bytes = bytearray(damaged.read_bytes())
    data_bytes[100] ^= 0xFF  # one flipped byte: same size, another checksum
    damaged.write_bytes(bytes(data_bytes))
    (run / "receipts" / f"{names[3]}.json").unlink()  # the item written, its receipt lost
    # What a crash mid-item leaves: no receipt, a truncated .bin and a temp file of an atomic write.
    (run / "receipts" / f"{names[4]}.json").unlink()
    (run / "train" / f"{names[4]}.bin").write_bytes(b"\x07" * 10)
    (run / "train" / f".{names[4]}.bin.x1y2z3.tmp").write_bytes(b"\x00" * 1000)

    again = run_pretrain_pipeline(blend, tmp_path, data["tokenizer"], num_shards=5)
    assert again.statuses == {"written": 0, "redone": 3, "skipped": 2}
    assert _files(run) == before  # the same bytes, and no stray temp file


def test_a_line_that_is_not_json_is_named_and_leaves_no_receipt_and_no_half_shard(data, tmp_path):
    from nemotron.errors import NemotronError

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(NemotronError, match=r"bad\.jsonl:2: .*; each line must be one JSON object"):
        run_pretrain_pipeline(_train_only(bad), tmp_path / "out", data["tokenizer"])
    [run] = (tmp_path / "out" / "runs").iterdir()
    assert not (run / "receipts").exists() or not list((run / "receipts").iterdir())
    assert not list(run.rglob("shard_*"))  # the writer never started: no half shard


def test_the_shards_as_one_megatron_blend_give_gpt_samples_cut_from_their_documents(data, tmp_path):
    """blend.json's paths and weights, as Megatron-Core's BlendedMegatronDatasetBuilder takes them."""
    import numpy as np
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers import MegatronTokenizer

    from nemotron.data_prep.indexed import IndexedReader

    run_pretrain_pipeline(_train_only(data["root"] / "docs.jsonl"), tmp_path, data["tokenizer"], num_shards=3)
    train = json.loads((tmp_path / "blend.json").read_text())["train"]
    tokenizer = MegatronTokenizer.from_pretrained(str(data["tokenizer"]), metadata_path={"library": "huggingface"})
    length = 64
    config = GPTDatasetConfig(
        random_seed=7, sequence_length=length, blend=(train["paths"], train["weights"]), split="100,0,0",
        # No index cache: with one, Megatron's BlendedDataset calls torch.distributed.get_rank(),
        # which needs an initialized process group (a trainer has one; this test does not).
        path_to_cache=None, tokenizer=tokenizer, reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=False,
    )
    samples, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [200, 0, 0], lambda: True, config).build()
    assert len(samples) >= 200 and len(samples.datasets) == 3  # per-shard sizes are rounded up
    documents = [list(IndexedReader(prefix)) for prefix in train["paths"]]
    for k in range(len(samples)):
        shard, j = int(samples.dataset_index[k]), int(samples.dataset_sample_index[k])
        gpt = samples.datasets[shard]
        # Sample j of a shard's GPTDataset is a window of its documents in `document_index` order.
        stream = np.concatenate([documents[shard][d] for d in gpt.document_index])
        start = int(gpt.shuffle_index[j]) * length
        np.testing.assert_array_equal(samples[k]["tokens"].numpy(), stream[start : start + length])
