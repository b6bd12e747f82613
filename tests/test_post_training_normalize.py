"""The normalize step: family readers, Harmony text, filters counted by reason, HF layout, resume."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import wandb_records  # tests/ is on sys.path under pytest
from nemotron.data_prep.chat.harmony import parse
from nemotron.data_prep.post_training.normalize_run import Source, plan_normalize
from nemotron.data_prep.post_training.records import Rejected, normalize_record
from nemotron.data_prep.post_training.schema import SCHEMA, read_records, split_files
from nemotron.data_prep.stages import run_stages
from nemotron.errors import NemotronError
from nemotron.recipes.post_training_data import normalize
from nemotron.trackers import NoOpTracker, WandbTracker, set_lineage_tracker

REPO = Path(__file__).resolve().parents[1]
GOLDEN = json.loads((REPO / "tests" / "golden" / "normalize_demo.json").read_text())


# --- records in the real datasets' shapes -------------------------------------------------------


def math_record(n: int, answer: str | None = None, **changes) -> dict:
    value = str(n * n)
    record = {
        "problem": f"Compute {n} squared.", "expected_answer": value, "original_expected_answer": value,
        "changed_answer_to_majority": False, "data_source": "AoPS", "uuid": f"m-{n}",
        "messages": [
            {"role": "user", "content": f"Solve and box the answer.\n\nCompute {n} squared."},
            {"role": "assistant", "reasoning_content": f"{n}*{n} = {value}.",
             "content": f"\\boxed{{{answer or value}}}"},
        ],
        "metadata": {"reason_low_no_tool": {"count": 8, "pass": 8, "accuracy": 1.0},
                     "reason_high_with_tool": {"count": 8, "pass": 6, "accuracy": 0.75}},
        "license": "cc-by-4.0", "used_in": ["nano_v3"], "tools": [], "url": None, "user_url": None, "user_name": None,
    }
    record.update(changes)
    return record


def agentic_record(city: str, arguments='{"city": "%s"}', final="It is mild.", role="tool") -> dict:
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tool = {"type": "function",
            "function": {"name": "get_weather", "description": "Weather.", "parameters": parameters}}
    return {
        "uuid": f"a-{city}", "license": "cc-by-4.0", "used_in": ["nano_v3"], "tools": [tool],
        "messages": [
            {"role": "system", "content": ""},
            {"role": "user", "content": f"Weather in {city}?"},
            {"role": "assistant", "content": None, "reasoning_content": "Look it up.", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather",
                              "arguments": arguments % city if "%s" in arguments else arguments}}]},
            {"role": role, "tool_call_id": "c1", "content": '{"temp_c": 12}'},
            {"role": "assistant", "content": final, "tool_calls": None, "reasoning_content": "Relay."},
        ],
    }


def write_jsonl(path: Path, records: list, extra: dict[int, str] | None = None) -> Path:
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    for position, line in sorted((extra or {}).items()):
        lines.insert(position, line)
    path.write_text("\n".join(lines) + ("\n" if lines else ""))
    return path


def run_normalize(out: Path, sources: list[str], **changes):
    config = normalize.Config(sources=tuple(sources), output_dir=out, **changes)
    return normalize.main(config)


def folder_bytes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in ("metadata.json", ".lock") and "work" not in p.parts}


# --- readers ------------------------------------------------------------------------------------


def test_math_record_maps_signals_and_renders_harmony():
    record = normalize_record("math", math_record(7), "math", "high_part00", "f:1")
    assert record["id"] == hashlib.sha1(record["text"].encode()).hexdigest()
    assert "Reasoning: high" in record["text"]  # the Math-v2 split is gpt-oss's reasoning effort
    assert record["text"].endswith("<|start|>assistant<|channel|>final<|message|>\\boxed{49}<|return|>")
    assert [m.to_dict() for m in parse(record["text"])] == record["messages"]
    assert record["meta_correctness"] == 1.0 and record["meta_correctness_source"] == "answer_match"
    assert record["meta_pass_rate"] == 0.875 and record["meta_difficulty_bin"] == "low"
    assert record["meta_reasoning"] == {"present": True, "chars": len("7*7 = 49.")}
    assert record["text"][record["completion_start"]:].startswith("<|start|>assistant<|channel|>analysis")
    wrong = normalize_record("math", math_record(7, answer="48"), "math", "medium", "f:2")
    assert wrong["meta_correctness"] == 0.0


def test_agentic_record_tool_use_and_dict_arguments():
    record = normalize_record("agentic", agentic_record("Oslo", arguments={"city": "Oslo"}), "agentic",
                              "tool_calling", "f:1")
    assert record["meta_tool_use"] == {"names": ["get_weather"], "calls": 1}
    assert ('<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json'
            '<|message|>{"city": "Oslo"}<|call|>') in record["text"]
    assert "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>" in record["text"]
    assert record["quality_tools_declared"] and record["meta_domain"] == "tool_use"


@pytest.mark.parametrize("family, raw, reason", [
    ("agentic", agentic_record("Rome", role="observation"), "unknown role"),
    ("agentic", agentic_record("Rome", arguments="{city: 'Rome'"), "tool arguments not JSON"),
    ("proofs", {"problem": "p", "messages": [], "uuid": "p1", "tools": []}, "no assistant turn"),
    ("harmony", {"text": "<|start|>user<|message|>hi<|start|>assistant<|channel|>final<|message|>yo<|return|>"},
     "invalid harmony"),
    ("chat", {"messages": [{"role": "user", "content": None}, {"role": "assistant", "content": "ok"}]},
     "empty prompt turn"),
])
def test_invalid_records_are_rejected_with_a_reason(family, raw, reason):
    with pytest.raises(Rejected) as caught:
        normalize_record(family, raw, family, "train", "f:1")
    assert caught.value.reason == reason


# --- the step -----------------------------------------------------------------------------------


@pytest.fixture()
def bad_inputs(tmp_path):
    """One file per bad case of the issue, beside good records."""
    good = [math_record(n) for n in range(2, 6)]
    return {
        "math": write_jsonl(tmp_path / "medium.jsonl", good + [good[0]], extra={2: '{"problem": "cut off'}),
        "agentic": write_jsonl(tmp_path / "tool_calling.jsonl", [
            agentic_record("Lyon"), agentic_record("Rome", role="observation"),
            agentic_record("Nice", arguments="{city: 'Nice'"), agentic_record("Bern", final="")]),
        "harmony": write_jsonl(tmp_path / "rendered.jsonl", [
            {"text": "<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>hello<|return|>"},
            {"text": "<|start|>user<|message|>hi<|start|>assistant<|channel|>final<|message|>yo<|return|>"},
            {"text": "<|start|>user<|message|>only a question<|end|>"}]),
        "empty": write_jsonl(tmp_path / "empty.jsonl", []),
    }


def test_every_removal_is_counted_by_reason(tmp_path, bad_inputs):
    sources = [f"math={bad_inputs['math']}", f"agentic={bad_inputs['agentic']}",
               f"harmony={bad_inputs['harmony']}", f"chat={bad_inputs['empty']}"]
    dataset = run_normalize(tmp_path / "out", sources)
    assert dataset.metrics["removed_by_reason"] == {
        "empty completion": 1, "empty input": 1, "exact duplicate": 1, "invalid harmony": 1,
        "no assistant turn": 1, "not JSON": 1, "tool arguments not JSON": 1, "unknown role": 1,
    }
    assert dataset.metrics["records_read"] == 5 + 1 + 4 + 3 and dataset.num_records == 4 + 1 + 1
    assert dataset.records_per_split == {"agentic": {"tool_calling": 1}, "harmony": {"rendered": 1},
                                         "math": {"medium": 4}}
    card = (tmp_path / "out" / "math" / "README.md").read_text()
    assert "| medium | 4 |" in card and "| exact duplicate | 1 |" in card and "| not JSON | 1 |" in card
    assert "`meta_difficulty_bin`" in card and "path: data/medium/*.parquet" in card
    files = split_files(tmp_path / "out" / "math")
    assert [f.name for f in files["medium"]] == ["medium-00000-of-00001.parquet"]
    assert pq.read_schema(files["medium"][0]).names == SCHEMA.names


@pytest.mark.parametrize("which, where", [
    ("math", "medium.jsonl line 3: not JSON"),
    ("agentic", "tool_calling.jsonl line 2: unknown role: message 3 has role 'observation'"),
    ("harmony", "rendered.jsonl line 2: invalid harmony"),
    ("empty", "empty.jsonl: empty input"),
])
def test_strict_stops_at_the_first_invalid_record(tmp_path, bad_inputs, which, where):
    family = "chat" if which == "empty" else which
    with pytest.raises(NemotronError, match=where.replace("(", r"\(")):
        run_normalize(tmp_path / "out", [f"{family}={bad_inputs[which]}"], strict=True)
    assert not (tmp_path / "out" / "metadata.json").exists()


def test_parquet_and_hf_datasets_sources(tmp_path):
    import pyarrow as pa

    rows = [math_record(n) for n in (3, 4)]
    # A Parquet file whose messages are nested structs, and a local datasets folder (offline).
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "low.parquet")
    (tmp_path / "hub" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "hub" / "data" / "low-00000-of-00001.parquet")
    dataset = run_normalize(tmp_path / "out", [f"math={tmp_path / 'low.parquet'}", f"math=hf:{tmp_path / 'hub'}#low"])
    assert dataset.records_per_split == {"math": {"low": 2}}  # the same two records: the hub copies are duplicates
    assert dataset.metrics["removed_by_reason"] == {"exact duplicate": 2}


def test_max_records_reads_the_first_n_records_of_each_source_counts_and_reports_them(tmp_path, capsys):
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist([math_record(n) for n in (3, 4, 5)]), tmp_path / "low.parquet")
    jsonl = write_jsonl(tmp_path / "medium.jsonl", [math_record(n) for n in range(6, 12)])
    short = write_jsonl(tmp_path / "high.jsonl", [math_record(20)])
    sources = [f"math={jsonl}", f"math={tmp_path / 'low.parquet'}", f"math={short}"]
    dataset = run_normalize(tmp_path / "out", sources, max_records=2, units_per_source=2)
    assert dataset.records_per_split == {"math": {"medium": 2, "low": 2, "high": 1}}
    assert [r["source_id"] for r in read_records(split_files(tmp_path / "out" / "math")["medium"][0])] == \
        ["m-6", "m-7"]  # the first two, in file order
    assert dataset.metrics["records_read"] == 5
    assert dataset.metrics["max_records"] == 2 and dataset.metrics["sources_cut_short"] == ["medium.jsonl",
                                                                                            "low.parquet"]
    assert dataset.config["max_records"] == 2
    assert "--max-records 2: read the first 2 records of 2 of 3 sources" in capsys.readouterr().err
    assert "max_records" not in run_normalize(tmp_path / "all", sources[:1]).config  # unset: not recorded

    for bad in (0, -3):
        with pytest.raises(NemotronError, match=f"--max-records {bad} must be at least 1"):
            run_normalize(tmp_path / "bad", sources, max_records=bad)


def test_same_bytes_with_one_or_two_workers_as_the_process_pool_implementation_wrote(tmp_path):
    one = run_normalize(tmp_path / "one", [], workers=1)
    two = run_normalize(tmp_path / "two", [], workers=2)
    assert folder_bytes(tmp_path / "one") == folder_bytes(tmp_path / "two")
    assert one.digest == two.digest and one.num_records == 46
    # On the stage runner, the bytes and the digest its own process pool gave (tests/golden/normalize_demo.json).
    assert folder_bytes(tmp_path / "one") == GOLDEN["files"] and one.digest == GOLDEN["digest"]
    ids = [r["id"] for d in one.dataset_dirs for files in split_files(d).values() for r in read_records(files)]
    assert len(ids) == len(set(ids)) == 46


def test_killed_run_resumes_to_the_same_bytes(tmp_path):
    records = [math_record(n) for n in range(2, 2002)] + [agentic_record(f"city{n}") for n in range(1000)]
    source = write_jsonl(tmp_path / "medium.jsonl", records)
    args = ["--sources", f"math={source}", "--units-per-source", "12"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "nemotron.recipes.post_training_data.normalize", *args]
    process = subprocess.Popen([*command, "--output-dir", str(tmp_path / "killed")], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(list((tmp_path / "killed").glob("work/*/receipts/*.json"))) < 2:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done = len(list((tmp_path / "killed").glob("work/*/receipts/*.json")))
    assert 2 <= done < 12, "the run was not killed in the middle"
    resumed = run_normalize(tmp_path / "killed", [f"math={source}"], units_per_source=12)
    fresh = run_normalize(tmp_path / "fresh", [f"math={source}"], units_per_source=12)
    assert resumed.metrics["units_skipped"] == done
    assert folder_bytes(tmp_path / "killed") == folder_bytes(tmp_path / "fresh")
    assert resumed.digest == fresh.digest


def test_progress_goes_to_stderr_and_to_wandb_as_live_metrics(tmp_path, bad_inputs, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sources = [Source.parse(f"{family}={bad_inputs[family]}") for family in ("math", "agentic", "harmony")]
    plan = plan_normalize(sources, tmp_path / "out")
    tracker = set_lineage_tracker(WandbTracker(project="nemotron-test", run_dir=tmp_path))
    try:
        run_stages(plan.stages)
    finally:
        tracker.finish()
        set_lineage_tracker(NoOpTracker())
    items = len(plan.stages.items)
    prefix = f"data_prep/{plan.stages.run_hash[:16]}/"  # the stage runner's, as every data-prep run's
    rows = [row for row in wandb_records.history(tmp_path) if f"{prefix}items_done" in row]
    last = {key[len(prefix):]: value for key, value in rows[-1].items() if key.startswith(prefix)}
    assert last["items_done"] == last["items_total"] == last["items/written"] == items
    # Per work item, before the dataset-wide exact-duplicate pass: every kept record, every removal by reason.
    assert last["read/records"] == 5 + 1 + 4 + 3  # math (one line not JSON), agentic, harmony
    assert last["write_parquet/records"] == 4 + 1 + 1 + 1  # 1 math duplicate is still there
    assert {key: value for key, value in last.items() if key.startswith("normalize/removed/")} == {
        f"normalize/removed/{reason}": 1 for reason in ("empty completion", "invalid harmony", "no assistant turn",
                                                        "not JSON", "tool arguments not JSON", "unknown role")}
    err = capsys.readouterr().err
    assert f"data_prep: {items}/{items} items ({items} written)" in err and "removed/not JSON 1" in err
