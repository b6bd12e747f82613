"""The READMEs' "Watch it learn" screenshots, made from a run: the run browser's view of one training node.

    python scripts/watch_screenshots.py runs/nano2 stage1_sft/training docs/watch-nano2-sft.png
    python scripts/watch_screenshots.py runs/nano3 stage2_rl/training docs/watch-nano3-grpo.png

Writes the page of `python -m nemotron.artifact browse RUNS` into a temporary folder, opens it in the headless
Chromium the page tests use (tests/browser.py), selects NODE and saves the "Watch it learn" box as PNG. The
step shown: for GRPO the first kept step with a group holding both a right and a wrong sample (the first
step whose advantages are not all zero), for held-out tokens the first validation, for DPO the whole run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from nemotron.artifact.browse import write_page  # noqa: E402


def step_index(records: list[dict]) -> int:
    """Which of the node's kept steps the slider shows (see the module docstring)."""
    grpo = [r for r in records if r["kind"] == "grpo"]
    for index, record in enumerate(grpo):
        if any(len({s["correct"] for s in group["samples"]}) == 2 for group in record["groups"]):
            return index
    return 0  # held-out tokens: the first validation, before most is learnt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("node", help="the training folder under RUNS, e.g. stage2_rl/training")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    watch = args.runs / args.node / "watch.jsonl"
    if not watch.is_file():
        raise SystemExit(f"error: {watch} not found; pass a run folder and a training step under it")
    records = [json.loads(line) for line in watch.read_text().splitlines()]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from browser import headless_chromium

    page = write_page(args.runs, Path(tempfile.mkdtemp()) / "runs.html")
    driver = headless_chromium()
    try:
        driver.set_window_size(1400, 1000)
        driver.get(page.as_uri() + "#" + args.node)
        slider = driver.find_element(By.ID, "watch-step")
        for _ in range(step_index(records)):
            slider.send_keys(Keys.ARROW_RIGHT)
        box = driver.find_element(By.ID, "watch-box")
        driver.execute_script("arguments[0].scrollIntoView()", box)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        box.screenshot(str(args.out))
    finally:
        driver.quit()
    print(f"{args.out}: {args.node} of {args.runs}", file=sys.stderr)


if __name__ == "__main__":
    main()
