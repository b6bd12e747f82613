"""Does every stage teach, in every seed? Each stage's lesson over seeds and thread counts, both recipes.

Runs `python -m nemotron.recipes.<recipe> --scale tiny --seed S` for each recipe and seed (default: nano2 and
nano3, seeds 0, 1 and 2 on every core this process may use, and seed 0, or the `--one-thread-seeds`, once more
pinned to one core, so one torch thread), each into a fresh folder, then reads every evaluation artifact's
`metrics.lesson` (the stage's model against the model it started from on the same held-out items, paired standard error;
`nemotron.evaluation.lessons`) and prints, per run and stage, the gain, its standard error and their ratio.
A stage teaches when its gain is above two standard errors; the last line says whether every stage of every
run did. Each run's step times are printed beside it (the recipes' time budgets: nano2 120 s, nano3 330 s of
steps on an idle 2-core machine, which nano3 now passes: its README says why), with the load average, since other
work on the machine slows them.

    python benchmarks/bench_lessons.py                       # both recipes, seeds 0-2, and seed 0 on one thread
    python benchmarks/bench_lessons.py --seeds 0 1 2 3 4 5 6 7 8 9 --one-thread-seeds 0 1 2
    python benchmarks/bench_lessons.py --recipes nano2 --seeds 0 --no-one-thread
    python benchmarks/bench_lessons.py --quick               # nano2, a few steps per stage, one seed: a minute
    python benchmarks/bench_lessons.py --json lessons.json   # also the table as JSON (scripts/readme_results.py)

stdout: one JSON line per run, then the summary line (the number of lessons above two standard errors, of all).
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

# The evaluation steps whose artifacts hold each stage's lesson, per recipe: (stage name, folder).
STAGES = {
    "nano2": [("stage 0", "stage0_pretrain/evaluation"), ("SFT", "stage1_sft/evaluation"),
              ("DPO", "stage2_alignment/evaluation")],
    "nano3": [("stage 0", "stage0_pretrain/evaluation"), ("SFT", "stage1_sft/evaluation"),
              ("RL", "stage2_rl/evaluation")],
}
# --quick: the nano2 recipe with a few optimizer steps and evaluation items per stage: the same code path.
QUICK = ["--stage0.data-curation.vocab-size", "1024",
         *(f"--stage{n}.training.steps={steps}" for n, steps in enumerate((8, 100, 2))),
         "--stage1.data-curation.skill-problems=200", "--stage2.data-curation.num-prompts=200",
         "--stage1.evaluation.max-conversations=16", "--stage1.evaluation.num-samples=1",
         "--stage1.evaluation.max-new-tokens=4", "--stage2.evaluation.max-items=16",
         "--stage2.evaluation.num-samples=1", "--stage2.evaluation.max-new-tokens=4",
         "--stage0.evaluation.max-new-tokens=4", "--benchmarks.limit=2"]


def run_recipe(recipe: str, seed: int, one_thread: bool, out: Path, extra: list[str]) -> dict:
    """One recipe run into `out`: its lessons, step seconds and wall time."""
    command = [sys.executable, "-m", f"nemotron.recipes.{recipe}", "--scale", "tiny", "--seed", str(seed),
               "--output-dir", str(out), *extra]
    core = min(os.sched_getaffinity(0))
    pin = (lambda: os.sched_setaffinity(0, {core})) if one_thread else None  # one core: torch picks one thread
    started, load = time.perf_counter(), os.getloadavg()[0]
    done = subprocess.run(command, capture_output=True, text=True, preexec_fn=pin)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    # every step's seconds (nano3's stage 0 trains twice under one step name: the MoE and its dense counterpart)
    steps = [float(seconds) for _, seconds in re.findall(r"\[done\] (\S+) in ([\d.]+)s", done.stderr)]
    lessons, greedy = {}, {}
    for stage, folder in STAGES[recipe]:
        metadata = out / folder / "metadata.json"
        if metadata.exists():
            metrics = json.loads(metadata.read_text())["metrics"]
            lessons[stage] = metrics["lesson"]
            # nano2's skill, greedy: each model's share of held-out problems answered right (base, SFT, DPO)
            for key, value in metrics.items():
                if key.endswith("_skill_accuracy"):
                    greedy.setdefault(key.removesuffix("_skill_accuracy").replace("sft", "SFT").replace("dpo", "DPO"),
                                      value)
    # nano3's stage 0 answers whether the MoE model beats its dense counterpart, at equal tokens and equal time
    # (its evaluation's metrics.moe_against_dense; scripts/readme_results.py's moe_dense block draws it)
    stage0 = out / "stage0_pretrain" / "evaluation" / "metadata.json"
    against = json.loads(stage0.read_text())["metrics"].get("moe_against_dense") if recipe == "nano3" and \
        stage0.exists() else None
    return {"recipe": recipe, "seed": seed, "threads": 1 if one_thread else len(os.sched_getaffinity(0)),
            "lessons": lessons, **({"greedy": greedy} if greedy else {}),
            **({"moe_against_dense": against} if against else {}), "step_seconds": round(sum(steps), 1),
            "wall_seconds": round(wall, 1), "load_average": round(load, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=["nano2", "nano3"], choices=sorted(STAGES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--one-thread-seeds", nargs="*", type=int, default=None,
                        help="the seeds run once more on one core (default: the first of --seeds; none: no such run)")
    parser.add_argument("--no-one-thread", action="store_true", help="skip the extra runs on one core")
    parser.add_argument("--quick", action="store_true", help="nano2 with a few steps per stage, seed 0")
    parser.add_argument("--output-dir", type=Path, default=None, help="keep the runs here (default: a temp folder)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's lessons to this file")
    args = parser.parse_args()
    one_thread = ([] if args.no_one_thread else args.seeds[:1] if args.one_thread_seeds is None
                  else args.one_thread_seeds)
    plan = ([("nano2", 0, False)] if args.quick else
            [(recipe, seed, False) for recipe in args.recipes for seed in args.seeds]
            + [(recipe, seed, True) for recipe in args.recipes for seed in one_thread])
    root = args.output_dir or Path(tempfile.mkdtemp(prefix="bench_lessons_"))
    runs = []
    for recipe, seed, one_thread in plan:
        out = root / f"{recipe}_seed{seed}_{'1thread' if one_thread else 'default'}"
        print(f"bench_lessons: {recipe} seed {seed}{' on one core' if one_thread else ''} -> {out}", file=sys.stderr)
        run = run_recipe(recipe, seed, one_thread, out, QUICK if args.quick else [])
        runs.append(run)
        print(json.dumps(run))
        for stage, record in run["lessons"].items():
            ratio = record["gain"] / record["standard_error"] if record["standard_error"] else float("inf")
            print(f"  {stage:8s} {record['gain']:+.4f} ± {record['standard_error']:.4f}  ({ratio:5.1f} SE, "
                  f"n={record['n']})  {record['measure']}", file=sys.stderr)
        for budget, record in run.get("moe_against_dense", {}).items():
            print(f"  MoE - dense, {budget}: {-record['gain']:+.4f} ± {record['standard_error']:.4f} nats/token "
                  f"(dense {record['dense_steps']} steps, MoE {record['moe_steps']})", file=sys.stderr)
        print(f"  steps {run['step_seconds']} s, wall {run['wall_seconds']} s, load average {run['load_average']} "
              f"at the start, {run['threads']} thread(s)", file=sys.stderr)
        if args.json is not None:  # after every run: a long sweep stopped part way keeps the runs it made
            args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "runs": runs}, indent=1) + "\n")
    lessons = [record for run in runs for record in run["lessons"].values()]
    taught = sum(record["gain"] > 2 * record["standard_error"] and record["gain"] > 0 for record in lessons)
    print(f"bench_lessons: {taught} of {len(lessons)} lessons above two standard errors", file=sys.stderr)
    print(json.dumps({"lessons_above_two_standard_errors": taught, "lessons": len(lessons)}))


if __name__ == "__main__":
    main()
