"""Does a recipe step cost its share of a CPU shared with other work? The measurements behind nemotron/cpu.py.

Runs the real nano2 stage-0 training step (tiny, a fixed number of steps, on a dataset curated once up
front) as a user runs it, a whole process timed from start to exit, in three settings:
- alone;
- two at once (a learner's run and a second job);
- beside a busy loop (a Python `while True` pinned to the first allowed core: a browser tab, an editor);
under each policy: `spin` (NEMOTRON_CPU_POLICY=spin: libgomp's default spin-waiting, the previous
behaviour) and `share` (the default of nemotron/cpu.py), and any extra environment given as NAME=VALUE
(e.g. GOMP_SPINCOUNT=10000). It prints each time and the slowdowns two-at-once/alone and busy/alone
per policy, and each policy's idle speed against spin's: its time alone, and its training loop's own
seconds per step alone (the artifact's `seconds_per_step`, without the process's start: at 40 steps the
imports are half of a run). Goal (issue 39): both slowdowns within 2.5x, the idle speed unchanged. Each
setting is repeated (`--repeats`), the policies in turn within each repeat so that a slow spell of the
machine falls on all of them, and the median kept; the 1-minute load average before each measurement is
printed beside it: other work on the machine skews every number, so run it on an idle machine.

    python benchmarks/bench_shared_cpu.py                       # 40 steps, spin vs share, 2 repeats
    python benchmarks/bench_shared_cpu.py --policies spin share GOMP_SPINCOUNT=10000 --repeats 3
    python benchmarks/bench_shared_cpu.py --quick               # 2 steps, once, share only: checks it runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nemotron.cpu import WAIT_SETTINGS

STAGE = "nemotron.recipes.nano2.stage0_pretrain"
BUSY_LOOP = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def curate(root: Path, plays: set[str]) -> Path:
    """A small tiny-scale stage-0 dataset of `plays`, made by the real data-curation step."""
    from nemotron.data_prep.sources import read_shakespeare

    scenes = [d for d in read_shakespeare().documents if d.meta.get("play") in plays]
    (root / "scenes.jsonl").write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in scenes))
    (root / "blend.json").write_text(json.dumps({"sources": [{"path": "scenes.jsonl"}], "split": [0.9, 0.1, 0.0]}))
    subprocess.run([sys.executable, "-m", f"{STAGE}.data_curation", "--blend-path", "blend.json", "--vocab-size",
                    "1024", "--scale", "tiny", "--output-dir", "data"], cwd=root, check=True, capture_output=True)
    return root / "data"


def environment(policy: str) -> dict[str, str]:
    """The child's environment under `policy`: spin, share, or NAME=VALUE set on top of share (which then
    leaves it alone, as it leaves any wait setting of the user's). This process's own settings are dropped."""
    env = {name: value for name, value in os.environ.items() if name not in WAIT_SETTINGS}
    env["NEMOTRON_CPU_POLICY"] = "spin" if policy == "spin" else "share"
    if "=" in policy:
        name, value = policy.split("=", 1)
        env[name] = value
    return env


def start(dataset: Path, out: Path, steps: int, env: dict[str, str]) -> subprocess.Popen:
    command = [sys.executable, "-m", f"{STAGE}.training", "--dataset-path", str(dataset), "--output-dir", str(out),
               "--scale", "tiny", "--steps", str(steps), "--micro-batch-size", "8", "--eval-every", str(steps),
               "--checkpoint-every", str(steps)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def timed(processes: list[subprocess.Popen], started: float) -> list[float]:
    """Seconds from `started` to each process's exit; a failed run stops the benchmark."""
    seconds = []
    for process in processes:
        _, stderr = process.communicate()
        seconds.append(time.perf_counter() - started)
        if process.returncode != 0:
            raise SystemExit(f"error: the training step exited {process.returncode}:\n{stderr[-2000:]}")
    return seconds


def measure(setting: str, dataset: Path, root: Path, steps: int, env: dict[str, str]) -> tuple[float, float]:
    """One measurement in `setting` (alone, two, busy): seconds from start to exit, and the training loop's own
    seconds per step (its artifact's `seconds_per_step`); in `two`, the means of both runs."""
    busy = None
    if setting == "busy":
        core = min(os.sched_getaffinity(0))
        busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(core)])
        time.sleep(0.5)  # the loop is running before the step starts
    try:
        started = time.perf_counter()
        count = 2 if setting == "two" else 1
        outs = [Path(tempfile.mkdtemp(dir=root)) for _ in range(count)]
        runs = [start(dataset, out, steps, env) for out in outs]
        seconds = statistics.mean(timed(runs, started))
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    per_step = [json.loads((out / "metadata.json").read_text())["metrics"]["seconds_per_step"] for out in outs]
    return seconds, statistics.mean(per_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="training steps of each run (default 40)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each setting; the median is kept")
    parser.add_argument("--policies", nargs="+", default=["spin", "share"],
                        help="spin, share, or NAME=VALUE environment on top of share (first: the baseline)")
    parser.add_argument("--quick", action="store_true", help="2 steps, one play, once, share only: checks it runs")
    args = parser.parse_args()
    plays = {"hamlet", "macbeth", "othello"}
    if args.quick:
        args.steps, args.repeats, plays, args.policies = 2, 1, {"macbeth"}, ["share"]
    cores = len(os.sched_getaffinity(0))
    print(f"nano2 tiny stage-0 training, {args.steps} steps, batch 8 windows; {cores} allowed cores; "
          f"median of {args.repeats}; seconds per run, process start to exit")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dataset = curate(root, plays)
        times: dict[str, dict[str, float]] = {policy: {} for policy in args.policies}
        per_step: dict[str, float] = {}  # each policy's loop seconds per step, alone
        print(f"{'policy':<24} {'setting':<8} {'seconds':>8}  {'runs (load average before each)'}")
        for setting in ("alone", "two", "busy"):
            # The policies in turn, repeat after repeat: a slow spell of the machine falls on all of them.
            runs: dict[str, list[tuple[float, float, float]]] = {policy: [] for policy in args.policies}
            for _ in range(args.repeats):
                for policy in args.policies:
                    load = os.getloadavg()[0]
                    runs[policy].append((*measure(setting, dataset, root, args.steps, environment(policy)), load))
            for policy, done in runs.items():
                times[policy][setting] = statistics.median(seconds for seconds, _, _ in done)
                if setting == "alone":
                    per_step[policy] = statistics.median(step for _, step, _ in done)
                detail = ", ".join(f"{seconds:.1f} ({load:.2f})" for seconds, _, load in done)
                print(f"{policy:<24} {setting:<8} {times[policy][setting]:>8.1f}  {detail}", flush=True)
        baseline = args.policies[0]
        print(f"\n{'policy':<24} {'two/alone':>10} {'busy/alone':>11} {'alone vs ' + baseline:>16} "
              f"{'s/step alone':>13} {'step vs ' + baseline:>15}")
        for policy, seconds in times.items():
            two, busy = (seconds[setting] / seconds["alone"] for setting in ("two", "busy"))
            print(f"{policy:<24} {two:>10.2f} {busy:>11.2f} {seconds['alone'] / times[baseline]['alone']:>16.2f} "
                  f"{per_step[policy]:>13.3f} {per_step[policy] / per_step[baseline]:>15.2f}")
        last = args.policies[-1]
        print(f"{last}: two at once / alone = {times[last]['two'] / times[last]['alone']:.2f}x")


if __name__ == "__main__":
    main()
