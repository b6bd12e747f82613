"""The API holds against any request: a property-based fuzz of the server from its own OpenAPI schema.

schemathesis reads /openapi.json (the request bodies `nemotron.serve.app` publishes) and hypothesis generates
bodies that fit it and bodies that do not (wrong types, missing fields, out-of-range values), each sent to the
real server on a loopback port. Every answer must be below 500 within its timeout (no crash, no hang), and
afterwards the server still answers a plain request. Bounded: a few dozen examples per operation, no shrinking
past a time budget, so it runs in well under a minute on two cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_serve import HELLO, LocalServer  # tests/ is on sys.path under pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from builders import make_chat_checkpoint, make_pretrain_checkpoint
    from nemotron.recipes.nano3.artifacts import Nano3RLCheckpoint

    root = tmp_path_factory.mktemp("runs")
    make_chat_checkpoint(root / "nano3" / "stage2_rl" / "training", Nano3RLCheckpoint, "nano3")
    make_pretrain_checkpoint(root / "nano2" / "stage0_pretrain" / "training")
    local = LocalServer([root / "nano3/stage2_rl/training", root / "nano2/stage0_pretrain/training"])
    yield local
    local.stop()


def test_no_request_from_the_schema_gets_a_5xx_or_hangs_and_the_server_answers_after(server):
    import httpx

    # The fuzzing runs in a fresh interpreter (tests/fuzz_api.py says why); the server stays in this one.
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("fuzz_api.py")), server.root],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(failures[:5])
    answer = httpx.post(f"{server.url}/chat/completions", timeout=60,
                        json={"model": "nano3-stage2_rl", "messages": HELLO, "max_tokens": 2})
    assert answer.status_code == 200 and answer.json()["choices"][0]["finish_reason"]
