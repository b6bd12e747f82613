"""DPO's settings against each other: the held-out lesson of each variant, from one recipe run's pairs.

Re-runs nano2's DPO step from a finished recipe run's judged pairs and SFT model with each variant's flags
(`VARIANTS`: the default, DPO without the NLL of the chosen answers at its old lower rate and at the
default's, the default at the lower rate, and the NLL alone with the DPO term all but off), evaluates each
with the recipe's own stage-2 evaluation, and prints per variant the held-out chance of a right answer (the
lesson: gain ± standard error), the chance of the teacher's near miss, the greedy accuracy and the chat's
NLL (what the variant cost the rest).

    python -m nemotron.recipes.nano2 --scale tiny --output-dir runs/nano2       # the run to start from
    python benchmarks/bench_dpo_variants.py --run runs/nano2 --json dpo_variants.json
    python benchmarks/bench_dpo_variants.py --quick                              # a quick run, 2 variants

stdout: one JSON line per variant, then the summary (the default's gain in standard errors).
`--json FILE` writes what `scripts/readme_results.py nano2 dpo_variants FILE` puts in the README.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_sft_length import step

VARIANTS = [
    ("DPO + NLL of the chosen answers, lr 2e-4 (the default)", []),
    ("plain DPO, lr 5e-5 (the default until 2026-12-07)", ["--sft-weight", "0", "--lr", "5e-5"]),
    ("plain DPO, lr 2e-4", ["--sft-weight", "0"]),
    ("DPO + NLL of the chosen answers, lr 5e-5", ["--lr", "5e-5"]),
    ("the NLL alone (--beta 1e-4: the DPO term all but off)", ["--beta", "1e-4"]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="a finished tiny nano2 run (its stage1_sft and stage2_alignment)")
    parser.add_argument("--output-dir", type=Path, default=None, help="keep the DPO runs here (default: temp)")
    parser.add_argument("--json", type=Path, default=None, help="also write the table here (for the README)")
    parser.add_argument("--quick", action="store_true", help="make a quick run first; 2 variants, 2 steps")
    args = parser.parse_args()
    root = args.output_dir or Path(tempfile.mkdtemp(prefix="bench_dpo_variants_"))
    run, variants, extra = args.run, VARIANTS, []
    if args.quick:
        from bench_lessons import QUICK

        run = root / "run"
        subprocess.run([sys.executable, "-m", "nemotron.recipes.nano2", "--scale", "tiny", "--output-dir", str(run),
                        *QUICK], check=True, capture_output=True)
        variants, extra = VARIANTS[:2], ["--steps", "2"]
    if run is None or not (run / "stage2_alignment" / "data_curation" / "metadata.json").exists():
        raise SystemExit("error: --run must be a finished nano2 run folder (python -m nemotron.recipes.nano2 "
                         "--scale tiny --output-dir runs/nano2 makes one)")
    # the run's own seed (the order DPO visits the pairs in), so the default variant is the recipe's DPO step
    seed = json.loads((run / "stage2_alignment" / "data_curation" / "metadata.json").read_text())["seed"]
    rows = []
    for index, (name, flags) in enumerate(variants):
        out = root / f"variant_{index}"
        step("nemotron.recipes.nano2.stage2_alignment.training", out / "training", "--dataset-path",
             str(run / "stage2_alignment" / "data_curation"), "--checkpoint-path", str(run / "stage1_sft" / "training"),
             "--seed", str(seed), *flags, *extra)
        metrics = step("nemotron.recipes.nano2.stage2_alignment.evaluation", out / "evaluation", "--checkpoint-path",
                       str(out / "training"))["metrics"]
        lesson = metrics["lesson"]
        row = {"variant": name, "flags": flags, "gain": lesson["gain"], "standard_error": lesson["standard_error"],
               "p_right": metrics["dpo_skill_p_right"], "p_near_miss": metrics["dpo_skill_p_near_miss"],
               "greedy": metrics["dpo_skill_accuracy"], "chat_nll": metrics["dpo_completion_nll"],
               "sft": {"p_right": metrics["sft_skill_p_right"], "p_near_miss": metrics["sft_skill_p_near_miss"],
                       "greedy": metrics["sft_skill_accuracy"], "chat_nll": metrics["sft_completion_nll"]}}
        rows.append(row)
        print(json.dumps(row))
        print(f"bench_dpo_variants: {name}: chance right {row['sft']['p_right']:.3f} -> {row['p_right']:.3f} "
              f"({row['gain']:+.3f} ± {row['standard_error']:.3f}), near miss {row['sft']['p_near_miss']:.3f} -> "
              f"{row['p_near_miss']:.3f}, greedy {row['greedy']:.3f}, chat NLL {row['chat_nll']:.3f}", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "seed": seed, "variants": rows},
                                        indent=1) + "\n")
    default = rows[0]
    print(json.dumps({"default_gain_in_standard_errors": round(default["gain"] / default["standard_error"], 2)
                      if default["standard_error"] else None}))


if __name__ == "__main__":
    main()
