"""The API holds against any request: a property-based fuzz of the server from its own OpenAPI schema.

schemathesis reads /openapi.json (the request bodies `nemotron.serve.app` publishes) and hypothesis generates
bodies that fit it and bodies that do not (wrong types, missing fields, out-of-range values), each sent to the
real server on a loopback port. Every answer must be below 500 within its timeout (no crash, no hang), and
afterwards the server still answers a plain request. Bounded: a few dozen examples per operation, no shrinking
past a time budget, so it runs in well under a minute on two cores.
"""

from __future__ import annotations

import pytest

from test_serve import HELLO, LocalServer  # tests/ is on sys.path under pytest

pytestmark = pytest.mark.slow

EXAMPLES = 20  # per operation and per mode (fitting the schema / not)


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
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings

    schema = schemathesis.openapi.from_url(f"{server.root}/openapi.json")
    paths = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert paths <= {op.path for op in operations}  # the request bodies are described, so fuzzing reaches them
    assert "requestBody" in schema.raw_schema["paths"]["/v1/chat/completions"]["post"]
    failures = []

    def fuzz(operation, mode: str) -> None:
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=schemathesis.GenerationMode(mode)))
        def send(case):
            response = case.call(base_url=server.root, timeout=60)  # a hang fails here, as a timeout
            if response.status_code >= 500:
                failures.append(f"{operation.method.upper()} {operation.path} {case.body!r}: "
                                f"{response.status_code} {response.text[:200]}")

        send()

    for operation in operations:
        for mode in ("positive", "negative") if operation.method.lower() == "post" else ("positive",):
            fuzz(operation, mode)  # a GET without parameters has no invalid form
    assert not failures, "\n".join(failures[:5])
    answer = httpx.post(f"{server.url}/chat/completions", timeout=60,
                        json={"model": "nano3-stage2_rl", "messages": HELLO, "max_tokens": 2})
    assert answer.status_code == 200 and answer.json()["choices"][0]["finish_reason"]
