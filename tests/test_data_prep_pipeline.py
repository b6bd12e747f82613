"""The data-prep library API (run_pretrain_pipeline, run_sft_pipeline), its JSONL and packed-Parquet
shards, the tracker tables of a run, and the README quick start, run exactly as written."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

import wandb_records  # tests/ is on sys.path under pytest
from builders import docs_and_chats
from nemotron.data_prep import DataBlend, run_pretrain_pipeline, run_rl_pipeline, run_sft_pipeline
from nemotron.data_prep.indexed import IndexedReader
from nemotron.data_prep.packing import read_packed
from nemotron.errors import NemotronError
from nemotron.trackers import NoOpTracker, WandbTracker, set_lineage_tracker

REPO = Path(__file__).resolve().parents[1]
TEXTS = [f"Scene {n}. " + " ".join(f"word{(n * 7 + k) % 97}" for k in range(20 + n % 30)) for n in range(300)]
CHATS = [{"id": f"c{n}", "messages": [{"role": "user", "content": f"Question {n}?"},
                                      {"role": "assistant", "content": f"Answer {n}: " + "yes " * (n % 9)}]}
         for n in range(120)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return docs_and_chats(tmp_path_factory.mktemp("data"), TEXTS, CHATS)


def test_pretrain_pipeline_tokenizes_every_split_and_a_rerun_reuses_every_shard(data, tmp_path):
    blend = DataBlend(sources=[{"path": str(data["root"] / "docs.jsonl")}], split=[0.8, 0.1, 0.1])
    result = run_pretrain_pipeline(blend=blend, output_dir=tmp_path, tokenizer=data["tokenizer"], num_shards=2)
    assert set(result.splits) == {"train", "valid", "test"}
    readers = [IndexedReader(prefix) for prefix in (p for paths in result.data_paths.values() for p in paths)]
    assert result.total_documents == sum(len(r) for r in readers) == len(TEXTS)
    assert result.total_tokens == sum(r.num_tokens for r in readers)
    assert json.loads((tmp_path / "data_paths.json").read_text()) == result.data_paths
    again = run_pretrain_pipeline(blend=blend, output_dir=tmp_path, tokenizer=data["tokenizer"], num_shards=2)
    assert again.run_hash == result.run_hash
    assert again.statuses == {"written": 0, "redone": 0, "skipped": result.statuses["written"]}
    assert again.statuses["skipped"] >= 2


def test_sft_pipeline_packs_every_conversation_once(data, tmp_path):
    blend = DataBlend(sources=[{"path": str(data["root"] / "chats.jsonl")}], split=[0.9, 0.1, 0.0])
    result = run_sft_pipeline(blend=blend, output_dir=tmp_path, tokenizer=data["tokenizer"], num_shards=3,
                              chat_template="nano2", pack_size=64)
    rows = [row for paths in result.data_paths.values() for path in paths for row in read_packed(path)]
    assert result.total_sequences == len(rows) > 0
    assert result.total_conversations == sum(len(row.seq_start_id) for row in rows) == len(CHATS)
    with pytest.raises(NemotronError, match="unknown chat template 'chatml'; use one of nano2, nano3"):
        run_sft_pipeline(blend=blend, output_dir=tmp_path / "x", tokenizer=data["tokenizer"], chat_template="chatml")


def test_a_tokenizer_that_is_neither_a_folder_nor_cached_is_one_clear_error(data, tmp_path):
    blend = DataBlend(sources=[{"path": str(data["root"] / "docs.jsonl")}])
    with pytest.raises(NemotronError,
                       match="'nobody/no-such-tokenizer' is neither a local folder nor in the local Hugging"):
        run_pretrain_pipeline(blend=blend, output_dir=tmp_path, tokenizer="nobody/no-such-tokenizer")


def test_jsonl_shards_reshape_records_and_count_what_they_leave_out(data, tmp_path):
    lines = [json.dumps(chat) for chat in CHATS[:10]] + ["not json", json.dumps({"no": "messages"})]
    source = tmp_path / "mixed.jsonl"
    source.write_text("\n".join(lines) + "\n")
    result = run_rl_pipeline(DataBlend(sources=[{"path": str(source)}], split=[1.0, 0.0, 0.0]), tmp_path / "out",
                             num_shards=2, transform="openai_chat")
    assert (result.total_records, result.skipped_records) == (10, 1)  # the record without messages
    assert result.counts["read/skipped: malformed"] == 1  # the line that is not JSON
    written = [json.loads(line) for path in result.data_paths["train"] for line in Path(path).read_text().splitlines()]
    assert [record["messages"] for record in written] == [chat["messages"] for chat in CHATS[:10]]


@pytest.mark.slow
def test_the_readme_quick_start_runs_as_written(tmp_path):
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Quick start"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    pretrain, sft = result.stdout.splitlines()
    assert re.fullmatch(r"[0-9a-f]{16} \d+ tokens in \S+shard_00000", pretrain)
    assert re.fullmatch(r"[0-9a-f]{16} \d+ packed sequences in \S+shard_00000\.parquet", sft)
    assert IndexedReader(tmp_path / pretrain.split(" in ")[1]).num_tokens > 0
    assert read_packed(tmp_path / sft.split(" in ")[1])


@pytest.mark.slow
def test_a_tokenizer_name_resolves_from_the_local_hugging_face_cache_offline(data, tmp_path):
    # The cache layout huggingface_hub writes: models--owner--name/snapshots/<commit>/ and refs/main.
    repo = tmp_path / "hub" / "models--local--tiny-bpe"
    commit = "0" * 40
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for file in data["tokenizer"].iterdir():
        (repo / "snapshots" / commit / file.name).write_bytes(file.read_bytes())
    (repo / "snapshots" / commit / "config.json").write_text('{"model_type": "llama"}')  # as any model repo has
    script = (
        "import json, sys\n"
        "from nemotron.data_prep import DataBlend, run_pretrain_pipeline\n"
        "blend = DataBlend(sources=[{'path': sys.argv[1]}])\n"
        "result = run_pretrain_pipeline(blend=blend, output_dir=sys.argv[2], tokenizer='local/tiny-bpe', "
        "num_shards=2)\n"
        "print(json.dumps(result.data_paths))\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script, str(data["root"] / "docs.jsonl"), str(tmp_path / "named")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    by_name = json.loads(done.stdout)["train"]
    by_folder = run_pretrain_pipeline(blend=DataBlend(sources=[{"path": str(data["root"] / "docs.jsonl")}]),
                                      output_dir=tmp_path / "folder", tokenizer=data["tokenizer"], num_shards=2)
    assert [Path(f"{p}.bin").read_bytes() for p in by_name] == \
        [Path(f"{p}.bin").read_bytes() for p in by_folder.data_paths["train"]]


def test_a_pretraining_run_never_imports_torch_in_the_driver(data, tmp_path):
    # transformers imports torch (about 4 CPU seconds): a driver that paid it ran 12 MB of data prep at
    # half speed on one worker, and 2 workers could not reach 1.8x of one.
    script = ("import sys; from nemotron.data_prep import DataBlend, run_pretrain_pipeline;"
              f"run_pretrain_pipeline(blend=DataBlend(sources=[{{'path': {str(data['root'] / 'docs.jsonl')!r}}}]),"
              f"output_dir={str(tmp_path)!r}, tokenizer={str(data['tokenizer'])!r});"
              "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_pipeline_run_reports_its_progress_to_wandb_as_live_metrics(data, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = set_lineage_tracker(WandbTracker(project="nemotron-test", run_dir=tmp_path))
    words = ("the of and to a in that is was he for it with as his on be at by this had not are but from or "
             "have an they which one you were her all she there would their river mill heron summer lantern "
             "orchard winter harvest ledger engine whisper kingdom crown market bridge").split()
    texts = [" ".join(random.Random(n).choices(words, k=120)).capitalize() + "." for n in range(40)]
    texts += [f"Too short {n}." for n in range(20)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"id": f"d{n}", "text": t}) + "\n"
                                                 for n, t in enumerate(texts)))
    try:
        blend = DataBlend(sources=[{"path": str(tmp_path / "docs.jsonl")}], split=[0.8, 0.1, 0.1])
        result = run_pretrain_pipeline(blend=blend, output_dir=tmp_path / "out", tokenizer=data["tokenizer"],
                                       num_shards=3, filters="default")
    finally:
        tracker.finish()
        set_lineage_tracker(NoOpTracker())
    prefix = f"data_prep/{result.run_hash[:16]}"
    live = [row for row in wandb_records.history(tmp_path) if f"{prefix}/items_done" in row]
    assert live, "no progress row reached the W&B run"
    last = live[-1]
    assert last[f"{prefix}/items_done"] == last[f"{prefix}/items_total"] == result.statuses["written"]
    assert last[f"{prefix}/write/tokens"] == result.total_tokens and last[f"{prefix}/write/tokens_per_s"] > 0
    assert last[f"{prefix}/read/documents"] == len(texts) and last[f"{prefix}/read/bytes"] > 0
    removed = sum(value for key, value in last.items() if key.startswith(f"{prefix}/filter/removed: "))
    assert removed == len(texts) - result.total_documents == 20
    assert wandb_records.step_metrics(tmp_path)[f"{prefix}/read/bytes"] == f"{prefix}/items_done"
