"""`python -m nemotron.artifact browse RUNS -o runs.html`: one self-contained page, read in the real headless
browser the suite already uses (tests/browser.py): the lineage graph, a node's details and curves, a diff."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from browser import headless_chromium  # tests/ is on sys.path under pytest
from nemotron.artifact import METADATA, Artifact, ArtifactPath
from nemotron.artifact.browse import write_page

PY = sys.executable


class Corpus(Artifact):
    text: ArtifactPath


class Trained(Artifact):
    metrics_path: ArtifactPath
    training_loss: float


def make_run(root: Path, threshold: float) -> Path:
    """data -> train, with a metrics log and a report card, like a recipe's run folder."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "text.txt").write_text("to be or not to be\n")
    corpus = Corpus(path=root / "data", text=root / "data" / "text.txt",
                    config={"threshold": threshold, "note": "</script><!-- not the end -->"}).save(step="curate")
    (root / "train").mkdir()
    log = root / "train" / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 5.0 - s / 2, "lr": 0.001 * s}) + "\n" for s in range(1, 7))
                   + json.dumps({"step": 6, "val_loss": 3.0}) + "\n")
    Trained(path=root / "train", inputs=[corpus], metrics_path=log, training_loss=2.0, config={"steps": 6},
            metrics={"training_loss": 2.0, "tokens": 600}).save(step="train")
    (root / "report").mkdir()
    (root / "report" / "report.md").write_text("# Report card\n\n| metric | value |\n")
    return root


def browse(runs: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "nemotron.artifact", "browse", str(runs), "-o", str(out)],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_the_page_is_one_self_contained_file_and_the_same_bytes_for_the_same_runs(tmp_path):
    make_run(tmp_path / "runs" / "a", 0.3)
    make_run(tmp_path / "runs" / "b", 0.1)
    first = write_page(tmp_path / "runs", tmp_path / "one.html").read_bytes()
    assert write_page(tmp_path / "runs", tmp_path / "two.html").read_bytes() == first
    html = first.decode()
    # nothing to fetch: no external script, style, image or link (the SVG namespace is a name, not a fetch)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    # a config value holding "</script>" cannot end the data block early
    assert html.count("</script>") == 2
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S).group(1))
    assert sorted(n["id"] for n in data["nodes"]) == ["a/data", "a/train", "b/data", "b/train"]
    assert "first difference: data: threshold 0.3 -> 0.1" in data["diffs"]["a/data|b/data"]


def test_bad_input_is_one_error_line_and_no_page(tmp_path):
    (tmp_path / "empty").mkdir()
    for runs in (tmp_path / "empty", tmp_path / "missing"):
        done = browse(runs, tmp_path / "page.html")
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: ")
        assert not (tmp_path / "page.html").exists()


def node(driver, node_id: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'.node[data-id="{node_id}"]')


def metric(driver, key: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'#metrics tr[data-key="{key}"] td.value').text


@pytest.mark.slow
def test_a_node_shows_its_details_and_curves_and_two_nodes_their_diff_in_a_real_browser(tmp_path):
    from selenium.webdriver.common.by import By

    make_run(tmp_path / "runs" / "a", 0.3)
    make_run(tmp_path / "runs" / "b", 0.1)
    assert browse(tmp_path / "runs", tmp_path / "runs.html").returncode == 0
    driver = headless_chromium()
    try:
        driver.get((tmp_path / "runs.html").as_uri())
        assert len(driver.find_elements(By.CSS_SELECTOR, ".node")) == 4
        assert len(driver.find_elements(By.CSS_SELECTOR, ".edge")) == 2
        node(driver, "a/train").click()
        assert driver.find_element(By.ID, "node-title").text == "a/train"
        assert metric(driver, "training_loss") == "2" and metric(driver, "tokens") == "600"
        loss = driver.find_element(By.CSS_SELECTOR, '#curves polyline[data-series="loss"]')
        assert len(loss.get_attribute("points").split()) == 6
        assert driver.find_elements(By.CSS_SELECTOR, '#curves polyline[data-series="val_loss"]')
        assert driver.find_element(By.ID, "report").text.startswith("# Report card")
        # compare: a second node shows the diff of the two
        driver.find_element(By.ID, "compare").click()
        node(driver, "b/train").click()
        diff = driver.find_element(By.ID, "diff").text
        assert "first difference: data: threshold 0.3 -> 0.1" in diff
    finally:
        driver.quit()


@pytest.mark.slow
def test_the_ten_steps_of_a_nano2_run_in_a_real_browser(nano2_run, tmp_path):
    from selenium.webdriver.common.by import By

    page = tmp_path / "runs.html"
    done = browse(nano2_run.out, page)
    assert done.returncode == 0, done.stderr
    metadata = {str(p.parent.relative_to(nano2_run.out)): json.loads(p.read_text())
                for p in nano2_run.out.rglob(METADATA)}
    assert len(metadata) == 10
    driver = headless_chromium()
    try:
        driver.get(page.as_uri())
        ids = sorted(n.get_attribute("data-id") for n in driver.find_elements(By.CSS_SELECTOR, ".node"))
        assert ids == sorted(metadata)
        training = "stage0_pretrain/training"
        node(driver, training).click()
        saved = metadata[training]
        assert driver.find_element(By.ID, "node-title").text == training
        assert f"{float(metric(driver, 'training_loss')):.4f}" == f"{saved['metrics']['training_loss']:.4f}"
        records = [json.loads(line) for line in (nano2_run.out / training / "metrics.jsonl").read_text().splitlines()]
        loss = driver.find_element(By.CSS_SELECTOR, '#curves polyline[data-series="loss"]')
        logged = sum("loss" in r for r in records)  # a long log is thinned to about 400 points
        drawn = len(loss.get_attribute("points").split())
        assert drawn == logged if logged <= 400 else 400 <= drawn <= 401
        assert "Report card" in driver.find_element(By.ID, "report-title").text
        # watch it learn: SFT's held-out chats shaded by loss, DPO's probe pairs
        node(driver, "stage1_sft/training").click()
        assert driver.find_element(By.ID, "watch-box").get_attribute("data-kind") == "tokens"
        assert driver.find_elements(By.CSS_SELECTOR, "#heldout .tok[data-shade]")
        node(driver, "stage2_alignment/training").click()
        probes = json.loads((nano2_run.out / "stage2_alignment/training/watch.jsonl").read_text().splitlines()[0])
        assert len(driver.find_elements(By.CSS_SELECTOR, "#probes polyline")) == 2 * len(probes["pairs"])
        assert " probe pairs flipped by step " + str(metadata["stage2_alignment/training"]["steps"]) + " (" in \
            driver.find_element(By.ID, "flipped").text
    finally:
        driver.quit()


class Watched(Artifact):
    metrics_path: ArtifactPath
    watch_path: ArtifactPath


def sample(tokens: list[str], logprob: list[float], reward: float, advantage: float, clipped: list[int]) -> dict:
    return {"text": "".join(tokens), "tokens": tokens, "reward": reward, "correct": reward >= 1,
            "advantage": advantage, "logprob": logprob, "clipped": clipped}


def watched_run(root: Path) -> Path:
    """A GRPO-like training folder and a pretraining-like one, their watch.jsonl as nemotron.training.watch writes
    it: two kept GRPO steps (the second more confident, one token clipped), two validations of a held-out text."""
    grpo = [{"step": 1, "kind": "grpo", "groups": [{"prompt": "12+34?", "answer": "46", "samples": [
                sample(["4", "6"], [-2.0, -1.5], 1.1, 0.7071, [0, 0]),
                sample(["5", "6"], [-2.5, -1.0], 0.1, -0.7071, [0, 0])]}]},
            {"step": 5, "kind": "grpo", "groups": [{"prompt": "20+21?", "answer": "41", "samples": [
                sample(["4", "1"], [-0.05, -0.01], 1.1, 0.0, [0, 1]),
                sample(["4", "1"], [-0.06, -0.02], 1.1, 0.0, [0, 0])]}]}]
    tokens = [{"step": s, "kind": "tokens", "texts": [{"tokens": ["to", " be", " or", " not"], "loss": loss,
                                                        "trained": [1, 1, 1]}]}
              for s, loss in ((10, [5.0, 4.0, 6.0]), (20, [0.5, 3.0, 0.2]))]
    for name, records in (("rl", grpo), ("pretrain", tokens)):
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
        (folder / "watch.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        Watched(path=folder, metrics_path=folder / "metrics.jsonl", watch_path=folder / "watch.jsonl").save(step=name)
    return root


@pytest.mark.slow
def test_watch_it_learn_a_step_slider_over_grpo_groups_and_held_out_tokens_shaded_by_loss(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    assert browse(watched_run(tmp_path / "runs"), tmp_path / "runs.html").returncode == 0
    driver = headless_chromium()
    shades = lambda css: [t.get_attribute("data-shade") for t in driver.find_elements(By.CSS_SELECTOR, css)]  # noqa: E731
    try:
        driver.get((tmp_path / "runs.html").as_uri())
        node(driver, "rl").click()
        assert driver.find_element(By.ID, "watch-box").get_attribute("data-kind") == "grpo"
        rows = driver.find_elements(By.CSS_SELECTOR, "#groups tr.sample")
        assert [r.find_element(By.CSS_SELECTOR, ".advantage").text for r in rows] == ["0.7071", "-0.7071"]
        assert [r.find_element(By.CSS_SELECTOR, ".right, .wrong").text for r in rows] == ["right", "wrong"]
        before = shades("#groups .tok")
        assert before[0] == f"{1 - math.exp(-2.0):.3f}" and not driver.find_elements(By.CSS_SELECTOR, ".tok.clipped")
        driver.find_element(By.ID, "watch-step").send_keys(Keys.ARROW_RIGHT)  # the slider to the second kept step
        assert driver.find_element(By.ID, "watch-step-label").text.startswith("5")
        assert "20+21?" in driver.find_element(By.CSS_SELECTOR, "#groups tr.prompt").text
        after = shades("#groups .tok")
        assert after != before and float(after[0]) < float(before[0])  # more confident: lighter
        assert len(driver.find_elements(By.CSS_SELECTOR, "#groups .tok.clipped")) == 1
        node(driver, "pretrain").click()
        assert driver.find_element(By.ID, "watch-box").get_attribute("data-kind") == "tokens"
        first = shades("#heldout .tok[data-shade]")
        driver.find_element(By.ID, "watch-step").send_keys(Keys.ARROW_RIGHT)
        second = shades("#heldout .tok[data-shade]")
        assert first == ["0.833", "0.667", "1.000"] and second == ["0.083", "0.500", "0.033"]
    finally:
        driver.quit()
