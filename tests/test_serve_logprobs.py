"""Token log-probabilities, scoring and checked settings of `nemotron.serve`, through the official `openai` client.

The server runs in this process on a loopback port (`test_serve.LocalServer`) over three real checkpoint
artifacts holding untrained tiny models (`builders`): a nano2 DPO checkpoint (chat), a nano3 RL one (reasoning)
and a nano2 pretrain one (plain completion). Every log-probability the API returns is checked against an
independent path: a plain forward pass of the same model over prompt + completion, no cache, `log_softmax`
in float32, the tokens chosen greedily by that loop (so the server's cached incremental decoding is what is
tested).
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import torch

from builders import make_chat_checkpoint, make_pretrain_checkpoint  # tests/ is on sys.path under pytest
from nemotron.recipes.nano2.artifacts import DPOCheckpoint
from nemotron.recipes.nano3.artifacts import Nano3RLCheckpoint
from test_serve import LocalServer

DPO, RL, BASE = "nano2-stage2_alignment", "nano3-stage2_rl", "nano2-stage0_pretrain"
HELLO = [{"role": "user", "content": "hello"}]
TOLERANCE = 1e-5  # float32: the cached, batched decode against one plain forward pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    make_chat_checkpoint(root / "nano2" / "stage2_alignment" / "training", DPOCheckpoint, "nano2")
    make_chat_checkpoint(root / "nano3" / "stage2_rl" / "training", Nano3RLCheckpoint, "nano3")
    make_pretrain_checkpoint(root / "nano2" / "stage0_pretrain" / "training")
    local = LocalServer([root / "nano2/stage2_alignment/training", root / "nano3/stage2_rl/training",
                         root / "nano2/stage0_pretrain/training"])
    yield local
    local.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def forward_log_probs(served, ids: list[int]) -> torch.Tensor:
    """log_softmax of one plain forward pass over `ids`: row p is the distribution of token p + 1."""
    with torch.no_grad():
        return torch.log_softmax(served.model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)


def greedy_by_forward_passes(served, prompt_ids: list[int], max_tokens: int, stops: list[int]) -> list[int]:
    """Greedy tokens chosen by a full forward pass per step (no cache): the independent path to the answer."""
    ids = list(prompt_ids)
    for _ in range(max_tokens):
        ids.append(int(forward_log_probs(served, ids)[-1].argmax()))
        if ids[-1] in stops:
            break
    return ids[len(prompt_ids):]


def token_bytes(served, token_id: int) -> list[int]:
    """A byte-level BPE token's bytes, from its vocabulary string (GPT-2's byte-to-character map, inverted)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = {c: b for b, c in bytes_to_unicode().items()}
    token = served.tokenizer.convert_ids_to_tokens(token_id)
    if token in served.tokenizer.all_special_tokens:
        return list(token.encode())
    return [chars[c] for c in token]


def stops_of(served) -> list[int]:
    return [served.tokenizer.eos_token_id, *served.stop_token_ids]


# ------------------------------------------------------------------ chat: logprobs.content[]


def test_chat_logprobs_equal_the_forward_pass_whole_and_streamed(server, client):
    from nemotron.data_prep.chat.nano2 import tokenize_prompt

    served = server.by_name[DPO]
    prompt = tokenize_prompt(served.tokenizer, HELLO)
    expected = greedy_by_forward_passes(served, prompt, 12, stops_of(served))
    log_probs = forward_log_probs(served, prompt + expected)[len(prompt) - 1:]
    whole = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=12, temperature=0, logprobs=True,
                                           top_logprobs=3)
    content = whole.choices[0].logprobs.content
    assert len(content) == len(expected) == whole.usage.completion_tokens
    for position, (entry, token) in enumerate(zip(content, expected, strict=True)):
        assert entry.bytes == token_bytes(served, token)
        assert abs(entry.logprob - float(log_probs[position, token])) < TOLERANCE
        values, ids = torch.topk(log_probs[position], 3)
        assert [t.bytes for t in entry.top_logprobs] == [token_bytes(served, i) for i in ids.tolist()]
        assert max(abs(t.logprob - v) for t, v in zip(entry.top_logprobs, values.tolist(), strict=True)) < TOLERANCE
        assert entry.top_logprobs[0].logprob == entry.logprob  # greedy: the chosen token is the most likely
    special = served.tokenizer.all_special_tokens  # their bytes are their names; the text skips them
    text_bytes = b"".join(bytes(entry.bytes) for entry in content if entry.token not in special)
    assert text_bytes.decode(errors="replace") == whole.choices[0].message.content
    # streamed: each chunk carries the tokens whose text it brings; together, the same entries
    chunks = list(client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=12, temperature=0,
                                                 logprobs=True, top_logprobs=3, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]
    assert all(c.choices[0].logprobs is None for c in chunks if c.choices and not c.choices[0].delta.content
               and not c.choices[0].finish_reason)  # the role chunk carries none
    # without logprobs: none, as before
    plain = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=4, temperature=0)
    assert plain.choices[0].logprobs is None


def test_a_reasoning_models_streamed_logprobs_cover_reasoning_and_answer_tokens(client):
    """nano3's text is split into reasoning and answer while it streams; every token's entry still arrives once,
    in order, whichever delta carries it."""
    ask = dict(model=RL, messages=[{"role": "user", "content": "What is 12+30?"}], max_tokens=14, temperature=0,
               logprobs=True, top_logprobs=1)
    whole = client.chat.completions.create(**ask)
    chunks = list(client.chat.completions.create(stream=True, **ask))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert len(streamed) == whole.usage.completion_tokens
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in whole.choices[0].logprobs.content]


def test_logprobs_are_the_models_own_not_the_sampling_distribution(server, client):
    """Sampled at temperature 1.7 with top_p 0.5, the log-probs stay the model's raw ones (vLLM's default)."""
    from nemotron.data_prep.chat.nano2 import tokenize_prompt

    served = server.by_name[DPO]
    reply = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=10, temperature=1.7, top_p=0.5,
                                           seed=3, logprobs=True, top_logprobs=0)
    content = reply.choices[0].logprobs.content
    vocab = {tuple(token_bytes(served, i)): i for i in range(len(served.tokenizer))}
    ids = [vocab[tuple(entry.bytes)] for entry in content]
    prompt = tokenize_prompt(served.tokenizer, HELLO)
    log_probs = forward_log_probs(served, prompt + ids)[len(prompt) - 1:]
    for position, (entry, token) in enumerate(zip(content, ids, strict=True)):
        assert abs(entry.logprob - float(log_probs[position, token])) < TOLERANCE
        assert entry.top_logprobs == []


# ------------------------------------------------------------------ completions: tokens, token_logprobs, top_logprobs


def test_completion_logprobs_equal_the_forward_pass_whole_and_streamed(server, client):
    served = server.by_name[BASE]
    prompt = served.completion_ids("To be or not")
    expected = greedy_by_forward_passes(served, prompt, 8, stops_of(served))
    log_probs = forward_log_probs(served, prompt + expected)[len(prompt) - 1:]
    whole = client.completions.create(model=BASE, prompt="To be or not", max_tokens=8, temperature=0, logprobs=2)
    logprobs = whole.choices[0].logprobs
    assert len(logprobs.tokens) == len(expected) == whole.usage.completion_tokens
    for position, token in enumerate(expected):
        assert abs(logprobs.token_logprobs[position] - float(log_probs[position, token])) < TOLERANCE
        top = logprobs.top_logprobs[position]
        values = torch.topk(log_probs[position], 2).values.tolist()
        assert len(top) <= 3 and logprobs.tokens[position] in top  # k most likely and the chosen one
        assert sorted(top.values(), reverse=True)[:2] == pytest.approx(values, abs=TOLERANCE)
    assert "".join(logprobs.tokens) == whole.choices[0].text
    assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(len(logprobs.tokens))]
    chunks = [c for c in client.completions.create(model=BASE, prompt="To be or not", max_tokens=8, temperature=0,
                                                   logprobs=2, stream=True) if c.choices]
    joined = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
    for chunk in chunks:
        if chunk.choices[0].logprobs is not None:
            for key in joined:
                joined[key] += getattr(chunk.choices[0].logprobs, key)
            assert "".join(chunk.choices[0].logprobs.tokens) == chunk.choices[0].text  # a chunk's own tokens
    assert joined == {key: getattr(logprobs, key) for key in joined}


def test_echo_with_max_tokens_0_scores_the_prompt_without_generating(server, client):
    served = server.by_name[BASE]
    prompt = "To be or not to be, that is"
    ids = served.completion_ids(prompt)
    log_probs = forward_log_probs(served, ids)
    scored = client.completions.create(model=BASE, prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    choice = scored.choices[0]
    assert choice.text == prompt and choice.finish_reason == "length"
    assert scored.usage.completion_tokens == 0 and scored.usage.prompt_tokens == len(ids)
    assert choice.logprobs.token_logprobs[0] is None and choice.logprobs.top_logprobs[0] is None
    assert len(choice.logprobs.token_logprobs) == len(ids)
    for position in range(1, len(ids)):
        assert abs(choice.logprobs.token_logprobs[position] - float(log_probs[position - 1, ids[position]])) < TOLERANCE
        assert max(choice.logprobs.top_logprobs[position].values()) == pytest.approx(
            float(log_probs[position - 1].max()), abs=TOLERANCE)
    echoed = client.completions.create(model=BASE, prompt=prompt, max_tokens=0, echo=True)  # no logprobs asked
    assert echoed.choices[0].text == prompt and echoed.choices[0].logprobs is None
    # lm-eval's request: echo, logprobs 1, max_tokens 1: the prompt's scores, then one greedy token
    one = client.completions.create(model=BASE, prompt=ids, max_tokens=1, echo=True, logprobs=1, temperature=0)
    assert one.choices[0].logprobs.token_logprobs[:-1] == choice.logprobs.token_logprobs
    assert one.choices[0].text.startswith(served.tokenizer.decode(ids))


def test_a_list_of_prompts_gets_one_choice_each_in_order(server, client):
    served = server.by_name[BASE]
    prompts = ["To be", served.completion_ids("or not to be"), "Friends, Romans"]
    batch = client.completions.create(model=BASE, prompt=prompts, max_tokens=5, temperature=0, logprobs=1)
    assert [c.index for c in batch.choices] == [0, 1, 2]
    total = 0
    for choice, prompt in zip(batch.choices, prompts, strict=True):
        alone = client.completions.create(model=BASE, prompt=prompt, max_tokens=5, temperature=0, logprobs=1)
        assert choice.text == alone.choices[0].text  # batched with padding, the same greedy answer
        assert choice.logprobs.token_logprobs == pytest.approx(alone.choices[0].logprobs.token_logprobs,
                                                               abs=TOLERANCE)
        total += alone.usage.total_tokens
    assert batch.usage.total_tokens == total
    # token ids and the string they encode are the same prompt
    as_ids = client.completions.create(model=BASE, prompt=served.completion_ids("To be"), max_tokens=5, temperature=0)
    assert as_ids.choices[0].text == batch.choices[0].text
    # streamed, every choice arrives, each under its own index
    texts = ["", "", ""]
    finished = set()
    for chunk in client.completions.create(model=BASE, prompt=prompts, max_tokens=5, temperature=0, stream=True):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.finish_reason:
                finished.add(choice.index)
    assert texts == [c.text for c in batch.choices] and finished == {0, 1, 2}


# ------------------------------------------------------------------ out-of-range settings: one-line 400s


@pytest.mark.parametrize("path, fields, param, words", [
    ("chat/completions", {"temperature": -3}, "temperature", "Expected a value >= 0, but got -3"),
    ("chat/completions", {"temperature": 2.5}, "temperature", "Expected a value <= 2, but got 2.5"),
    ("chat/completions", {"temperature": "hot"}, "temperature", "expected a decimal, but got a string"),
    ("chat/completions", {"top_p": 7}, "top_p", "Expected a value <= 1, but got 7"),
    ("chat/completions", {"top_p": 0}, "top_p", "Expected a value > 0, but got 0"),
    ("chat/completions", {"max_tokens": -1}, "max_tokens", "Expected a value >= 1, but got -1"),
    ("chat/completions", {"max_tokens": "many"}, "max_tokens", "expected an integer, but got a string"),
    ("chat/completions", {"n": 0}, "n", "Expected a value >= 1, but got 0"),
    ("chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "Expected a value <= 20"),
    ("chat/completions", {"top_logprobs": 2}, "top_logprobs", "'logprobs' must be set to true"),
    ("chat/completions", {"logprobs": "yes"}, "logprobs", "expected a boolean"),
    ("chat/completions", {"max_tokens": 1020}, "max_tokens", "exceed the model's context of 1024 tokens"),
    ("chat/completions", {"seed": 1 << 64}, "seed", "integer above maximum value"),
    ("completions", {"logprobs": 21}, "logprobs", "Expected a value <= 20, but got 21"),
    ("completions", {"max_tokens": -1}, "max_tokens", "Expected a value >= 0, but got -1"),
    ("completions", {"prompt": [5] * 1100}, "prompt", "does not fit the model's context of 1024 tokens"),
    ("completions", {"prompt": ["To be", [5] * 1100]}, "prompt", "prompt 1 (1100 tokens) does not fit"),
    ("completions", {"prompt": [5, 99999]}, "prompt", "token id 99999 is outside the model's vocabulary"),
    ("completions", {"prompt": []}, "prompt", "Invalid 'prompt'"),
    ("completions", {"echo": True, "stream": True}, "echo", "not supported with stream"),
])
def test_an_out_of_range_setting_is_a_one_line_openai_400(server, client, path, fields, param, words):
    base = {"model": DPO, "messages": HELLO} if path.startswith("chat") else {"model": BASE, "prompt": "To be"}
    reply = httpx.post(f"{server.url}/{path}", content=json.dumps({**base, **fields}), timeout=60,
                       headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and words in error["message"] and "\n" not in error["message"]
    assert param in error["message"] or error["code"] == "context_length_exceeded"
    assert client.completions.create(model=BASE, prompt="To be", max_tokens=2).choices[0].finish_reason


def test_the_openai_client_raises_bad_request_with_the_message(client):
    with pytest.raises(openai.BadRequestError, match="Invalid 'temperature'"):
        client.chat.completions.create(model=DPO, messages=HELLO, temperature=-3)


def test_a_temperature_too_small_to_divide_by_is_greedy(client):
    """1e-30 is inside [0, 2]: answered (greedily, as vLLM does below 1e-5), not a NaN that fails the batch."""
    greedy = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=8, temperature=0)
    tiny = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=8, temperature=1e-30)
    assert tiny.choices[0].message.content == greedy.choices[0].message.content


# ------------------------------------------------------------------ the SDG client's view


def test_sdg_client_reply_carries_the_logprobs_when_asked(server, client):
    from nemotron.sdg.client import Client, Endpoint

    sdg = Client(Endpoint(url=server.url, model=DPO, max_tokens=6, max_retries=0))
    assert sdg.chat(HELLO).logprobs is None
    reply = sdg.chat(HELLO, top_logprobs=2)
    api = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=6, temperature=0, seed=0,
                                         logprobs=True, top_logprobs=2)
    assert reply.logprobs == [e.model_dump() for e in api.choices[0].logprobs.content]
    assert len(reply.logprobs) == reply.completion_tokens and len(reply.logprobs[0]["top_logprobs"]) == 2


# ------------------------------------------------------------------ lm-eval's local-completions against the server


@pytest.mark.slow  # lm-eval's import and two harness runs
def test_lm_eval_local_completions_through_the_server_equals_the_in_process_harness(server, tmp_path):
    """A multiple-choice task scored by lm-eval 0.4.13's `local-completions` model against this server equals
    `nemotron.evaluation.harness.run_lm_eval` (lm-eval's `hf` model, in-process) on the same checkpoint:
    each log-likelihood within 1e-4, the same accuracy. (`local-completions` needs lm-eval's [api] extra,
    which the test extra installs: tenacity.)"""
    from lm_eval import simple_evaluate

    from nemotron.data_prep.tokenizer import EOS_ID
    from nemotron.evaluation.harness import chat_choice_task, load_benchmarks, run_lm_eval, write_tasks
    from nemotron.evaluation.multiple_choice import MCItem

    served = server.by_name[DPO]
    model_dir = served.identity["path"] + "/model"
    items = [MCItem("What is 12+30?", ("42", "41", "fourteen"), 0),
             MCItem("Who wrote Hamlet?", ("Shakespeare", "a robot"), 0),
             MCItem("hello", ("Hi! How are you?", "Goodbye.", "I am not yet."), 2),
             MCItem("Is ice cold?", ("yes", "no"), 0)]
    task = chat_choice_task("served_choices", served.tokenizer, items)
    folder = write_tasks(tmp_path / "tasks", [task])
    spec = task.config((folder / f"{task.name}.jsonl").resolve())
    manager = load_benchmarks([], folder)
    in_process = run_lm_eval(model_dir, [spec], manager, batch_size=4)
    through = simple_evaluate(
        model="local-completions", model_args={
            "base_url": f"{server.url}/completions", "model": DPO, "tokenizer": model_dir,
            "tokenizer_backend": "huggingface", "max_length": 1024, "num_concurrent": 1, "max_retries": 1,
            "custom_prefix_token_id": EOS_ID},  # the empty context's token, as run_lm_eval gives the hf model
        tasks=[spec], task_manager=manager, batch_size=4, bootstrap_iters=0, log_samples=True)
    served_samples = sorted(through["samples"][task.name], key=lambda s: s["doc_id"])
    ours = [float(r[0][0]) for s in served_samples for r in s["resps"]]
    in_process_samples = sorted(in_process.samples[task.name], key=lambda s: s["doc_id"])
    theirs = [ll for s in in_process_samples for ll in s["loglikelihoods"]]
    # each choice after its question, and alone (acc_mutual_info's unconditional score)
    assert len(ours) == 2 * sum(len(item.choices) for item in items) == len(theirs)
    assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) < 1e-4
    assert through["results"][task.name]["acc,none"] == in_process.metrics[task.name]["acc"]
