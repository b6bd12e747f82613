"""How long should SFT train? Its held-out measures at shares of the default length, from one recipe run.

SFT's length is a number of passes over its data (`--epochs`, the step's EPOCHS). It is chosen where the
result no longer hinges on the last bits: from 20% fewer passes to 20% more, no point's lesson
(`metrics.lesson`) worse than the default's by more than two standard errors of their paired difference. This
script re-runs SFT from a finished recipe run's stage-0 model and SFT data at each share of the default (0.6
0.8 1.0 1.2 1.4 by default), evaluates each with the recipe's own SFT evaluation step, and prints the curve (the
lesson and the step's other held-out measures). Each point is compared with the default on the same held-out
items, paired (the two runs' per-item values, `metrics.lesson_items`), with the lesson's own verdict; the length
is flat when no point from 0.8x to 1.2x is "hurt" (its change below minus two paired standard errors). A point
may be better than the default by more than that and the length still flat: more passes that keep helping are
no cliff. (The rule until issue #58 asked every point to stay within the default's own standard error; greedy
exact match moves by several questions between neighbouring models even on the plateau, so it failed there.)

    python -m nemotron.recipes.nano2 --scale tiny --output-dir runs/nano2       # the run to start from
    python benchmarks/bench_sft_length.py --recipe nano2 --run runs/nano2 --json sft_length.json
    python benchmarks/bench_sft_length.py --recipe nano3 --run runs/nano3 --fractions 0.8 1 1.2
    python benchmarks/bench_sft_length.py --quick                                # a few steps, 2 points

stdout: one JSON line per point, then the summary (from 0.8x to 1.2x, the largest fall below the default in paired
standard errors, and whether it is within two: flat).
`--json FILE` writes what `scripts/readme_results.py RECIPE sft_length FILE` puts in the README.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nemotron.evaluation.lessons import lesson, verdict

# Per recipe: the SFT steps, whether the lesson's measure is higher-is-better, and besides the stage's lesson (its
# gain ± standard error: the measure whose flatness is judged) the columns shown, read from the evaluation
# artifact's metrics (key, its standard error).
RECIPES = {
    "nano2": {"training": "nemotron.recipes.nano2.stage1_sft.training", "higher_is_better": True,
              "evaluation": "nemotron.recipes.nano2.stage1_sft.evaluation",  # the lesson: chance of a right answer
              "columns": [("held-out skill: greedy right", "sft_skill_accuracy", "sft_skill_accuracy_stderr"),
                          ("chance of the near miss", "sft_skill_p_near_miss", "sft_skill_p_near_miss_stderr")]},
    "nano3": {"training": "nemotron.recipes.nano3.stage1_sft.training", "higher_is_better": True,
              "evaluation": "nemotron.recipes.nano3.stage1_sft.evaluation",
              "columns": [("chance of the right working", "sft_p_right_working", "sft_p_right_working_stderr"),
                          ("chance of a dropped carry", "sft_p_dropped_carry", "sft_p_dropped_carry_stderr"),
                          ("exact match, reasoning off", "sft_exact_match_reasoning_off",
                           "sft_exact_match_reasoning_off_stderr")]},
}


def step(module: str, out: Path, *flags: str) -> dict:
    """Run one recipe step as a user would, into `out`; the artifact it wrote there (its metadata)."""
    done = subprocess.run([sys.executable, "-m", module, "--output-dir", str(out), *flags], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: python -m {module} {' '.join(flags)} exited {done.returncode}:\n"
                         f"{done.stderr[-3000:]}")
    return json.loads((out / "metadata.json").read_text())


def fall_below(change: dict) -> float:
    """How far a point's paired change from the default falls below zero, in its standard errors (a fall with no
    error at all: infinitely far); flat asks for at most two (`lessons.verdict`'s "hurt" beyond)."""
    if change["gain"] >= 0:
        return 0.0
    return -change["gain"] / change["standard_error"] if change["standard_error"] else math.inf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="nano2")
    parser.add_argument("--run", type=Path, help="a finished tiny recipe run (its stage0_pretrain and stage1_sft)")
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.6, 0.8, 1.0, 1.2, 1.4])
    parser.add_argument("--output-dir", type=Path, default=None, help="keep the SFT runs here (default: temp)")
    parser.add_argument("--json", type=Path, default=None, help="also write the curve here (for the README)")
    parser.add_argument("--quick", action="store_true", help="make a tiny run first; 2 points of a few steps")
    args = parser.parse_args()
    spec = RECIPES[args.recipe]
    root = args.output_dir or Path(tempfile.mkdtemp(prefix="bench_sft_length_"))
    run = args.run
    if args.quick:  # the same path on a minute's work: the quick recipe of bench_lessons, then 2 short points
        from bench_lessons import QUICK

        run = root / "run"
        subprocess.run([sys.executable, "-m", "nemotron.recipes.nano2", "--scale", "tiny", "--output-dir", str(run),
                        *QUICK], check=True, capture_output=True)
        args.recipe, spec, args.fractions = "nano2", RECIPES["nano2"], [0.5, 1.0]
    if run is None or not (run / "stage1_sft" / "training" / "metadata.json").exists():
        raise SystemExit("error: --run must be a finished recipe run folder (python -m nemotron.recipes.nano2 "
                         "--scale tiny --output-dir runs/nano2 makes one)")
    default = json.loads((run / "stage1_sft" / "training" / "metadata.json").read_text())
    # The passes the recipe's own SFT took: its --epochs, its step's default for the scale (EPOCHS), or, for a
    # run given --steps, computed back from them. The curve's 1.0 point is then the recipe's run (computed back
    # from the steps of a run of EPOCHS passes, it would run a few more).
    config = default["config"]
    curated = json.loads((run / "stage1_sft" / "data_curation" / "metadata.json").read_text())
    rows = curated.get("num_train_rows") or curated["metrics"]["train_rows"]  # nano2's field, nano3's metric
    epochs = config.get("epochs") or (default["steps"] * config["micro_batch_size"] / rows if config.get("steps")
                                      else importlib.import_module(spec["training"]).EPOCHS[default["scale"]])
    seed = default["seed"]
    points, items = [], {}
    for fraction in args.fractions:
        out = root / f"sft_{fraction:g}"
        # The recipe run's own seed, rate and --patience (None: the step's default for the scale, as the run had).
        flags = ["--dataset-path", str(run / "stage1_sft" / "data_curation"), "--checkpoint-path",
                 str(run / "stage0_pretrain" / "training"), "--seed", str(seed), "--lr", repr(config["lr"])]
        flags += [] if config.get("patience") is None else ["--patience", str(config["patience"])]
        flags += ["--steps", str(max(1, round(default["steps"] * fraction)))] if args.quick else \
            ["--epochs", f"{epochs * fraction:.4g}"]
        trained = step(spec["training"], out / "training", *flags)
        scored = step(spec["evaluation"], out / "evaluation", "--checkpoint-path", str(out / "training"))["metrics"]
        record = scored["lesson"]
        # A point --patience ended early ran fewer steps than its passes ask: say so. At tiny (nano3, 11
        # validation rows) it fired mid-schedule in 3 of 11 SFT runs measured. When it stopped them at once,
        # at a rate still high, they scored exact match 0.07, 0.54 and 0.85; now that the rate first anneals
        # (TrainingRun), the same runs score 0.70, 0.66 and 0.93 (0.66 and 0.97 run to the end, --patience 0).
        point = {"fraction": fraction, "epochs": round(epochs * fraction, 3), "steps": trained["steps"],
                 "stopped_early": trained["metrics"]["stopped_early"], "value": record["gain"],
                 "standard_error": record["standard_error"],
                 "cells": [f"{record['gain']:+.3f} ± {record['standard_error']:.3f}",
                           *(f"{scored[k]:.3f} ± {scored[e]:.3f}" for _, k, e in spec["columns"])]}
        items[fraction] = scored["lesson_items"]["after"]
        points.append(point)
        print(json.dumps(point))
        names = ["the lesson", *(name for name, _, _ in spec["columns"])]
        cut = ", --patience stopped it" if point["stopped_early"] else ""
        print(f"bench_sft_length: {args.recipe} x{fraction:g} ({point['epochs']:g} passes, {point['steps']} steps"
              f"{cut}): " + ", ".join(f"{name} {cell}" for name, cell in zip(names, point["cells"])), file=sys.stderr)
    # Each point's change from the default, item for item (paired), as the lesson measures a stage's gain. The
    # default is the recipe's own SFT model, scored by the same evaluation as the points (the 1.0 point is it).
    if 1.0 not in items:
        items[1.0] = step(spec["evaluation"], root / "default_evaluation", "--checkpoint-path",
                          str(run / "stage1_sft" / "training"))["metrics"]["lesson_items"]["after"]
    for point in points:
        change = lesson(record["measure"], items[1.0], items[point["fraction"]],
                        higher_is_better=spec["higher_is_better"])
        point["against_default"] = {"gain": change["gain"], "standard_error": change["standard_error"],
                                    "verdict": verdict(change)}
        print(f"bench_sft_length: x{point['fraction']:g} against the default, paired: {change['gain']:+.3f} ± "
              f"{change['standard_error']:.3f} ({point['against_default']['verdict']})", file=sys.stderr)
    # Flat: from 0.8x to 1.2x, no point worse than the default by more than two paired standard errors.
    band = [p["against_default"] for p in points if 0.8 <= p["fraction"] <= 1.2]
    fall = max([0.0, *(fall_below(change) for change in band)])  # a point better than the default falls by nothing
    if args.json is not None:
        args.json.write_text(json.dumps({
            "recipe": args.recipe, "date": time.strftime("%Y-%m-%d"), "seed": seed, "default_epochs": epochs,
            "measure": f"the lesson is {record['measure']}",
            "columns": ["the lesson: gain ± SE", *(name for name, _, _ in spec["columns"])],
            "points": points}, indent=1) + "\n")
    flat = fall <= 2.0  # no point "hurt" (lessons.verdict)
    print(f"bench_sft_length: from 0.8x to 1.2x the default, the lesson falls at most {fall:.2f} paired standard "
          "errors below the default's: " + ("flat" if flat else "NOT flat"), file=sys.stderr)
    print(json.dumps({"max_fall_in_paired_standard_errors_within_20_percent": round(fall, 3), "flat": flat}))


if __name__ == "__main__":
    main()
