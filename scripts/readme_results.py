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
    python scripts/readme_results.py top chat_page docs/chat-page.png.json # README.md: the chat page's answers
    python scripts/readme_results.py top serving serving.json              # README.md: bench_serve.py --json

The data of `expected` is read from the run's artifacts alone: each stage's lesson, each step's seconds, and
the run's date, commit, seed and torch threads, and every step's artifact digest; the machine's matmul speed is
measured when the block is written (run it on the machine that ran the recipe). The pictures of a run in the
READMEs (`PICTURES`) are made by their scripts from that same run: each writes the digests of what it shows
beside it (`scripts/picture_sidecar.py`), and `picture_mismatches` names the steps where they differ from the
block's. The top README's chat example (`chat_page`) is drawn from the chat page picture's sidecar.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = {recipe: REPO / "src" / "nemotron" / "recipes" / recipe / "README.md" for recipe in ("nano2", "nano3")}
TOP_README = REPO / "README.md"
TOP_BLOCKS = ("chat_page", "serving")  # README.md's blocks
# Each picture made from a run, and the recipe whose Expected-results run it must show.
PICTURES = {"docs/chat-page.png": "nano2", "docs/runs-browser.png": "nano2"}
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
    data = {"date": first["created_at"][:10], "commit": producer["git_commit"][:12],
            "dirty": producer.get("git_dirty", False), "seed": first["seed"], "threads": producer["num_threads"],
            "torch": producer["torch_version"], "matmul_gflops": round(matmul_gflops()),
            "lessons": lessons, "step_seconds": steps, "total_seconds": round(sum(t for _, t in steps), 1)}
    if recipe == "nano2":
        sft, dpo = (metadata(step)["metrics"] for _, step in LESSONS[recipe][1:])
        if "chat" not in sft:
            raise SystemExit(f"error: {run / LESSONS[recipe][1][1]} was evaluated before SFT's lesson became the "
                             "skill (it has no chat measure); run the recipe again at this commit")
        data |= nano2_skill(sft, dpo)
    if recipe == "nano3":  # stage 0's own question: the MoE model against its dense counterparts
        data["moe_against_dense"] = metadata(LESSONS[recipe][0][1])["metrics"].get("moe_against_dense")
        if not data["moe_against_dense"]:
            raise SystemExit(f"error: {run / LESSONS[recipe][0][1]} was evaluated without the dense counterparts; "
                             "run the recipe again at this commit")
    # Every step's artifact digest: the run this block shows, which the pictures made from a run must match
    # (scripts/run_pictures.py writes them beside each picture; tests/test_readme_results.py compares).
    return data | {"digests": {step: art["digest"] for step in STEPS[recipe] if (art := metadata(step)) is not None}}


def nano2_skill(sft: dict, dpo: dict) -> dict:
    """nano2's skill, model by model (stage 1 scores base and SFT, stage 2 the DPO model), and the chat's NLL
    beside SFT's lesson (the answers' content tokens: `stage1_sft/evaluation.py` says why)."""
    def row(model: str, metrics: dict) -> dict:  # each measure: [value, standard error]
        prefix = f"{model.lower()}_skill_"
        return {"model": model, **{key: [metrics[prefix + key], metrics[f"{prefix}{key}_stderr"]]
                                   for key in ("p_right", "accuracy", "p_near_miss")}}
    return {"skill": [row("base", sft), row("SFT", sft), row("DPO", dpo)], "chat": sft["chat"]}


def picture_mismatches(sidecar: dict, expected: dict) -> list[str]:
    """The steps whose artifact a picture shows (its sidecar's digests) other than the run of an Expected-results
    block (its data's digests) does: one line each; none when the picture comes from that run."""
    recorded = expected.get("digests", {})
    return [f"{step}: the picture shows {digest[:12]}, Expected results' run has "
            f"{recorded[step][:12] if step in recorded else 'no such step'}"
            for step, digest in sidecar["digests"].items() if recorded.get(step) != digest]


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


def over_seeds(data: dict, stages: list[str]) -> list[str]:
    """The lessons block's summary: per stage and thread count, over the runs' seeds, the median gain, its
    spread (lowest and highest), the median and lowest gain/SE ratio, and how many runs taught (above 2 SE);
    then, where the runs recorded it (nano2), each model's greedy right share on the skill."""
    groups = list(dict.fromkeys(run["threads"] for run in data["runs"]))
    lines = ["Each stage over seeds: the median of the runs' gains, their spread, and the median of each run's "
             "gain over its standard error (a lesson is taught above 2).", "",
             "| stage | held-out measure | threads | seeds | median gain | spread (lowest to highest) | "
             "median gain/SE | lowest gain/SE | runs above 2 SE |", "|---|---|---|---|---|---|---|---|---|"]
    for stage in stages:
        for threads in groups:
            records = [(run["seed"], run["lessons"][stage]) for run in data["runs"]
                       if run["threads"] == threads and stage in run["lessons"]]
            if not records:
                continue
            gains = [r["gain"] for _, r in records]
            ratios = [r["gain"] / r["standard_error"] if r["standard_error"] else float("inf") for _, r in records]
            taught = sum(r["gain"] > 2 * r["standard_error"] and r["gain"] > 0 for _, r in records)
            lines.append(f"| {stage} | {records[0][1]['measure']} | {threads} | {seed_list([s for s, _ in records])} | "
                         f"{median(gains):+.3g} | {min(gains):+.3g} to {max(gains):+.3g} | {median(ratios):.1f} | "
                         f"{min(ratios):.1f} | {taught} of {len(records)} |")
    greedy = [run for run in data["runs"] if run.get("greedy")]
    if greedy:
        models = list(dict.fromkeys(model for run in greedy for model in run["greedy"]))
        cells = []
        for model in models:
            values = [run["greedy"][model] for run in greedy if model in run["greedy"]]
            cells.append(f"{model} {median(values):.3g} ({min(values):.3g} to {max(values):.3g})")
        lines += ["", f"The skill's greedy answer right, median (lowest to highest) over the {len(greedy)} runs: "
                  + ", ".join(cells) + "."]
    return lines


def seed_list(seeds: list[int]) -> str:
    """0-9, or 0, 3, 5: the seeds of a row, runs of consecutive seeds shortened."""
    seeds, parts, start = sorted(seeds), [], None
    for i, seed in enumerate(seeds):
        start = seed if start is None else start
        if i + 1 == len(seeds) or seeds[i + 1] != seed + 1:
            parts.append(f"{start}-{seed}" if seed - start > 1 else ", ".join(map(str, range(start, seed + 1))))
            start = None
    return ", ".join(parts)


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
        if "skill" in data:  # nano2: the skill model by model, and the chat's NLL beside SFT's lesson
            lines += ["", "| held-out skill problems | base | SFT | DPO |", "|---|---|---|---|"]
            lines += [f"| {label} | " + " | ".join(f"{figure(r[key][0])} ± {r[key][1]:.2g}" for r in data["skill"]) +
                      " |" for label, key in (("chance of a right answer (exact)", "p_right"),
                                              ("greedy answer right", "accuracy"),
                                              ("chance of the teacher's near miss", "p_near_miss"))]
            chat = data["chat"]
            lines += ["", f"Beside SFT's lesson, the chat: {chat['measure']}: {figure(chat['before'])} -> "
                          f"{figure(chat['after'])}, {chat['gain']:+.4g} ± {chat['standard_error']:.2g} "
                          f"({chat['n']} chats)."]
        if "moe_against_dense" in data:  # nano3: stage 0's answer, MoE minus dense at the same active parameters
            against = data["moe_against_dense"]
            lines += ["", "Stage 0's question, the MoE model against its dense counterpart of the same active "
                      "parameters: the MoE's held-out loss minus the dense model's (nats/token), paired over the "
                      f"same {against['equal_tokens']['n']} windows (negative: the MoE predicts better).", "",
                      "| trained on | MoE steps (seconds) | dense steps (seconds) | MoE - dense ± SE |",
                      "|---|---|---|---|"]
            lines += [f"| {what} | {record['moe_steps']} ({record['moe_train_seconds']:.1f}) | {record['dense_steps']} "
                      f"({record['dense_train_seconds']:.1f}) | {moe_minus_dense(record)} |"
                      for budget, what in (("equal_tokens", "the same tokens"), ("equal_time", "the same time"))
                      if (record := against.get(budget))]
        lines += ["", "| step | seconds |", "|---|---|"]
        lines += [f"| {step} | {seconds} |" for step, seconds in data["step_seconds"]]
        lines += [f"| **all steps** | **{data['total_seconds']}** |"]
        return "\n".join(lines) + "\n"
    if name == "lessons":
        stages = list(dict.fromkeys(stage for run in data["runs"] for stage in run["lessons"]))
        lines = [*over_seeds(data, stages), "",
                 f"`python benchmarks/bench_lessons.py`, {data['date']}: each stage's gain ± its standard error "
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
    if name == "chat_page":
        def cell(text: str) -> str:
            return " ".join(text.split()).replace("|", "\\|") or "(nothing)"

        lines = [f"What the page shows, answer by answer (`{data['command']}`, from the run in nano2's Expected "
                 f"results: commit `{data['commit']}`, seed {data['seed']}):", "", "| asked | model | answer |",
                 "|---|---|---|"]
        lines += [f"| {cell(a['asked'])} | {cell(a['model'])} | {cell(a['answer'])} |" for a in data["answers"]]
        return "\n".join(lines) + "\n"
    if name == "serving":
        return serving(data)
    raise SystemExit(f"error: unknown block {name!r}; "
                     "use expected, lessons, moe_dense, sft_length, dpo_variants, chat_page or serving")


def serving(data: dict) -> str:
    """README.md's serving figures (benchmarks/bench_serve.py --json): per model and number of clients, tokens/s
    at once against the same requests one after another, the server's CPU per token both ways, the first token;
    then the head-of-line case and what a cache row costs."""
    dirty = " (with uncommitted changes)" if data["dirty"] else ""
    goals = ", ".join(f"{clients} clients {goal:g}x" for clients, goal in data["goals"].items())
    lines = [f"`{data['command']}`, {data['date']} at commit `{data['commit']}`{dirty}, {data['cores']} cores "
             f"({data['cpu_model']}), load average {data['load_average_before'][0]:.2f} when it started and "
             f"{data['load_average_after'][0]:.2f} when it ended: {data['max_tokens']} tokens per streamed chat "
             f"answer, the server on one torch thread; goals (issue #61): {goals} the tokens/s of one after another.",
             "",
             "| model | clients | tokens/s at once | one after another | at once over one after another | "
             "server CPU per token, one after another over at once | first token, median (alone) | complete |",
             "|---|---|---|---|---|---|---|---|"]
    for model in data["models"]:
        for run in model["concurrent"]:
            ratio, goal = run["over_sequential"], data["goals"].get(str(run["clients"]))
            verdict = "" if goal is None else " (goal met)" if ratio >= goal else f" (below the {goal:g}x goal)"
            cpu = "" if run["cpu_over_sequential"] is None else f"{run['cpu_over_sequential']:.2f}x"
            lines.append(f"| {model['model']} | {run['clients']} | {run['tokens_per_s']:.1f} | "
                         f"{run['sequential_tokens_per_s']:.1f} | **{ratio:.2f}x**{verdict} | {cpu} | "
                         f"{run['median_ttft_s']:.2f} s ({run['sequential_median_ttft_s']:.2f} s) | "
                         f"{run['complete']}/{run['clients']} |")
    lines.append("")
    for model in data["models"]:
        line, cache = model["head_of_line"], model["cache"]
        fixed = f" and {cache['bytes_per_row']:,} bytes whatever its length" if cache["bytes_per_row"] else ""
        full = cache["max_batch_size"] * (cache["bytes_per_row"] + model["context"] * cache["bytes_per_token"])
        lines.append(f"{model['model']}: a 2-token completion sent {data['delay_s']:g} s after a "
                     f"{data['long_tokens']}-token one was answered in {line['beside_long_s']:.2f} s "
                     f"({line['alone_s']:.2f} s alone; target {line['target_s']:.2f} s). A cache row holds "
                     f"{cache['bytes_per_token']:,} bytes per token{fixed}, so {cache['max_batch_size']} rows "
                     f"of its {model['context']:,} positions take {full / 2**30:.2f} GiB.")
    return "\n".join(lines) + "\n"


def write_block(readme: Path, name: str, data: dict) -> None:
    """Put block `name` (its data and its table) into `readme`, in place of the one there."""
    head = f"<!-- results:{name} (scripts/readme_results.py writes this block; do not edit it by hand) -->"
    stored = json.dumps(data).replace("-->", "--\\u003e")  # a "-->" in an answer would end the comment
    block = f"{head}\n<!-- data: {stored} -->\n{render(name, data)}<!-- /results:{name} -->"
    text = readme.read_text(encoding="utf-8")
    found = [(m.start(), m.end()) for m in BLOCK.finditer(text) if m["name"] == name]
    if not found and (empty := f"{head}\n<!-- /results:{name} -->") in text:  # the two marker lines alone
        found = [(text.index(empty), text.index(empty) + len(empty))]
    if not found:
        raise SystemExit(f"error: {readme} has no results:{name} block; add its two marker lines where the table "
                         "goes, then run this again")
    readme.write_text(text[: found[0][0]] + block + text[found[0][1]:], encoding="utf-8")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in (*README, "top") or (argv[0] == "top") != (argv[1] in TOP_BLOCKS):
        print(__doc__, file=sys.stderr)
        return 2
    recipe, name, source = argv[0], argv[1], Path(argv[2])
    if recipe == "top":  # the chat page picture's sidecar (screenshot_chat_page.py), or bench_serve.py --json
        write_block(TOP_README, name, json.loads(source.read_text()))
        print(f"readme_results: wrote results:{name} of README.md", file=sys.stderr)
        return 0
    data = expected_data(recipe, source) if name == "expected" else json.loads(source.read_text())
    if name in ("lessons", "moe_dense"):  # bench_lessons.py runs both recipes: this README shows its own runs
        data = {**data, "runs": [run for run in data["runs"] if run["recipe"] == recipe]}
        for stage in {stage for run in data["runs"] for stage in run["lessons"]}:
            measures = {run["lessons"][stage]["measure"] for run in data["runs"] if stage in run["lessons"]}
            if len(measures) > 1:
                raise SystemExit(f"error: {source}: the runs measured {recipe}'s {stage} lesson in {len(measures)} "
                                 f"ways ({' / '.join(sorted(measures))}); run them all at one commit")
    elif name == "sft_length" and data.get("recipe") != recipe:
        raise SystemExit(f"error: {source} measured {data.get('recipe')}'s SFT, not {recipe}'s")
    write_block(README[recipe], name, data)
    print(f"readme_results: wrote results:{name} of {README[recipe].relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
