"""The README's picture of the run browser, made from a run: the page of `python -m nemotron.artifact browse RUN`.

    python scripts/screenshot_runs_browser.py runs/nano2 --node stage0_pretrain/training --output docs/runs-browser.png

Writes the page of a recipe run folder into a temporary folder, opens it in the headless Chromium the page tests
use (tests/browser.py), selects NODE (its config, metrics and loss curves open on the right) and saves the
window as PNG. Beside it, `<output>.json` (`scripts/picture_sidecar.py`): the command and the digest of every
artifact of the run, which tests/test_readme_results.py compares with the run in nano2's Expected results.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from picture_sidecar import run_steps, write_sidecar  # noqa: E402

from nemotron.artifact.browse import write_page  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a recipe run folder, e.g. runs/nano2")
    parser.add_argument("--node", default="stage0_pretrain/training", help="the artifact selected on the page")
    parser.add_argument("--size", default="1400,1000", help="the window's width,height")
    parser.add_argument("--output", type=Path, default=Path("docs/runs-browser.png"))
    args = parser.parse_args()
    steps = run_steps(args.run)
    if not any(step == args.run / args.node for step in steps):
        raise SystemExit(f"error: {args.run / args.node} holds no artifact; pass a run folder and a step under it")

    from browser import headless_chromium

    page = write_page(args.run, Path(tempfile.mkdtemp()) / "runs.html")
    driver = headless_chromium()
    try:
        driver.set_window_size(*(int(n) for n in args.size.split(",")))
        driver.get(page.as_uri() + "#" + args.node)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.output))
    finally:
        driver.quit()
    sidecar = write_sidecar(args.output, steps)
    print(f"{args.output}: {args.node} of {args.run}; what it shows: {sidecar}", file=sys.stderr)


if __name__ == "__main__":
    main()
