"""The model server and the terminal chat on real checkpoints: a nano2 DPO, a nano3 RL and a pretrain artifact.

The checkpoints are real artifacts of those types holding a real tokenizer (with its recipe's chat
template) and a real untrained tiny model (`builders.make_chat_checkpoint`): training changes the
weights, not what the server or the chat does with them. The server runs in this process on a
loopback port (uvicorn in a thread) and is spoken to by the official `openai` client and by httpx.
Every answer is checked against greedy decoding by transformers' own `generate` on the checkpoint's
prompt, an independent path to the same tokens.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time

import httpx
import pytest
import torch

from browser import headless_chromium  # tests/ is on sys.path under pytest
from builders import make_chat_checkpoint, make_pretrain_checkpoint
from nemotron.recipes.nano2.artifacts import DPOCheckpoint
from nemotron.recipes.nano3.artifacts import Nano3RLCheckpoint
from nemotron.serve.reasoning import ReasoningSplitter, split

DPO, RL, BASE = "nano2-stage2_alignment", "nano3-stage2_rl", "nano2-stage0_pretrain"
HELLO = [{"role": "user", "content": "hello"}]
SUM = [{"role": "user", "content": "What is 12+30?"}]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    make_chat_checkpoint(root / "nano2" / "stage2_alignment" / "training", DPOCheckpoint, "nano2")
    make_chat_checkpoint(root / "nano3" / "stage2_rl" / "training", Nano3RLCheckpoint, "nano3")
    make_pretrain_checkpoint(root / "nano2" / "stage0_pretrain" / "training")
    return root


class LocalServer:
    """`nemotron.serve`'s app on a free loopback port, in a thread of this process."""

    def __init__(self, folders):
        import uvicorn

        from nemotron.serve.app import create_app
        from nemotron.serve.engine import Engine
        from nemotron.serve.models import load_served

        self.served = [load_served(folder) for folder in folders]
        engines = [Engine(m.model, m.tokenizer, max_batch_size=8, stop_token_ids=m.stop_token_ids) for m in self.served]
        self.by_name = {m.name: m for m in self.served}
        config = uvicorn.Config(create_app(list(zip(self.served, engines, strict=True))), host="127.0.0.1", port=0,
                                log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.root, self.url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/v1"

    def health(self) -> dict:
        return httpx.get(f"{self.root}/health", timeout=30).json()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def server(runs):
    local = LocalServer([runs / "nano2/stage2_alignment/training", runs / "nano3/stage2_rl/training",
                         runs / "nano2/stage0_pretrain/training"])
    yield local
    local.stop()


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def reference_greedy(served, prompt_ids: list[int], max_tokens: int) -> str:
    """transformers' `generate`, greedy, on the same prompt ids, decoded as the server decodes."""
    with torch.no_grad():
        out = served.model.generate(input_ids=torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=max_tokens,
                                    eos_token_id=[served.tokenizer.eos_token_id, *served.stop_token_ids],
                                    pad_token_id=served.tokenizer.pad_token_id)
    ids = out[0, len(prompt_ids):].tolist()
    ends = [i for i, t in enumerate(ids) if t in (served.tokenizer.eos_token_id, *served.stop_token_ids)]
    return served.tokenizer.decode(ids[: ends[0]] if ends else ids, skip_special_tokens=True)


def stream_chat(client, **kwargs) -> tuple[dict, list]:
    """Concatenated content / reasoning_content / reasoning of a streamed chat, and its chunks."""
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    text = {"content": "", "reasoning_content": "", "reasoning": ""}
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta.model_dump()
            for key in text:
                text[key] += delta.get(key) or (getattr(choice.delta, "model_extra", None) or {}).get(key) or ""
    return text, chunks


# ------------------------------------------------------------------ reasoning apart from the answer


def test_reasoning_split_is_the_same_for_any_cut_of_the_stream():
    pieces = ["Add", " the", " ones", ":", " 2", "+", "0", "\n", "\n\n", "</think>", "</thi", "nk>", "<", "/", "t",
              "The", " answer", " is", " 42", ".", " ", "\n", "think>", "\u00e9"]
    for seed in range(300):
        rng = random.Random(seed)
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        thinking = rng.random() < 0.8
        whole = split(text, thinking)
        splitter, got = ReasoningSplitter(thinking), ["", ""]
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 8))))
        for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
            reasoning, answer = splitter.feed(text[start:end])
            got = [got[0] + reasoning, got[1] + answer]
        rest = splitter.finish()
        assert (got[0] + rest[0], got[1] + rest[1]) == whole, f"seed {seed}: {text!r} cut at {cuts}"
        if thinking and "</think>" in text:
            before, _, after = text.partition("</think>")
            assert whole == (before.rstrip("\n"), after.lstrip("\n")), f"seed {seed}: {text!r}"
        elif not thinking:
            assert whole == ("", text), f"seed {seed}"


# ------------------------------------------------------------------ structured output


def test_a_capped_string_holds_no_raw_control_character():
    """xgrammar 0.2.8 admits raw U+0000-U+001F in a string with maxLength (mlc-ai/xgrammar#800); ours does not."""
    import xgrammar
    from xgrammar.testing import _is_grammar_accept_string as accepts

    from nemotron.serve.grammar import json_schema_grammar

    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5},
                                                          "b": {"type": "string"}}, "required": ["a", "b"]})
    theirs = xgrammar.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=True)
    ours = json_schema_grammar(schema)
    for bad in ('{"a": "a\tb", "b": ""}', '{"a": "a\x0eb", "b": ""}'):
        assert accepts(theirs, bad) and not accepts(ours, bad)  # the bug is there, and repaired
        with pytest.raises(json.JSONDecodeError, match="Invalid control character"):
            json.loads(bad)
    for text, valid in (('{"a": "é ab", "b": "x"}', True), ('{"a": "abcdef", "b": ""}', False),
                        ('{"a": "ab", "b": "x\ty"}', False), ('{"a": "ab","b": ""}', False)):
        assert accepts(ours, text) == accepts(theirs, text) == valid, text


# ------------------------------------------------------------------ the terminal chat


@pytest.mark.slow
def test_chat_command_answers_a_prompt_with_the_dpo_checkpoint_and_its_template(runs):
    """The command of the report card, as a user types it: one answer on stdout, the checkpoint's greedy one."""
    from nemotron.data_prep.chat.nano2 import tokenize_prompt
    from nemotron.serve.models import load_served

    folder = runs / "nano2" / "stage2_alignment" / "training"
    done = subprocess.run([sys.executable, "-m", "nemotron.chat", str(folder), "--prompt", "hello", "--max-tokens",
                           "12"], capture_output=True, text=True, timeout=600, cwd=runs.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    served = load_served(folder)
    assert served.format == "nano2"
    assert done.stdout == reference_greedy(served, tokenize_prompt(served.tokenizer, HELLO), 12) + "\n"
    assert "nano2 chat" in done.stderr


def test_chat_with_nano3_shows_reasoning_apart_and_answers_at_once_with_reasoning_off(runs, capsys, monkeypatch):
    from nemotron.chat.__main__ import Config, main
    from nemotron.data_prep.chat.nano3 import tokenize_nano3_prompt
    from nemotron.serve.models import load_served

    folder = runs / "nano3" / "stage2_rl" / "training"
    served = load_served(folder)
    monkeypatch.chdir(runs)  # no model given: the newest chat checkpoint under runs/ (the nano3 one, made last)
    main(Config(prompt=SUM[0]["content"], max_tokens=10, runs="."))
    out, err = capsys.readouterr()
    reasoning, answer = split(reference_greedy(served, tokenize_nano3_prompt(served.tokenizer, SUM), 10))
    assert "nano3 chat" in err and "[reasoning]" in err and reasoning and reasoning in err
    assert out == answer + "\n"  # the answer alone on stdout (none: an untrained model never closes </think>)
    main(Config(model=str(folder), prompt=SUM[0]["content"], max_tokens=10, reasoning=False))
    out, err = capsys.readouterr()
    off = reference_greedy(served, tokenize_nano3_prompt(served.tokenizer, SUM, enable_thinking=False), 10)
    assert out == off + "\n" and "[reasoning]" not in err


def test_chat_keeps_the_conversation_and_runs_its_commands(runs, capsys, monkeypatch):
    import io

    from nemotron.chat.__main__ import Config, main

    lines = "hello\n/temperature 0.8\n/system Be brief.\n/reasoning off\nhow are you?\n/reset\n/nonsense\nbye\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))  # piped: a line per turn
    main(Config(model=str(runs / "nano2" / "stage2_alignment" / "training"), max_tokens=4))
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3  # three answers
    for note in ("[temperature 0.8]", "[system message set]", "does not reason", "[conversation forgotten]",
                 "[commands: /reset"):
        assert note in err
    assert "\x1b[" not in out + err  # piped: no colour codes


def test_each_turn_sees_the_conversation_so_far_until_reset(runs, capsys):
    from nemotron.chat.__main__ import Chat, Config, Terminal
    from nemotron.data_prep.chat.nano2 import tokenize_prompt
    from nemotron.serve.engine import Engine
    from nemotron.serve.models import load_served

    served = load_served(runs / "nano2" / "stage2_alignment" / "training")
    chat = Chat(served, Engine(served.model, served.tokenizer, stop_token_ids=served.stop_token_ids),
                Config(max_tokens=6, system="Be brief."), Terminal())
    first = chat.ask("hello")
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"},
               {"role": "assistant", "content": first}]
    assert chat.messages("and you?") == history + [{"role": "user", "content": "and you?"}]
    second = chat.ask("and you?")  # answered from the whole conversation, in the checkpoint's format
    ids = tokenize_prompt(served.tokenizer, history + [{"role": "user", "content": "and you?"}])
    assert second == reference_greedy(served, ids, 6)
    chat.command("/reset")
    assert chat.messages("hi") == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    capsys.readouterr()


def test_a_pretrain_checkpoint_is_plain_completion_and_the_chat_says_so(runs, capsys):
    from nemotron.chat.__main__ import Config, main
    from nemotron.serve.models import load_served

    folder = runs / "nano2" / "stage0_pretrain" / "training"
    served = load_served(folder)
    assert served.format == "completion"
    main(Config(model=str(folder), prompt="To be or not", max_tokens=6))
    out, err = capsys.readouterr()
    assert "plain completion" in err
    assert out == reference_greedy(served, served.completion_ids("To be or not"), 6) + "\n"


def test_report_cards_end_with_the_chat_command_of_the_final_model(runs, monkeypatch):
    from nemotron.artifact import read_metadata
    from nemotron.recipes.report_card import talk_section

    monkeypatch.chdir(runs.parent)
    stages = ("stage0_pretrain", "stage2_alignment")
    artifacts = [read_metadata(runs / "nano2" / stage / "training") for stage in stages]
    lines = talk_section(artifacts)
    assert f"python -m nemotron.chat {runs.name}/nano2/stage2_alignment/training" in lines
    assert talk_section(artifacts[:1]) == []  # a base model alone: no chat to offer


# ------------------------------------------------------------------ the server through the openai client


def test_models_list_what_is_served_and_the_page_is_served(server, client):
    listed = {m.id: m.model_extra["nemotron"] for m in client.models.list().data}
    assert set(listed) == {DPO, RL, BASE}
    assert (listed[DPO]["format"], listed[RL]["format"], listed[BASE]["format"]) == ("nano2", "nano3", "completion")
    assert listed[RL]["reasons"] and listed[DPO]["artifact"] == "dpocheckpoint"
    page = httpx.get(server.root + "/", timeout=30)
    assert page.status_code == 200 and "/v1/chat/completions" in page.text and "<script" in page.text


def test_streamed_and_whole_greedy_answers_are_identical_with_usage(server, client):
    from nemotron.data_prep.chat.nano2 import tokenize_prompt

    served = server.by_name[DPO]
    whole = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=16, temperature=0)
    text, chunks = stream_chat(client, model=DPO, messages=HELLO, max_tokens=16, temperature=0,
                               stream_options={"include_usage": True})
    expected = reference_greedy(served, tokenize_prompt(served.tokenizer, HELLO), 16)
    assert whole.choices[0].message.content == text["content"] == expected
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    usage = whole.usage
    assert usage.prompt_tokens == len(tokenize_prompt(served.tokenizer, HELLO))
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # text completions stream too, on the base model
    plain = client.completions.create(model=BASE, prompt="To be or not", max_tokens=8, temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=BASE, prompt="To be or not", max_tokens=8, temperature=0, stream=True) if c.choices)
    assert plain.choices[0].text == streamed
    assert plain.choices[0].finish_reason == "length" and plain.usage.completion_tokens == 8


def test_nano3_reasoning_in_both_fields_and_enable_thinking_false_answers_in_content(server, client):
    from nemotron.data_prep.chat.nano3 import tokenize_nano3_prompt

    served = server.by_name[RL]
    whole = client.chat.completions.create(model=RL, messages=SUM, max_tokens=12, temperature=0)
    message = whole.choices[0].message.model_extra
    reasoning, answer = split(reference_greedy(served, tokenize_nano3_prompt(served.tokenizer, SUM), 12))
    assert reasoning and message["reasoning_content"] == message["reasoning"] == reasoning
    assert (whole.choices[0].message.content or "") == answer
    text, _ = stream_chat(client, model=RL, messages=SUM, max_tokens=12, temperature=0)
    assert text["reasoning_content"] == text["reasoning"] == reasoning and text["content"] == answer
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    quick = client.chat.completions.create(model=RL, messages=SUM, max_tokens=12, temperature=0, extra_body=off)
    expected = reference_greedy(served, tokenize_nano3_prompt(served.tokenizer, SUM, enable_thinking=False), 12)
    assert quick.choices[0].message.content == expected and quick.choices[0].message.model_extra["reasoning"] is None
    text, _ = stream_chat(client, model=RL, messages=SUM, max_tokens=12, temperature=0, extra_body=off)
    assert text == {"content": expected, "reasoning_content": "", "reasoning": ""}


def test_stop_strings_and_max_tokens_end_the_answer_with_an_honest_finish_reason(client):
    full = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=16, temperature=0)
    text = full.choices[0].message.content
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 16
    stop = text[4:7]
    cut = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=16, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed, chunks = stream_chat(client, model=DPO, messages=HELLO, max_tokens=16, temperature=0, stop=stop)
    assert streamed["content"] == cut.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_eight_concurrent_streaming_clients_each_get_the_whole_answer_in_shared_batches(server, client):
    from concurrent.futures import ThreadPoolExecutor

    whole = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=12, temperature=0)
    before = server.health()["engines"][DPO]
    with ThreadPoolExecutor(8) as pool:  # the same prompt: no padding, so batching cannot change a greedy token
        streams = list(pool.map(lambda _: stream_chat(client, model=DPO, messages=HELLO, max_tokens=12, temperature=0,
                                                      stream_options={"include_usage": True}), range(8)))
    for text, chunks in streams:
        assert text["content"] == whole.choices[0].message.content
        assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    after = server.health()["engines"][DPO]
    assert after["requests"] - before["requests"] == 8 and after["batches"] - before["batches"] < 8


@pytest.mark.parametrize("body, message", [
    ("not json", "not JSON"),
    ({"model": "gpt-4", "messages": HELLO}, "is not served here"),
    ({"model": ["gpt-4"], "messages": HELLO}, "Invalid type for 'model'"),
    ({"model": DPO, "messages": [{"role": "user", "content": "word " * 1100}]}, "does not fit the model's context"),
    ({"model": DPO, "messages": HELLO, "max_tokens": "many"}, "Invalid type for 'max_tokens'"),
    ({"model": DPO, "messages": "hello"}, "messages must be a non-empty list"),
    ({"model": BASE, "messages": HELLO}, "base model without a chat format"),
    ({"model": RL, "messages": SUM, "chat_template_kwargs": {"enable_thinking": "no"}}, "true or false"),
    ({"model": DPO, "messages": HELLO, "n": 2}, "n > 1"),
])
def test_a_bad_request_is_one_line_400_and_the_server_serves_the_next(server, client, body, message):
    raw = body if isinstance(body, str) else json.dumps(body)
    reply = httpx.post(f"{server.url}/chat/completions", content=raw, timeout=60,
                       headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]["message"]
    assert message in error and "\n" not in error
    assert client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=2).choices[0].finish_reason


def test_where_from_a_checkpoint_saved_without_its_training_data_is_a_one_line_400(server):
    """These checkpoints record no inputs (no lineage): /v1/trace says so; the real tracing is in
    test_serve_where_from.py, on a recipe run."""
    reply = httpx.post(f"{server.url}/trace", json={"model": DPO, "text": "I am not yet."}, timeout=60)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "no_training_data" and error["param"] == "model"
    assert f"model {DPO!r}" in error["message"] and "no training data in its lineage" in error["message"]
    assert "\n" not in error["message"]


def test_a_client_that_disconnects_mid_stream_stops_its_generation(server, client):
    long = {"model": BASE, "prompt": "To be or not", "max_tokens": 900, "temperature": 0}
    before = server.health()["engines"][BASE]
    with httpx.stream("POST", f"{server.url}/completions", json={**long, "stream": True}, timeout=120) as reply:
        events = reply.iter_lines()
        got = [line for line, _ in zip(events, range(6), strict=False) if line.startswith("data: ")]
    assert len(got) >= 3 and "[DONE]" not in "".join(got)
    deadline = time.monotonic() + 120
    while server.health()["engines"][BASE]["cancelled"] == before["cancelled"]:
        assert time.monotonic() < deadline, "the engine did not stop the disconnected request"
        time.sleep(0.2)
    after = server.health()["engines"][BASE]
    assert after["generated_tokens"] - before["generated_tokens"] < 900  # it stopped early
    answer = client.completions.create(model=BASE, prompt="To be", max_tokens=3, temperature=0)
    assert answer.choices[0].finish_reason == "length"


def test_sdg_endpoint_extra_body_turns_reasoning_off(server):
    from nemotron.sdg.client import Client, Endpoint

    on = Client(Endpoint(url=server.url, model=RL, max_tokens=8, max_retries=0))
    off = Client(Endpoint(url=server.url, model=RL, max_tokens=8, max_retries=0,
                          extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
    assert on.chat(SUM).text == ""  # with reasoning on, 8 tokens of an untrained model never reach the answer
    assert off.chat(SUM).text  # off: the answer lands in content at once


# ------------------------------------------------------------------ the chat page in a real headless browser


def test_the_page_streams_the_same_greedy_answer_with_reasoning_apart_in_a_real_browser(server, client):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = headless_chromium()
    try:
        driver.get(server.root + "/")
        wait = WebDriverWait(driver, 300)
        wait.until(lambda d: len(Select(d.find_element(By.ID, "model")).options) == 3)
        Select(driver.find_element(By.ID, "model")).select_by_value(RL)
        assert driver.find_element(By.ID, "thinking").is_selected()
        driver.find_element(By.ID, "max-tokens").clear()
        driver.find_element(By.ID, "max-tokens").send_keys("40")
        driver.find_element(By.ID, "prompt").send_keys(SUM[0]["content"])
        driver.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".turn.assistant.done"))
        turn = driver.find_element(By.CSS_SELECTOR, ".turn.assistant.done")
        thought = turn.find_element(By.CSS_SELECTOR, "details.reasoning .thought").get_attribute("textContent")
        answer = turn.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent")
        assert "error" not in turn.get_attribute("class")
        # the server's own non-streamed greedy answer to the same request
        whole = client.chat.completions.create(model=RL, messages=SUM, temperature=0, max_tokens=40,
                                               extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        assert thought == whole.choices[0].message.model_extra["reasoning_content"]
        assert answer == (whole.choices[0].message.content or "")
        assert "tokens, finish:" in turn.text  # the usage line from stream_options.include_usage
        # reasoning off, then the nano2 model: answers in content, identical to the non-streamed ones
        driver.find_element(By.ID, "new-chat").click()
        assert not driver.find_elements(By.CSS_SELECTOR, ".turn")
        Select(driver.find_element(By.ID, "model")).select_by_value(DPO)
        driver.find_element(By.ID, "prompt").send_keys("hello")
        driver.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".turn.assistant.done"))
        turn = driver.find_element(By.CSS_SELECTOR, ".turn.assistant.done")
        whole = client.chat.completions.create(model=DPO, messages=HELLO, temperature=0, max_tokens=40)
        assert turn.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") == \
            whole.choices[0].message.content
        assert not turn.find_elements(By.CSS_SELECTOR, "details.reasoning")
    finally:
        driver.quit()


def test_a_greedy_answer_does_not_depend_on_what_else_is_in_the_batch(server, client):
    """Other requests of other lengths join and leave while this one decodes, in the same forward passes: the
    same tokens, log-probs equal to float rounding (the engine's guarantee; tests/test_serve_batching.py)."""
    from concurrent.futures import ThreadPoolExecutor

    alone = client.completions.create(model=BASE, prompt="To be or not", max_tokens=24, temperature=0, logprobs=2)
    others = [("O Romeo", 40), ("What light through yonder window breaks, it is the east", 3), ("Now", 17)]
    with ThreadPoolExecutor(4) as pool:
        busy = [pool.submit(client.completions.create, model=BASE, prompt=p, max_tokens=n, temperature=0)
                for p, n in others]
        beside = pool.submit(client.completions.create, model=BASE, prompt="To be or not", max_tokens=24,
                             temperature=0, logprobs=2).result(timeout=120)
        assert all(f.result(timeout=120).choices[0].finish_reason for f in busy)
    assert beside.choices[0].text == alone.choices[0].text
    assert beside.choices[0].logprobs.tokens == alone.choices[0].logprobs.tokens
    assert beside.choices[0].logprobs.token_logprobs == pytest.approx(alone.choices[0].logprobs.token_logprobs,
                                                                     abs=1e-4)


def test_sixteen_concurrent_streaming_clients_all_complete(server, client):
    from concurrent.futures import ThreadPoolExecutor

    lengths = [2 + 3 * i for i in range(16)]  # rows leave at different steps while the others go on
    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(stream_chat, client, model=DPO, messages=HELLO, max_tokens=n, temperature=0,
                               stream_options={"include_usage": True}) for n in lengths]
        streams = [f.result(timeout=300) for f in futures]
    for n, (_, chunks) in zip(lengths, streams, strict=True):
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert 0 < chunks[-1].usage.completion_tokens <= n


def test_a_single_turn_model_is_asked_one_turn_at_a_time_until_history_on(runs, capsys, monkeypatch):
    import io

    from nemotron.chat.__main__ import Chat, Config, Terminal, main
    from nemotron.serve.engine import Engine
    from nemotron.serve.models import load_served

    served = load_served(runs / "nano3" / "stage2_rl" / "training")
    assert served.single_turn and not load_served(runs / "nano2" / "stage2_alignment" / "training").single_turn
    chat = Chat(served, Engine(served.model, served.tokenizer, stop_token_ids=served.stop_token_ids),
                Config(max_tokens=40, reasoning=False), Terminal())
    first = chat.ask("What is 12+30?")
    assert first.strip() and chat.messages("And 5+5?") == [{"role": "user", "content": "And 5+5?"}]
    chat.command("/history on")
    chat.ask("What is 12+30?")
    assert [m["role"] for m in chat.messages("And 5+5?")] == ["user", "assistant", "user"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    main(Config(model=str(runs / "nano3" / "stage2_rl" / "training"), max_tokens=4))
    assert "trained on single turns" in capsys.readouterr().err


def test_a_request_without_sampling_settings_is_sampled_as_vllm_would_and_the_page_sends_greedy(server, client,
                                                                                                   tmp_path):
    """vLLM's default: the model's generation_config.json, else temperature 1 and top_p 1 (what OpenAI's API does
    and clients rely on); the page and the terminal chat send their greedy setting explicitly."""
    from nemotron.chat.__main__ import Config as ChatConfig
    from nemotron.serve.app import PAGE
    from nemotron.serve.models import FALLBACK_SAMPLING, default_sampling

    listed = {m.id: m.model_extra["nemotron"] for m in client.models.list().data}
    assert {k: listed[DPO]["sampling"][k] for k in FALLBACK_SAMPLING} == {"temperature": 1.0, "top_p": 1.0}
    assert listed[DPO]["sampling"]["from"].startswith("fallback") and listed[RL]["single_turn"]
    default = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=12, seed=7)
    at_one = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=12, temperature=1, seed=7)
    greedy = client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=12, temperature=0, seed=7)
    assert default.choices[0].message.content == at_one.choices[0].message.content
    assert default.choices[0].message.content != greedy.choices[0].message.content
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.6, "top_p": 0.95, "eos_token_id": 2}')
    assert default_sampling(tmp_path) == {"temperature": 0.6, "top_p": 0.95, "from": "generation_config.json"}
    page = PAGE.read_text()
    assert 'id="temperature" value="0"' in page and "temperature: view.temperature" in page
    assert ChatConfig().temperature == 0


def test_a_run_folder_answers_a_request_naming_no_model_with_its_final_chat_model(runs):
    """`python -m nemotron.serve runs/nano2` serves stage 0 (a base model) first: a request naming no model gets
    the run's final chat model, not the base model's refusal; with a chat model first, the first."""
    from nemotron.serve.app import ServedModels
    from nemotron.serve.models import expand_run, load_served

    served = [(load_served(spec), None) for spec in expand_run(str(runs / "nano2"))]
    assert [m.format for m, _ in served] == ["completion", "nano2"]
    assert ServedModels(served).pick({})[0].name == "nano2-stage2_alignment"
    assert ServedModels(served[::-1]).pick({})[0].name == "nano2-stage2_alignment"
    assert ServedModels(served).pick({"model": "nano2-stage0_pretrain"})[0].format == "completion"


def test_evaluation_through_the_server_finds_a_served_checkpoint_by_its_folder(server, runs):
    """`python -m nemotron.evaluation runs/.../training --through-server URL`: the folder is matched by its digest to
    the model served under `nano2-stage2_alignment`, and the results go beside that run."""
    from nemotron.evaluation.__main__ import beside_the_run
    from nemotron.evaluation.through_server import served_model

    folder = runs / "nano2" / "stage2_alignment" / "training"
    entry = served_model(server.root, str(folder))
    assert entry["id"] == DPO and served_model(server.root, DPO) == entry
    assert beside_the_run(entry["nemotron"]) == folder.resolve().parent / "evaluation" / "benchmarks"
    assert served_model(server.root, str(runs / "nano3" / "stage2_rl" / "training"))["id"] == RL
