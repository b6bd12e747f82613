"""The whole tiny recipe's wall time, step by step: the default compute policy against one thread.

Runs `python -m nemotron.recipes.nano2 --scale tiny` twice into fresh folders, in this order:
1. the default policy (`nemotron.cpu.torch_threads`: every core this process may use);
2. the old rule, one torch thread in every training and evaluation step (`--num-threads 1`);
and prints each step's seconds (from the orchestrator's `[done] <step> in Ns` lines), the whole
command's wall time, and the ratio one-thread / default. The issue-13 target: at most 160 s for the
whole command on an idle 2-core machine.

    python benchmarks/bench_recipe.py
    python benchmarks/bench_recipe.py --only default      # one run, the default policy
    python benchmarks/bench_recipe.py --quick             # one-thread only, one play, 2 steps per training

Run it on an idle machine (the load average is printed): other busy processes slow both runs and
make threads spin-wait.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_lessons import QUICK

STEPS = [*(f"{stage}/{step}" for stage in ("stage0_pretrain", "stage1_sft", "stage2_alignment")
           for step in ("data_curation", "training", "evaluation")),
         "nemotron/evaluation"]  # the tenth step: the final model's standard benchmarks
ONE_THREAD = [*(f"--{stage}.{step}.num-threads=1" for stage in ("stage0", "stage1", "stage2")
                for step in ("training", "evaluation")), "--benchmarks.num-threads=1"]


# --quick: the same ten steps, a few optimizer steps each (stage 1 enough for the model to answer some skill
# problems right, which stage 2's judged pairs need), a few evaluation items (bench_lessons.QUICK), one play.


def one_play_blend(folder: Path) -> Path:
    """A blend of Macbeth's scenes alone (--quick)."""
    from nemotron.data_prep.sources import read_shakespeare

    scenes = [d for d in read_shakespeare().documents if d.meta.get("play") == "macbeth"]
    (folder / "scenes.jsonl").write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in scenes))
    (folder / "blend.json").write_text(json.dumps({"sources": [{"path": "scenes.jsonl"}], "split": [0.9, 0.1, 0]}))
    return folder / "blend.json"


def run_recipe(out: Path, extra: list[str]) -> tuple[float, dict[str, float]]:
    command = [sys.executable, "-m", "nemotron.recipes.nano2", "--scale", "tiny", "--output-dir", str(out), *extra]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    seconds = {match[0]: float(match[1]) for match in re.findall(r"\[done\] (\S+) in ([\d.]+)s", result.stderr)}
    return wall, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["default", "one-thread"])
    parser.add_argument("--quick", action="store_true",
                        help="one run (one-thread), one play, 2 steps per training: checks it runs")
    args = parser.parse_args()
    if args.quick and not args.only:  # one recipe run is enough; the one-thread one also checks its flags parse
        args.only = "one-thread"
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    policies = {"default": [], "one-thread": ONE_THREAD}
    if args.only:
        policies = {args.only: policies[args.only]}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        quick = [*QUICK, "--stage0.data-curation.blend-path", str(one_play_blend(Path(tmp)))] if args.quick else []
        for name, extra in policies.items():
            results[name] = run_recipe(Path(tmp) / name, [*extra, *quick])
    names = list(results)
    print(f"{'step':<32}" + "".join(f"{name:>12}" for name in names))
    for step in STEPS:
        print(f"{step:<32}" + "".join(f"{results[name][1].get(step, float('nan')):>11.1f}s" for name in names))
    print(f"{'whole command (wall)':<32}" + "".join(f"{results[name][0]:>11.1f}s" for name in names))
    if len(names) == 2:
        print(f"one-thread / default: {results['one-thread'][0] / results['default'][0]:.2f}x")


if __name__ == "__main__":
    main()
