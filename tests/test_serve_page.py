"""The chat page's token view, click-to-continue and compare view, in a real headless browser (Chromium).

The server runs in this process (`test_serve.LocalServer`) over real checkpoint artifacts holding untrained
tiny models (`builders`): a nano2 DPO checkpoint (chat), a nano3 RL one (reasoning) and a nano2 pretrain one
(plain completion). What the page shows is checked against the API itself, asked the same greedy requests
without streaming through the official `openai` client: the page must show the model's numbers, not its own.
"""

from __future__ import annotations

import json

import openai
import pytest

from browser import headless_chromium
from builders import make_chat_checkpoint, make_pretrain_checkpoint  # tests/ is on sys.path under pytest
from nemotron.recipes.nano2.artifacts import DPOCheckpoint
from nemotron.recipes.nano3.artifacts import Nano3RLCheckpoint
from nemotron.serve.models import expand_run
from nemotron.serve.reasoning import split
from test_serve import LocalServer

DPO, RL, BASE = "nano2-stage2_alignment", "nano3-stage2_rl", "nano2-stage0_pretrain"
HELLO = [{"role": "user", "content": "hello"}]
MAX_TOKENS = 12
TOLERANCE = 1e-5  # float32: a streamed decode against a whole one


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    make_chat_checkpoint(root / "nano2" / "stage2_alignment" / "training", DPOCheckpoint, "nano2")
    make_chat_checkpoint(root / "nano3" / "stage2_rl" / "training", Nano3RLCheckpoint, "nano3")
    make_pretrain_checkpoint(root / "nano2" / "stage0_pretrain" / "training")
    return root


@pytest.fixture(scope="module")
def server(runs):
    root = runs
    local = LocalServer([root / "nano2/stage0_pretrain/training", root / "nano2/stage2_alignment/training",
                         root / "nano3/stage2_rl/training"])
    yield local
    local.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


@pytest.fixture()
def page(server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = headless_chromium()
    try:
        driver.get(server.root + "/")
        WebDriverWait(driver, 120).until(lambda d: len(Select(d.find_element(By.ID, "model")).options) == 3)
        driver.find_element(By.ID, "max-tokens").clear()
        driver.find_element(By.ID, "max-tokens").send_keys(str(MAX_TOKENS))
        yield driver
    finally:
        driver.quit()


def send(driver, text: str, done: int = 1) -> None:
    """Type a prompt, send it, wait until `done` answers have finished."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.ID, "prompt").send_keys(text)
    driver.find_element(By.ID, "send").click()
    WebDriverWait(driver, 120).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn.assistant.done")) >= done)


def shown_tokens(turn) -> list[dict]:
    """Every token span of an answer, in order: its log-probability and alternatives as the page holds them."""
    from selenium.webdriver.common.by import By

    return [{"logprob": float(s.get_attribute("data-logprob")), "top": json.loads(s.get_attribute("data-top"))}
            for s in turn.find_elements(By.CSS_SELECTOR, ".tok")]


def assert_same_logprobs(shown: list[dict], api: list) -> None:
    assert len(shown) == len(api) > 0
    for token, entry in zip(shown, api, strict=True):
        assert token["logprob"] == pytest.approx(entry.logprob, abs=TOLERANCE)
        assert [t["logprob"] for t in token["top"]] == pytest.approx([t.logprob for t in entry.top_logprobs],
                                                                     abs=TOLERANCE)
        assert [t["token"] for t in token["top"]] == [t.token for t in entry.top_logprobs]


@pytest.mark.slow
def test_each_token_shows_the_apis_probability_and_alternatives(page, client):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(page.find_element(By.ID, "model")).select_by_value(DPO)
    send(page, "hello")
    turn = page.find_element(By.CSS_SELECTOR, ".turn.assistant.done")
    whole = client.chat.completions.create(model=DPO, messages=HELLO, temperature=0, max_tokens=MAX_TOKENS,
                                           logprobs=True, top_logprobs=5)
    choice = whole.choices[0]
    assert turn.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") == choice.message.content
    assert_same_logprobs(shown_tokens(turn), choice.logprobs.content)
    # a token's shade is its probability: a surer token is lighter
    spans = turn.find_elements(By.CSS_SELECTOR, ".tok")
    alphas = [float(s.value_of_css_property("background-color").split(",")[-1].rstrip(")")) for s in spans]
    for alpha, entry in zip(alphas, choice.logprobs.content, strict=True):
        assert alpha == pytest.approx(0.65 * (1 - 2.718281828459045 ** entry.logprob), abs=0.01)
    # hovering lists the alternatives with their probabilities
    ActionChains(page).move_to_element(spans[1]).perform()
    alts = page.find_elements(By.CSS_SELECTOR, "#alts button.alt")
    assert len(alts) == 5 and page.find_element(By.ID, "alts").is_displayed()
    first = choice.logprobs.content[1].top_logprobs[0]
    assert alts[0].find_element(By.CSS_SELECTOR, ".p").text == f"{100 * 2.718281828459045 ** first.logprob:.1f}%"


@pytest.mark.slow
def test_a_click_on_an_alternative_continues_exactly_as_the_api_does_from_that_prefix(page, client):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    Select(page.find_element(By.ID, "model")).select_by_value(DPO)
    send(page, "hello")
    turn = page.find_element(By.CSS_SELECTOR, ".turn.assistant.done")
    whole = client.chat.completions.create(model=DPO, messages=HELLO, temperature=0, max_tokens=MAX_TOKENS,
                                           logprobs=True, top_logprobs=5)
    tokens = whole.choices[0].logprobs.content
    k = 2
    ActionChains(page).move_to_element(turn.find_elements(By.CSS_SELECTOR, ".tok")[k]).perform()
    page.find_elements(By.CSS_SELECTOR, "#alts button.alt")[1].click()  # the runner-up, not the greedy choice
    WebDriverWait(page, 120).until(lambda d: d.find_element(By.CSS_SELECTOR, ".turn.assistant.done .meta")
                                   .text.startswith("continued"))
    prefix = "".join(bytes(t.bytes).decode() for t in tokens[:k]) + bytes(tokens[k].top_logprobs[1].bytes).decode()
    assert turn.get_attribute("data-prefix") == prefix
    more = client.chat.completions.create(
        model=DPO, messages=[*HELLO, {"role": "assistant", "content": prefix}], temperature=0, max_tokens=MAX_TOKENS,
        logprobs=True, top_logprobs=5, extra_body={"continue_final_message": True, "add_generation_prompt": False})
    assert turn.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") == \
        prefix + more.choices[0].message.content
    shown = shown_tokens(turn)
    assert len(shown) == k + 1 + len(more.choices[0].logprobs.content)
    assert_same_logprobs(shown[k + 1:], more.choices[0].logprobs.content)  # the new tokens are the API's
    assert shown[k]["logprob"] == tokens[k].top_logprobs[1].logprob  # the picked one keeps its probability


@pytest.mark.slow
def test_the_compare_view_shows_every_served_models_greedy_answer_side_by_side(page, client):
    from selenium.webdriver.common.by import By

    page.find_element(By.ID, "compare").click()
    send(page, "hello", done=3)
    columns = page.find_elements(By.CSS_SELECTOR, ".turn.compare .columns .turn.assistant.done")
    assert [c.get_attribute("data-model") for c in columns] == [BASE, DPO, RL]
    by_model = {c.get_attribute("data-model"): c for c in columns}
    for column in columns:
        assert "error" not in column.find_element(By.CSS_SELECTOR, ".text").get_attribute("class")
    base = client.completions.create(model=BASE, prompt="hello", temperature=0, max_tokens=MAX_TOKENS)
    assert by_model[BASE].find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") == base.choices[0].text
    dpo = client.chat.completions.create(model=DPO, messages=HELLO, temperature=0, max_tokens=MAX_TOKENS)
    assert by_model[DPO].find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") == \
        dpo.choices[0].message.content
    rl = client.chat.completions.create(model=RL, messages=HELLO, temperature=0, max_tokens=MAX_TOKENS)
    thought = by_model[RL].find_element(By.CSS_SELECTOR, "details.reasoning .thought").get_attribute("textContent")
    assert thought == rl.choices[0].message.model_extra["reasoning_content"]
    assert by_model[RL].find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") == \
        (rl.choices[0].message.content or "")
    # each column is a token view of its own model
    for column in columns:
        assert column.find_elements(By.CSS_SELECTOR, ".tok")


@pytest.mark.slow
def test_a_click_on_a_token_in_the_compare_view_shows_its_probability_under_every_served_model(page, client):
    """Teacher-forced on the same prefix: the model that wrote the token gives it its own probability back."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page.find_element(By.ID, "compare").click()
    send(page, "hello", done=3)
    column = page.find_element(By.CSS_SELECTOR, f'.turn.compare .turn.assistant.done[data-model="{DPO}"]')
    token = column.find_elements(By.CSS_SELECTOR, ".tok")[2]
    token.click()
    table = WebDriverWait(page, 120).until(
        lambda d: d.find_element(By.CSS_SELECTOR, '.turn.compare table.stages[data-done="1"]'))
    rows = table.find_elements(By.CSS_SELECTOR, "tr[data-model]")
    assert [r.get_attribute("data-model") for r in rows] == [BASE, DPO, RL]
    own = float(table.find_element(By.CSS_SELECTOR, f'tr[data-model="{DPO}"] td[data-logprob]')
                .get_attribute("data-logprob"))
    assert abs(own - float(token.get_attribute("data-logprob"))) < TOLERANCE
    for row in rows:  # every model answered: a probability, or below the last of its top 20
        assert "%" in row.find_elements(By.TAG_NAME, "td")[1].text, row.text


@pytest.mark.slow
def test_continue_final_message_needs_a_final_assistant_message(client):
    with pytest.raises(openai.BadRequestError, match="continue_final_message"):
        client.chat.completions.create(model=DPO, messages=HELLO, max_tokens=2,
                                       extra_body={"continue_final_message": True})
    with pytest.raises(openai.BadRequestError, match="add_generation_prompt"):
        client.chat.completions.create(model=DPO, messages=[*HELLO, {"role": "assistant", "content": "Hi"}],
                                       max_tokens=2, extra_body={"continue_final_message": True,
                                                                 "add_generation_prompt": True})


@pytest.mark.slow
def test_a_reasoning_models_branch_is_split_as_the_server_splits_prefix_and_continuation(page, client):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    Select(page.find_element(By.ID, "model")).select_by_value(RL)
    send(page, "hello")
    turn = page.find_element(By.CSS_SELECTOR, ".turn.assistant.done")
    turn.find_element(By.CSS_SELECTOR, "details.reasoning summary").click()  # unfold the thoughts: tokens too
    ActionChains(page).move_to_element(turn.find_elements(By.CSS_SELECTOR, ".tok")[3]).perform()
    page.find_elements(By.CSS_SELECTOR, "#alts button.alt")[2].click()
    WebDriverWait(page, 120).until(lambda d: d.find_element(By.CSS_SELECTOR, ".turn.assistant.done .meta")
                                   .text.startswith("continued"))
    prefix = turn.get_attribute("data-prefix")
    more = client.chat.completions.create(
        model=RL, messages=[*HELLO, {"role": "assistant", "content": prefix}], temperature=0, max_tokens=MAX_TOKENS,
        extra_body={"continue_final_message": True, "chat_template_kwargs": {"enable_thinking": True}})
    reasoning, answer = split(prefix + more.choices[0].message.content)
    assert turn.find_element(By.CSS_SELECTOR, "details.reasoning .thought").get_attribute("textContent") == reasoning
    assert turn.find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent") == answer


def test_a_run_folder_serves_each_stages_checkpoint_in_stage_order(runs):
    assert expand_run(str(runs / "nano2")) == [str(runs / "nano2/stage0_pretrain/training"),
                                                str(runs / "nano2/stage2_alignment/training")]
    checkpoint = str(runs / "nano2/stage2_alignment/training")
    assert expand_run(checkpoint) == [checkpoint]  # a checkpoint is itself
    assert expand_run("smollm2") == ["smollm2"]
