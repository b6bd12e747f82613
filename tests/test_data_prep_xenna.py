"""The cosmos-xenna executor (`executor="xenna"` streaming, `"xenna-batch"`): the same bytes and run hash
as one process for bin/idx and packed Parquet, no `ray::NodeResourceMonitor` or `ray::StageWorker`
process left behind, a stage's bad-input error as one process gives it, and a worker killed mid-run
reported as one error line, then resumed from the receipts to the same bytes.

Runs only where the extra installs (`pip install 'nemotron[xenna]'`, Linux x86_64, Python 3.11). One
local Ray with the dashboard (which xenna needs) serves the whole module: starting Ray takes 10-30 s.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import importlib.util
import json
import signal
import sys
import threading
import time

import pytest
import ray

from builders import descendant_processes, docs_and_chats, folder_bytes
from nemotron.data_prep import DataBlend, run_pretrain_pipeline, run_sft_pipeline
from nemotron.errors import NemotronError

needs_xenna = pytest.mark.skipif(importlib.util.find_spec("cosmos_xenna") is None,
                                 reason="the xenna extra is not installed: pip install 'nemotron[xenna]'")

TEXTS = [f"Scene {n}. " + " ".join(f"word{(n * 7 + k) % 97}" for k in range(20 + n % 30)) for n in range(240)]
CHATS = [{"id": f"c{n}", "messages": [{"role": "user", "content": f"Question {n}?"},
                                      {"role": "assistant", "content": f"Answer {n}: " + "yes " * (n % 9)}]}
         for n in range(120)]


@pytest.fixture(scope="module")
def cluster():
    # 3 logical CPUs: streaming needs one actor per stage (read, filter, write) at once.
    # What xenna's dashboard needs from a Ray it did not start (data_prep/stages/xenna.py).
    os.environ.setdefault("RAY_MAX_LIMIT_FROM_API_SERVER", "40000")
    os.environ.setdefault("RAY_MAX_LIMIT_FROM_DATA_SOURCE", "40000")
    ray.init(num_cpus=3, include_dashboard=True, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return docs_and_chats(tmp_path_factory.mktemp("xenna"), TEXTS, CHATS)


def pretrain(data, output_dir, executor, work_item_bytes=8_000):
    blend = DataBlend(sources=[{"path": str(data["root"] / "docs.jsonl")}], split=[0.8, 0.1, 0.1])
    return run_pretrain_pipeline(blend=blend, output_dir=output_dir, tokenizer=data["tokenizer"], executor=executor,
                                 work_item_bytes=work_item_bytes)


def sft(data, output_dir, executor):
    blend = DataBlend(sources=[{"path": str(data["root"] / "chats.jsonl")}], split=[0.9, 0.1, 0.0])
    return run_sft_pipeline(blend=blend, output_dir=output_dir, tokenizer=data["tokenizer"], executor=executor,
                            pack_size=64, work_item_bytes=4_000)


@pytest.mark.slow
@needs_xenna
@pytest.mark.parametrize("pipeline,output", [(pretrain, ".bin"), (sft, ".parquet")], ids=["bin_idx", "packed_parquet"])
def test_xenna_writes_the_bytes_and_run_hash_of_one_process_in_both_modes(cluster, data, tmp_path, pipeline, output,
                                                                          capfd):
    local = pipeline(data, tmp_path / "local", "local")
    expected = folder_bytes(local.output_dir)
    assert sum(name.endswith(output) for name in expected) >= 3
    for executor in ("xenna", "xenna-batch"):
        made = pipeline(data, tmp_path / executor, executor)
        assert made.run_hash == local.run_hash, executor
        assert folder_bytes(made.output_dir) == expected, executor
        assert made.statuses == local.statuses, executor
        assert made.counts == local.counts, executor
        # xenna 0.3.0 leaves these actors' processes running after every run; the executor ends them.
        for leftover in ("NodeResourceMonitor", "StageWorker"):
            assert not descendant_processes(leftover), f"{executor} left a ray::{leftover} process running"
    time.sleep(1)  # Ray prints a raylet's error lines (a worker's death) on stdout, a moment later
    assert capfd.readouterr().out == "", "stdout carries artifact JSON only"


@pytest.mark.slow
@needs_xenna
def test_a_worker_killed_mid_run_is_one_error_and_a_rerun_resumes_to_the_same_bytes(cluster, data, tmp_path):
    expected = folder_bytes(pretrain(data, tmp_path / "local", "local", work_item_bytes=1_500).output_dir)
    receipts = tmp_path / "xenna" / "runs"
    killed = []

    def kill_the_workers_after_the_first_receipt():
        # Every stage's actors: which of them runs the writer does not show in a process title, and
        # the actors of a stage already done may be on their way out anyway.
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            if any(receipts.glob("*/receipts/*.json")):
                for process in descendant_processes("StageWorker"):
                    process.send_signal(signal.SIGKILL)
                    killed.append(process.pid)
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_workers_after_the_first_receipt)
    killer.start()
    with pytest.raises(NemotronError) as failed:
        pretrain(data, tmp_path / "xenna", "xenna", work_item_bytes=1_500)
    killer.join()
    assert killed, "no xenna worker was seen after the first receipt, so none was killed"
    message = str(failed.value)
    assert "\n" not in message and "worker died" in message and "re-run" in message

    resumed = pretrain(data, tmp_path / "xenna", "xenna", work_item_bytes=1_500)
    assert resumed.statuses["skipped"] >= 1
    assert folder_bytes(resumed.output_dir) == expected
    assert not descendant_processes("NodeResourceMonitor") and not descendant_processes("StageWorker")


def test_a_missing_extra_is_one_line_naming_the_install_before_any_work(data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cosmos_xenna", None)  # as where the extra is not installed: import fails
    monkeypatch.setitem(sys.modules, "cosmos_xenna.pipelines", None)
    missing = r"executor 'xenna' needs cosmos-xenna 0\.3\.0 .*pip install 'nemotron\[xenna\]'"
    with pytest.raises(NemotronError, match=missing) as failed:
        pretrain(data, tmp_path, "xenna")
    assert "\n" not in str(failed.value)
    assert not list(tmp_path.iterdir())  # nothing planned, nothing written


def test_work_functions_refuse_the_stage_executor(tmp_path):
    from nemotron.data_prep.executors import run_work_items

    with pytest.raises(NemotronError, match="runs stage lists .* use executor='local' or 'ray' here"):
        list(run_work_items(len, ["x"], lambda payload: None, None, executor="xenna-batch"))


@pytest.mark.slow
@needs_xenna
def test_bad_input_in_a_stage_stops_the_run_with_the_line_one_process_gives(cluster, data, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "a fine line"}) + "\n{not json\n")
    blend = DataBlend(sources=[{"path": str(bad)}])
    messages = {}
    for executor in ("local", "xenna"):
        with pytest.raises(NemotronError) as failed:
            run_pretrain_pipeline(blend=blend, output_dir=tmp_path / executor, tokenizer=data["tokenizer"],
                                  executor=executor)
        messages[executor] = str(failed.value)
    assert "bad.jsonl:2" in messages["local"]
    assert messages["xenna"] == messages["local"]
