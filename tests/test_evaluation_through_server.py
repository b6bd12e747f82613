"""`python -m nemotron.evaluation --through-server URL` against a real `nemotron.serve` equals the in-process run.

The trained tiny checkpoint of the session's nano2 run (`nano2_run`, tests/runs.py: the DPO model its stage 2
trained, which the suite makes once for every test that reads it) is served on a loopback port
(`test_serve.LocalServer`, in this process); the command runs twice as a user runs it, in a subprocess:
in-process on the checkpoint, and through the server (lm-eval's `local-completions`). Both score
multiple-choice tasks (log-likelihoods) and GSM8K (greedy generation), each with its control.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from test_serve import LocalServer  # tests/ is on sys.path under pytest

TASKS = "hellaswag,arc_easy,piqa,gsm8k"
LIMIT = 6
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def evaluation(*args: str) -> tuple[dict, dict, str]:
    """(the artifact, its benchmark_results.json, stderr) of one `python -m nemotron.evaluation` run."""
    run = subprocess.run([sys.executable, "-m", "nemotron.evaluation", *args, "--benchmarks", TASKS,
                          "--limit", str(LIMIT), "--num-threads", "1", "--batch-size", "8"],
                         capture_output=True, text=True, timeout=900, check=False, env=ENV)
    assert run.returncode == 0, run.stderr[-3000:]
    artifact = json.loads(run.stdout)["standardbenchmarkresults"]
    with open(artifact["results_path"], encoding="utf-8") as f:
        return artifact, json.load(f), run.stderr


@pytest.fixture(scope="module")
def runs(nano2_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("through")
    checkpoint = nano2_run.out / "stage2_alignment" / "training"  # read only: the outputs go under root
    server = LocalServer([checkpoint])
    try:
        in_process = evaluation(str(checkpoint), "--device", "cpu", "--output-dir", str(root / "in_process"))
        through = evaluation("--through-server", server.root, "--output-dir", str(root / "through"))
    finally:
        server.stop()
    return in_process, through, checkpoint


@pytest.mark.slow  # a server and two lm-eval runs in subprocesses (~1 min on 2 cores)
def test_through_server_loglikelihoods_and_scores_equal_the_in_process_ones(runs):
    (mine, ours, _), (_, theirs, _), _ = runs
    assert mine["inputs"][0]["type"] == "dpocheckpoint"  # a trained model, not random weights
    for task in TASKS.split(","):
        for kind in ("items", "control"):
            here, there = ours["responses"][task][kind], theirs["responses"][task][kind]
            assert len(here) == len(there) == LIMIT
            if task == "gsm8k":  # greedy generation: the same text
                assert here == there
                continue
            for a, b in zip(here, there, strict=True):  # every choice's log-likelihood
                assert len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-4
        assert ours["item_scores"][task] == theirs["item_scores"][task]  # the same accuracy, item by item
        for key in ("score", "stderr", "chance", "n"):
            assert ours["summaries"][task][key] == theirs["summaries"][task][key]


@pytest.mark.slow
def test_through_server_writes_the_same_artifact_naming_the_served_model(runs):
    (mine, _, _), (served, _, stderr), checkpoint = runs
    assert served["model"] == f"{checkpoint.parents[1].name}-stage2_alignment"  # the served id, as /v1/models lists it
    assert served["inputs"] == mine["inputs"]  # the checkpoint and its digest: the same lineage
    assert mine["config"]["device"] == "cpu"
    assert served["metrics"]["model"]["server"].startswith("http://127.0.0.1:")
    assert served["metrics"]["model"]["context"] == 1024
    assert list(served["metrics"]["benchmarks"]) == list(mine["metrics"]["benchmarks"]) == TASKS.split(",")
    assert "hellaswag: acc_norm" in stderr


@pytest.mark.slow  # a subprocess
def test_no_server_at_the_url_is_one_error_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "nemotron.evaluation", "--through-server", "http://127.0.0.1:9",
                          "--benchmarks", "piqa", "--output-dir", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300, check=False, env=ENV)
    assert run.returncode != 0 and run.stdout == ""
    assert "error: --through-server http://127.0.0.1:9: cannot list its models" in run.stderr
    assert "python -m nemotron.serve" in run.stderr and not (tmp_path / "out").exists()
