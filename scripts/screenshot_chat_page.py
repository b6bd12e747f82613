"""The README's picture of the chat page: serve checkpoints, ask in headless Chromium, save a PNG.

    python scripts/screenshot_chat_page.py runs/nano2 --compare "hello" --model nano2-stage2_alignment \
        --ask "What is a play?" --hover 3 --output docs/chat-page.png

Starts `nemotron.serve`'s app on a free loopback port in this process (a run folder serves each stage's
checkpoint), opens the page in the system's headless Chromium (apt-get install chromium chromium-driver),
sends the `--compare` question to every served model (side by side), then each `--ask` question to
`--model` (greedy, the page's default), waits for every answer to finish streaming, hovers token
`--hover` of the last answer (its alternatives open) and takes the screenshot. Beside it, `<output>.json`
(`scripts/picture_sidecar.py`): the command, the digests of the checkpoints served, and every answer the page
shows (asked, model, answer), from which `python scripts/readme_results.py top chat_page docs/chat-page.png.json`
writes the README's chat example. `--where-from MODEL` presses "where from" under MODEL's compare answer first
(its spans marked in each served model's training data):

    python scripts/screenshot_chat_page.py runs/nano2 --compare "You are immortal" --ask \
        --where-from nano2-stage2_alignment --max-tokens 24 --size 1200,860 --output where-from.png
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from picture_sidecar import write_sidecar  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="checkpoint or run folders (the first is picked on the page)")
    parser.add_argument("--ask", nargs="*", default=["hello"])
    parser.add_argument("--compare", help="a question for every served model first, answers side by side")
    parser.add_argument("--model", help="the model the --ask questions go to (default: the first)")
    parser.add_argument("--where-from", metavar="MODEL",
                        help='press "where from" under this model\'s --compare answer, wait for every stage\'s spans')
    parser.add_argument("--hover", type=int, help="hover this token of the last answer: its alternatives show")
    parser.add_argument("--size", default="1000,720", help="the window's width,height")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--output", default="docs/chat-page.png")
    args = parser.parse_args()

    import uvicorn
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from nemotron.serve.app import create_app
    from nemotron.serve.engine import Engine
    from nemotron.serve.models import expand_run, load_served

    folders = [found for m in args.models for found in expand_run(m)]
    served = [load_served(found) for found in folders]
    app = create_app([(m, Engine(m.model, m.tokenizer, stop_token_ids=m.stop_token_ids)) for m in served])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or sys.exit("chromium is not installed")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={args.size}",
                 "--force-device-scale-factor=1"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        wait = WebDriverWait(driver, 600)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
        driver.find_element(By.ID, "max-tokens").clear()
        driver.find_element(By.ID, "max-tokens").send_keys(str(args.max_tokens))
        done = 0

        def send(question: str, answers: int) -> None:
            nonlocal done
            driver.find_element(By.ID, "prompt").send_keys(question)
            driver.find_element(By.ID, "send").click()
            done += answers
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn.assistant.done")) == done)

        if args.compare:
            driver.find_element(By.ID, "compare").click()
            send(args.compare, len(served))
            if args.where_from:
                driver.find_element(By.CSS_SELECTOR, f'.turn.compare .turn.assistant[data-model="{args.where_from}"] '
                                                     "button.where-from").click()
                wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '.where[data-done="1"]'))
            driver.find_element(By.ID, "compare").click()
        if args.model:
            Select(driver.find_element(By.ID, "model")).select_by_value(args.model)
        for question in args.ask:
            send(question, 1)
        if args.hover is not None:
            last = driver.find_elements(By.CSS_SELECTOR, ".turn.assistant.done")[-1]
            ActionChains(driver).move_to_element(last.find_elements(By.CSS_SELECTOR, ".tok")[args.hover]).perform()
            time.sleep(0.3)
        driver.save_screenshot(args.output)
        answers = page_answers(driver, By)
    finally:
        driver.quit()
        server.should_exit = True
    sidecar = write_sidecar(args.output, folders, answers=answers)
    print(f"screenshot written to {args.output}, what it shows to {sidecar}", file=sys.stderr)


def page_answers(driver, by) -> list[dict[str, str]]:
    """Every answer on the page, in order: {"asked": the user's message before it, "model", "answer"}."""
    answers, asked = [], ""
    for turn in driver.find_elements(by.CSS_SELECTOR, "#log > .turn"):
        classes = turn.get_attribute("class").split()
        if "user" in classes:
            asked = turn.find_element(by.CSS_SELECTOR, ".text").get_attribute("textContent")
            continue
        for answer in ([turn] if "assistant" in classes else turn.find_elements(by.CSS_SELECTOR, ".turn.assistant")):
            answers.append({"asked": asked, "model": answer.find_element(by.CSS_SELECTOR, ".who").text,
                            "answer": answer.find_element(by.CSS_SELECTOR, ".text").get_attribute("textContent")})
    return answers


if __name__ == "__main__":
    main()
