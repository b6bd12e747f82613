""""where from": POST /v1/trace and the chat page's button, on the session's real nano2 run.

`python -m nemotron.serve RUN` over the run the suite makes once (`nano2_run`, tests/runs.py: a tiny nano2
recipe, pretraining -> SFT -> DPO, trained): every stage served on a loopback port (`test_serve.LocalServer`,
in this process, the folders `expand_run` finds). The DPO model's greedy answer to its evaluation prompt is
copied from its SFT conversations (the report card marks it so), so tracing it must name a training
conversation that holds it, and the endpoint must answer what `python -m nemotron.trace` prints for the same
text, the indexes being the ones beside the run's datasets. The page test drives the real page in headless
Chromium: compare, "where from" on the DPO answer, the spans marked with their sources, as the API gives them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from nemotron.data_prep.conversations import read_conversations
from nemotron.serve.models import expand_run
from test_serve import LocalServer  # tests/ is on sys.path under pytest
from test_serve_page import MAX_TOKENS, page, send  # noqa: F401  (`page`: the chat page of this module's server)

pytestmark = pytest.mark.slow  # a whole tiny nano2 run (made once per session) and its three models served


@pytest.fixture(scope="module")
def server(nano2_run):
    local = LocalServer(expand_run(str(nano2_run.out)))  # read only: the indexes beside the datasets exist already
    yield local
    local.stop()


@pytest.fixture(scope="module")
def stages(server) -> dict[str, str]:
    """stage folder name (stage0_pretrain, stage1_sft, stage2_alignment) -> its served model's id."""
    return {m.identity["path"].split("/")[-2]: m.name for m in server.served}


@pytest.fixture(scope="module")
def asked(nano2_run, server, stages) -> tuple[str, str]:
    """(the DPO evaluation's first prompt, the DPO model's greedy answer to it, as the page asks for it)."""
    samples = json.loads((nano2_run.out / "stage2_alignment" / "evaluation" / "samples.json").read_text())
    prompt = samples[0]["prompt"]
    reply = httpx.post(f"{server.url}/chat/completions", timeout=300, json={
        "model": stages["stage2_alignment"], "messages": [{"role": "user", "content": prompt}],
        "temperature": 0, "max_tokens": MAX_TOKENS})
    assert reply.status_code == 200, reply.text
    return prompt, reply.json()["choices"][0]["message"]["content"]


def trace(server, **body) -> httpx.Response:
    return httpx.post(f"{server.url}/trace", json=body, timeout=300)


def test_the_dpo_answer_is_traced_to_a_training_conversation_that_holds_it(server, stages, asked, nano2_run):
    _, answer = asked
    reply = trace(server, model=stages["stage2_alignment"], text=answer)
    assert reply.status_code == 200, reply.text
    found = reply.json()
    assert found["object"] == "trace" and found["text"] == answer and found["spans"], found
    # every stage upstream of DPO is searched, nearest first: its pairs, the SFT conversations, the pretraining
    assert [d["type"] for d in found["datasets"]] == ["preferencedataset", "sftdataset", "pretraindataset"]
    conversations = {c["id"]: c for c in read_conversations(
        nano2_run.out / "stage1_sft" / "data_curation" / "train_conversations.jsonl")}
    for span in found["spans"]:
        assert answer[span["char_start"]:span["char_end"]] == span["text"]
        for source in span["sources"]:
            assert span["text"].strip() in source["context"]  # the span in its training document's context
            if source["dataset_type"] == "sftdataset":
                held = conversations[source["document"]["conversation"]]["messages"][source["document"]["message"]]
                assert span["text"].strip() in held["content"]
    assert any(s["dataset_type"] == "sftdataset" for span in found["spans"] for s in span["sources"])
    # the indexes are the command's, beside each dataset (in the run's stage folders), one per dataset digest
    for dataset in found["datasets"]:
        receipt = nano2_run.out / dataset["path"].split("/")[-2] / ".trace-index" / dataset["digest"] / "receipt.json"
        assert json.loads(receipt.read_text())["digest"] == dataset["digest"]


def test_the_endpoint_answers_what_the_trace_command_prints(server, stages, asked, nano2_run):
    _, answer = asked
    checkpoint = nano2_run.out / "stage2_alignment" / "training"
    done = subprocess.run([sys.executable, "-m", "nemotron.trace", str(checkpoint), answer],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    command = json.loads(done.stdout)["trace"]
    served = trace(server, model=stages["stage2_alignment"], text=answer).json()
    assert served["checkpoint"] == command["model"]
    for key in ("text", "min_tokens", "datasets", "spans"):
        assert served[key] == command[key], key


def test_each_stage_is_searched_in_its_own_lineage(server, stages, asked):
    _, answer = asked
    searched = {stage: [d["type"] for d in trace(server, model=name, text=answer).json()["datasets"]]
                for stage, name in stages.items()}
    assert searched == {"stage0_pretrain": ["pretraindataset"],
                        "stage1_sft": ["sftdataset", "pretraindataset"],
                        "stage2_alignment": ["preferencedataset", "sftdataset", "pretraindataset"]}


@pytest.mark.parametrize("body, message", [
    ({"text": ""}, "Invalid 'text'"),
    ({"text": 3}, "Invalid 'text'"),
    ({}, "Invalid 'text'"),
    ({"text": "I am", "model": "gpt-4"}, "is not served here"),
    ({"text": "I am", "min_tokens": 0}, "Invalid 'min_tokens'"),
    ({"text": "I am", "max_sources": 0}, "Invalid 'max_sources'"),
    ({"text": "I am", "max_sources": "all"}, "Invalid type for 'max_sources'"),
    ('{"text": "\\ud800"}', "lone UTF-16 surrogate"),  # JSON may carry one; httpx would not encode it
    ("not json", "not JSON"),
])
def test_bad_input_is_a_one_line_400(server, body, message):
    reply = httpx.post(f"{server.url}/trace", content=body if isinstance(body, str) else json.dumps(body), timeout=60,
                       headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]["message"]
    assert message in error and "\n" not in error


def test_where_from_marks_the_spans_each_stage_learnt_with_their_sources_in_a_real_browser(
        page, server, stages, asked):  # noqa: F811  (`page` is the imported fixture, as pytest passes it)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    prompt, answer = asked
    dpo = stages["stage2_alignment"]
    page.find_element(By.ID, "compare").click()
    send(page, prompt, done=3)
    column = page.find_element(By.CSS_SELECTOR, f'.turn.compare .turn.assistant.done[data-model="{dpo}"]')
    assert column.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") == answer
    column.find_element(By.CSS_SELECTOR, "button.where-from").click()
    box = WebDriverWait(page, 300).until(lambda d: d.find_element(By.CSS_SELECTOR, '.where[data-done="1"]'))
    assert box.get_attribute("data-model") == dpo
    shown = {s.get_attribute("data-model"): s for s in box.find_elements(By.CSS_SELECTOR, ".stage")}
    assert list(shown) == [m.name for m in server.served]  # every served stage, in stage order
    for name, stage in shown.items():  # each stage shows the answer whole, its spans marked as the API found them
        assert not stage.find_elements(By.CSS_SELECTOR, ".error"), stage.text
        assert stage.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") == answer
        spans = trace(server, model=name, text=answer).json()["spans"]
        marks = stage.find_elements(By.CSS_SELECTOR, "mark.span")
        assert [m.get_attribute("textContent") for m in marks] == [s["text"] for s in spans]
        for mark, span in zip(marks, spans, strict=True):
            source = span["sources"][0]
            assert mark.get_attribute("data-source").startswith(source["dataset_type"])
            assert all(str(value) in mark.get_attribute("data-source") for value in source["document"].values())
        items = stage.find_elements(By.CSS_SELECTOR, "ul.sources li")
        assert len(items) == len(spans)
        for item, span in zip(items, spans, strict=True):
            assert [c.get_attribute("textContent") for c in item.find_elements(By.TAG_NAME, "code")] == \
                [s["context"] for s in span["sources"]]
    # the DPO model's answer was learnt from its SFT conversations: marked, with that source
    marks = shown[dpo].find_elements(By.CSS_SELECTOR, "mark.span")
    assert marks and any(m.get_attribute("data-source").startswith("sftdataset") for m in marks)
