"""Start-up: how long `--help` of every step takes, against importing torch and transformers.

A step's `--help` should answer at once: a learner types it before anything else. Steps import torch
and transformers inside `main`, so `--help` (and a data step's whole run) never pays for them. This
prints, for every step of every recipe and for `python -m nemotron.artifact --help`, the median wall
time of a few fresh interpreters, next to the baseline measured in the same run: a fresh interpreter
that only does `import torch, transformers` (what `--help` used to cost on top of Python itself).

    python benchmarks/bench_startup.py            # 3 runs each
    python benchmarks/bench_startup.py --runs 5
    python benchmarks/bench_startup.py --quick    # one run of the first step of each recipe

The ratio column is help time / baseline; below 1.0 means `--help` costs less than the import alone.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "nemotron"


def wall_seconds(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 run, first step of each recipe: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.runs = 1

    baseline = wall_seconds([sys.executable, "-c", "import torch, transformers"], args.runs)
    steps = sorted(SRC.glob("recipes/*/stage*/[!_]*.py"))
    if args.quick:
        recipes = sorted({path.parts[-3] for path in steps})
        steps = [next(path for path in steps if path.parts[-3] == recipe) for recipe in recipes]
    commands = {"python -m nemotron.artifact --help": [sys.executable, "-m", "nemotron.artifact", "--help"]}
    for path in steps:
        module = ".".join(("nemotron", *path.relative_to(SRC).with_suffix("").parts))
        commands[f"{module} --help"] = [sys.executable, "-m", module, "--help"]
    print(f"baseline: python -c 'import torch, transformers': {baseline:.2f}s (median of {args.runs})")
    print(f"{'command':<70} {'seconds':>8} {'ratio':>6}")
    worst = 0.0
    for name, command in commands.items():
        seconds = wall_seconds(command, args.runs)
        worst = max(worst, seconds)
        print(f"{name:<70} {seconds:>8.2f} {seconds / baseline:>6.2f}")
    print(f"slowest --help: {worst:.2f}s = {worst / baseline:.2f}x the torch+transformers import")


if __name__ == "__main__":
    main()
