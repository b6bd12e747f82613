"""Write a recipe README's result tables from what was measured, so no figure in them is typed by hand.

Each table lives between two markers in the README, with the data it was drawn from beside it:

    <!-- results:NAME (scripts/readme_results.py writes this block; do not edit it by hand) -->
    <!-- data: {...} -->
    | ... the table ... |
    <!-- /results:NAME -->

and `render(NAME, data)` draws it again from that data: `tests/test_readme_results.py` checks that every
block is what `render` makes of its data, and that a README's "Expected results" section states no figure
outside its blocks. The blocks of a recipe README, each from its own source:

    python scripts/readme_results.py nano2 expected runs/nano2             # a recipe run: lessons, step times
    python scripts/readme_results.py nano2 lessons lessons.json            # bench_lessons.py --json
    python scripts/readme_results.py nano3 moe_dense lessons.json          # the same file: stage 0, MoE vs dense
    python scripts/readme_results.py nano2 sft_length sft_length.json      # bench_sft_length.py --json
    python scripts/readme_results.py nano2 dpo_variants variants.json      # bench_dpo_variants.py --json

The data of `expected` is read from the run's artifacts alone: each stage's lesson, each step's seconds, and
the run's date, commit, seed and torch threads; the machine's matmul speed is measured when the block is
written (run it on the machine that ran the recipe).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = {recipe: REPO / "src" / "nemotron" / "recipes" / recipe / "README.md" for recipe in ("nano2", "nano3")}
# The evaluation steps holding each stage's lesson, and every step of a run, in order.
LESSONS = {
    "nano2": [("stage 0: pretraining", "stage0_pretrain/evaluation"), ("stage 1: SFT", "stage1_sft/evaluation"),
              ("stage 2: DPO", "stage2_alignment/evaluation")],
    "nano3": [("stage 0: pretraining", "stage0_pretrain/evaluation"), ("stage 1: SFT", "stage1_sft/evaluation"),
              ("stage 2: RL (GRPO)", "stage2_rl/evaluation")],
}
STEPS = {
    "nano2": [f"{stage}/{step}" for stage in ("stage0_pretrain", "stage1_sft", "stage2_alignment")
              for step in ("data_curation", "training", "evaluation")] + ["evaluation/benchmarks"],
    "nano3": ["stage0_pretrain/data_curation", "stage0_pretrain/training", "stage0_pretrain/training_dense",
              "stage0_pretrain/training_dense_time", "stage0_pretrain/evaluation",
              *(f"{stage}/{step}" for stage in ("stage1_sft", "stage2_rl")
                for step in ("data_curation", "training", "evaluation")), "evaluation/benchmarks"],
}
BLOCK = re.compile(r"<!-- results:(?P<name>\w+) \(scripts/readme_results\.py writes this block; do not edit it by "
                   r"hand\) -->\n<!-- data: (?P<data>.*?) -->\n(?P<table>.*?)<!-- /results:(?P=name) -->", re.S)


def matmul_gflops() -> float:
    """This machine's fp32 matmul speed (2048 x 2048, the torch threads a step would use), in GFLOP/s: the
    best of 20 products, as bench_mfu.py measures the peak (a process's first 20 products together ran
    108-153 where later ones ran 169-182 on the same idle machine)."""
    import torch

    from nemotron.cpu import torch_threads
    from nemotron.models.flops import matmul_peak

    torch.set_num_threads(torch_threads())
    return matmul_peak(torch.device("cpu"), torch.float32, 2048, repeats=20) / 1e9


def expected_data(recipe: str, run: Path) -> dict:
    """What the `expected` block shows, from a recipe run folder's artifacts."""
    def metadata(step: str) -> dict | None:
        path = run / step / "metadata.json"
        return json.loads(path.read_text()) if path.exists() else None

    lessons = []
    for stage, step in LESSONS[recipe]:
        art = metadata(step)
        if art is None:
            raise SystemExit(f"error: {run / step} holds no artifact; run the whole recipe into {run} first")
        lessons.append({"stage": stage, **art["metrics"]["lesson"]})
    steps = [[step, round(art["metrics"]["wall_seconds"], 1)] for step in STEPS[recipe]  # in the run's order
             if (art := metadata(step)) is not None and "wall_seconds" in art.get("metrics", {})]
    first = metadata(LESSONS[recipe][-1][1])
    producer = first["producer"]
    return {"date": first["created_at"][:10], "commit": producer["git_commit"][:12],
            "dirty": producer.get("git_dirty", False), "seed": first["seed"], "threads": producer["num_threads"],
            "torch": producer["torch_version"], "matmul_gflops": round(matmul_gflops()),
            "lessons": lessons, "step_seconds": steps, "total_seconds": round(sum(t for _, t in steps), 1)}


def figure(value: float) -> str:
    return f"{value:.4g}"


def verdict(record: dict) -> str:
    ratio = record["gain"] / record["standard_error"] if record["standard_error"] else float("inf")
    return f"{ratio:.1f} SE: {'taught' if record['gain'] > 2 * record['standard_error'] else 'NOT above 2 SE'}"


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def moe_minus_dense(record: dict | None) -> str:
    """One run's MoE-minus-dense cell: the difference ± its paired standard error (its ratio to the error)."""
    if record is None:
        return ""
    difference, error = -record["gain"], record["standard_error"]
    ratio = f" ({difference / error:+.1f} SE)" if error else ""
    return f"{difference:+.4f} ± {error:.4f}{ratio}"


def render(name: str, data: dict) -> str:
    """The table of block `name` drawn from its data (what the test draws again)."""
    if name == "expected":
        dirty = " (with uncommitted changes)" if data["dirty"] else ""
        lines = [f"Measured {data['date']} at commit `{data['commit']}`{dirty}, seed {data['seed']}, "
                 f"{data['threads']} torch threads, torch {data['torch']}, on a 2-core "
                 f"machine whose fp32 matmul ran at {data['matmul_gflops']} GFLOP/s.", "",
                 "| stage | held-out measure | before | after | gain ± SE | n | |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['stage']} | {r['measure']} | {figure(r['before'])} | {figure(r['after'])} | "
                  f"{r['gain']:+.4g} ± {r['standard_error']:.2g} | {r['n']} | {verdict(r)} |" for r in data["lessons"]]
        lines += ["", "| step | seconds |", "|---|---|"]
        lines += [f"| {step} | {seconds} |" for step, seconds in data["step_seconds"]]
        lines += [f"| **all steps** | **{data['total_seconds']}** |"]
        return "\n".join(lines) + "\n"
    if name == "lessons":
        stages = list(dict.fromkeys(stage for run in data["runs"] for stage in run["lessons"]))
        lines = [f"`python benchmarks/bench_lessons.py`, {data['date']}: each stage's gain ± its standard error "
                 "(its ratio to the error), per seed and thread count.", "",
                 "| seed | threads | " + " | ".join(stages) + " | steps (s) | load average at the start |",
                 "|---|---|" + "---|" * len(stages) + "---|---|"]
        for run in data["runs"]:
            cells = [f"{r['gain']:+.3g} ± {r['standard_error']:.2g} ({r['gain'] / r['standard_error']:.1f} SE)"
                     if (r := run["lessons"].get(stage)) and r["standard_error"] else "" for stage in stages]
            lines.append(f"| {run['seed']} | {run['threads']} | " + " | ".join(cells) +
                         f" | {run['step_seconds']} | {run['load_average']} |")
        return "\n".join(lines) + "\n"
    if name == "moe_dense":
        runs = [run for run in data["runs"] if run.get("moe_against_dense")]
        budgets = [("equal_tokens", "same tokens"), ("equal_time", "same training time")]
        lines = [f"`python benchmarks/bench_lessons.py`, {data['date']}: nano3 stage 0's MoE model against its dense "
                 "counterpart of the same active parameters, trained on the same tokens and for the same time; the "
                 "MoE model's held-out loss minus the dense model's (nats/token), window by window, ± its paired "
                 "standard error (negative: the MoE predicts better).", "",
                 "| seed | threads | " + " | ".join(f"MoE - dense, {what}" for _, what in budgets) + " |",
                 "|---|---|" + "---|" * len(budgets)]
        for run in runs:
            lines.append(f"| {run['seed']} | {run['threads']} | " + " | ".join(
                moe_minus_dense(run["moe_against_dense"].get(budget)) for budget, _ in budgets) + " |")
        for budget, what in budgets:
            records = [r for run in runs if (r := run["moe_against_dense"].get(budget))]
            if records:
                differences = sorted(-r["gain"] for r in records)
                ratios = sorted(-r["gain"] / r["standard_error"] for r in records if r["standard_error"])
                lines.append(f"\n{what.capitalize()}, over {len(records)} runs: median {median(differences):+.4f} "
                             f"nats/token (from {differences[0]:+.4f} to {differences[-1]:+.4f}); in standard "
                             f"errors, median {median(ratios):+.1f} (from {ratios[0]:+.1f} to {ratios[-1]:+.1f}).")
        return "\n".join(lines) + "\n"
    if name == "sft_length":
        # Curves measured before bench_sft_length compared each point with the default item for item lack the column.
        paired = all("against_default" in point for point in data["points"])
        columns = [*data["columns"], *(["the lesson's change from the default: paired ± SE"] if paired else [])]
        lines = [f"`python benchmarks/bench_sft_length.py`, {data['date']}, seed {data['seed']}: SFT for a share of "
                 f"its default {data['default_epochs']:.3g} passes over the data; {data['measure']}.", "",
                 "| share of the default | passes | steps | " + " | ".join(columns) + " |",
                 "|---|---|---|" + "---|" * len(columns)]
        for point in data["points"]:
            cut = " (--patience stopped it)" if point.get("stopped_early") else ""  # older curves lack the key
            change = point.get("against_default")
            cells = [*point["cells"], *([f"{change['gain']:+.3f} ± {change['standard_error']:.3f} "
                                         f"({change['verdict']})"] if paired else [])]
            lines.append(f"| {point['fraction']:g} | {point['epochs']:g} | {point['steps']}{cut} | " +
                         " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"
    if name == "dpo_variants":
        sft = data["variants"][0]["sft"]
        lines = [f"`python benchmarks/bench_dpo_variants.py`, {data['date']}, seed {data['seed']}; the SFT model: "
                 f"chance of a right answer {figure(sft['p_right'])}, of the near miss {figure(sft['p_near_miss'])}, "
                 f"greedy right {figure(sft['greedy'])}, chat NLL {figure(sft['chat_nll'])}.", "",
                 "| variant | chance of a right answer: gain ± SE | near miss | greedy right | chat NLL |",
                 "|---|---|---|---|---|"]
        lines += [f"| {v['variant']} | {v['gain']:+.3g} ± {v['standard_error']:.2g} | {figure(v['p_near_miss'])} | "
                  f"{figure(v['greedy'])} | {figure(v['chat_nll'])} |" for v in data["variants"]]
        return "\n".join(lines) + "\n"
    raise SystemExit(f"error: unknown block {name!r}; use expected, lessons, moe_dense, sft_length or dpo_variants")


def write_block(readme: Path, name: str, data: dict) -> None:
    """Put block `name` (its data and its table) into `readme`, in place of the one there."""
    head = f"<!-- results:{name} (scripts/readme_results.py writes this block; do not edit it by hand) -->"
    block = f"{head}\n<!-- data: {json.dumps(data)} -->\n{render(name, data)}<!-- /results:{name} -->"
    text = readme.read_text(encoding="utf-8")
    found = [m for m in BLOCK.finditer(text) if m["name"] == name]
    if not found:
        raise SystemExit(f"error: {readme} has no results:{name} block; add its two marker lines where the table "
                         "goes, then run this again")
    readme.write_text(text[: found[0].start()] + block + text[found[0].end():], encoding="utf-8")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in README:
        print(__doc__, file=sys.stderr)
        return 2
    recipe, name, source = argv[0], argv[1], Path(argv[2])
    data = expected_data(recipe, source) if name == "expected" else json.loads(source.read_text())
    if name in ("lessons", "moe_dense"):  # bench_lessons.py runs both recipes: this README shows its own runs
        data = {**data, "runs": [run for run in data["runs"] if run["recipe"] == recipe]}
    elif name == "sft_length" and data.get("recipe") != recipe:
        raise SystemExit(f"error: {source} measured {data.get('recipe')}'s SFT, not {recipe}'s")
    write_block(README[recipe], name, data)
    print(f"readme_results: wrote results:{name} of {README[recipe].relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
