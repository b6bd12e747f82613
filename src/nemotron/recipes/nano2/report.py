"""The nano2 report card, written from the artifacts alone.

    python -m nemotron.recipes.nano2.report runs/nano2            # a recipe output folder
    python -m nemotron.recipes.nano2.report runs/nano2/stage2_alignment/evaluation   # or any artifact

Starting from the last evaluation artifact, it follows the recorded inputs back to the raw sources
and writes, next to the recipe output (`<folder>/report/`):

  report.md         each stage's lesson first (its gain, standard error and verdict, the answers it
                    changed), the skill stage by stage, the base / SFT / DPO metrics side by side with
                    their directions, greedy answers of the
                    three models to the same held-out questions (each marked when copied from that
                    model's training data, `nemotron.trace`), wall time per step, settings, lineage
  loss_curves.png   training loss (line) and validation loss (dots) of each training step,
                    read from the metrics JSONL each checkpoint artifact references

Nothing here re-runs a model or reads a tracker (the copy marks read only tokenizers and training data):
if the artifacts are on disk, the report can be rebuilt, by anyone, at any time.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.artifact import METADATA
from nemotron.errors import NemotronError
from nemotron.recipes.report_card import (
    collect,
    copied_note,
    copy_tracer,
    fmt,
    header,
    lessons_section,
    plain_metrics,
    plot_loss_curves,
    report_main,
    standard_benchmarks_section,
    steps_section,
    talk_section,
)

# The recipe's steps in order: (stage folder, step folder). The report lists what exists of these.
STEPS = [
    *((stage, step)
      for stage in ("stage0_pretrain", "stage1_sft", "stage2_alignment")
      for step in ("data_curation", "training", "evaluation")),
    ("evaluation", "benchmarks"),  # the final model's standard benchmarks (orchestration.benchmark_final_model)
]
MODELS = ("base", "sft", "dpo")  # metric prefixes, in the order the recipe produces the models

LOWER_IS_BETTER = ("loss", "nll", "perplexity", "bits_per_byte", "p_near_miss")
MUTUAL_INFO_NOTE = (
    "Why plain answer accuracy can fall while mutual-information accuracy rises: `answer_accuracy` picks "
    "the answer with the highest log-likelihood, and a model this small mostly learns which answers are "
    "*typical*; that prior, not the question, decides the raw score, so it hovers at chance (0.25) and "
    "moves by noise. `answer_accuracy_mutual_info` (lm-eval's `acc_mutual_info`, Holtzman et al., 2021) "
    "subtracts each answer's own log-likelihood after a neutral prompt, asking whether the *question* made "
    "its answer likelier: that is what SFT teaches, and where it shows."
)


def find_artifacts(folder: Path) -> list[Path]:
    """The artifact folder itself, or every step of a recipe output folder that has run."""
    if (folder / METADATA).exists():
        return [folder]
    found = [folder / stage / step for stage, step in STEPS if (folder / stage / step / METADATA).exists()]
    if not found:
        raise NemotronError(
            f"{folder}: no nano2 artifact found (looked for <stage>/<step>/metadata.json); "
            "pass the recipe output folder or an artifact folder"
        )
    return found


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def direction(measure: str) -> str:
    """Which way is better for a metric name: "lower" for losses, "higher" for accuracies and margins."""
    if any(word in measure for word in LOWER_IS_BETTER):
        return "lower"
    if "accuracy" in measure or "margin" in measure or measure.endswith("p_right"):
        return "higher" if not measure.endswith(("_chance", "_num_items")) else ""
    return ""


STAGES = {"pretrainresults": "stage 0: pretraining", "sftresults": "stage 1: SFT", "dporesults": "stage 2: DPO"}


def lesson_lines(artifacts: list[dict[str, Any]]) -> list[str]:
    """Each stage's lesson and the answers it changed (recipes.report_card), then the skill stage by stage:
    what the teacher did, what SFT imitated, what DPO's judged pairs changed."""
    md = lessons_section(artifacts, STAGES)
    by_type = {a["type"]: a.get("metrics", {}) for a in artifacts}
    sft, dpo, data, pairs = (by_type.get(kind, {}) for kind in ("sftresults", "dporesults", "sftdataset",
                                                                 "preferencedataset"))
    if "sft_skill_p_right" not in sft:
        return md + ([""] if md else [])
    rows = [("greedy answer right (the checker)", "skill_accuracy"),
            ("chance of a right answer (exact, per problem)", "skill_p_right"),
            ("chance of the teacher's mistake (the near miss)", "skill_p_near_miss")]
    md += ["", "### The skill, stage by stage", "",
           f"\"Which is the largest\" on {sft.get('sft_skill_num_problems')} held-out problems. The SFT teacher "
           f"answered {fmt(data.get('teacher_error_share', ''))} of its demonstrations with the second-largest "
           "number (a near miss); SFT learns it as a habit of its samples, and DPO, trained on pairs of the SFT "
           "model's own answers judged by the checker, pushes it down. Each value ± its standard error. The "
           "chat rows leave the skill's chats out; the base model is scored without the template's end-of-turn "
           "marker, which it never saw in pretraining.", "",
           "| measure | base | SFT | DPO |", "|---|---|---|---|"]
    for label, key in rows:
        md.append(f"| {label} | " + " | ".join(
            f"{fmt(m[f'{name}_{key}'])} ± {m[f'{name}_{key}_stderr']:.2g}" if f"{name}_{key}" in m else ""
            for name, m in (("base", sft), ("sft", sft), ("dpo", dpo))) + " |")
    if isinstance(chat := sft.get("chat"), dict):  # stage 1's chat measure, fair to a base that never saw <|im_end|>
        md.append(f"| chat: the answers' NLL, content tokens only (the end-of-turn marker left out, lower is "
                  f"better) | {fmt(chat['before'])} | {fmt(chat['after'])} "
                  f"({chat['gain']:+.3g} ± {chat['standard_error']:.2g}) | |")
    if dpo:
        md += [f"| held-out pairs: right answer above the near miss (per token) | | "
               f"{fmt(dpo.get('sft_preference_accuracy', ''))} | {fmt(dpo.get('dpo_preference_accuracy', ''))} |",
               f"| chat: completion NLL (with the end-of-turn marker: SFT's loss) on the stage-1 test chats, the "
               f"skill's left out (lower is better) | | "
               f"{fmt(dpo.get('sft_completion_nll', ''))} | {fmt(dpo.get('dpo_completion_nll', ''))} |", "",
               f"DPO's implicit reward on the held-out pairs (beta {fmt(dpo.get('beta', ''))}): accuracy "
               f"{fmt(dpo.get('reward_accuracy', ''))}, margin {fmt(dpo.get('reward_margin', ''))}. Its training "
               f"pairs, by the kind of rejected answer, and the problems that gave none: "
               f"{', '.join(f'{k} {v}' for k, v in pairs.get('judged', {}).items())}."]
    return md + [""]


def samples_table(artifacts: list[dict[str, Any]]) -> list[str]:
    """Greedy answers of base, SFT and DPO to the same held-out questions (stage-1 and stage-2 samples)."""
    # samples.json keys per artifact type: {model: key}; stage 1 has base and SFT, stage 2 SFT and DPO.
    keys = {"sftresults": {"base": "base_completion", "sft": "completion"},
            "dporesults": {"sft": "sft_completion", "dpo": "completion"}}
    rows: dict[str, dict[str, str]] = {}
    for art in artifacts:
        if art["type"] in keys and art.get("samples_path"):
            for sample in json.loads(Path(art["samples_path"]).read_text(encoding="utf-8")):
                row = rows.setdefault(sample["prompt"], {})
                for model, key in keys[art["type"]].items():
                    row.setdefault(model, sample.get(key, ""))
    if not rows:
        return []

    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|") or "(nothing)"

    # Each answer checked against the training data of the model that gave it (its checkpoint's lineage).
    checkpoint_types = {"base": "pretraincheckpoint", "sft": "sftcheckpoint", "dpo": "dpocheckpoint"}
    tracers = {model: copy_tracer(next((a for a in artifacts if a["type"] == kind), None))
               for model, kind in checkpoint_types.items()}

    def answer_cell(answers: dict[str, str], model: str) -> str:
        note = copied_note(tracers[model], answers.get(model, ""))
        return cell(answers.get(model, "")) + (f" {cell(note)}" if note else "")

    lines = ["| held-out question | base | SFT | DPO |", "|---|---|---|---|"]
    for prompt, answers in rows.items():
        lines.append(f"| {cell(prompt)} | " + " | ".join(answer_cell(answers, m) for m in MODELS) + " |")
    return lines


def side_by_side(artifacts: list[dict[str, Any]]) -> list[str]:
    """Rows of `measure | better | base | sft | dpo` from metrics named `<model>_<measure>`."""
    table: dict[str, dict[str, Any]] = {}
    for art in artifacts:
        if not art["type"].endswith("results"):
            continue
        for key, value in art.get("metrics", {}).items():
            match = re.fullmatch(rf"({'|'.join(MODELS)})_(.+)", key)
            # (standard errors stay in the tables that print them beside their values)
            if match and isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    not key.endswith("_stderr"):
                table.setdefault(match[2], {})[match[1]] = value
    lines = ["| measure | better | base | SFT | DPO |", "|---|---|---|---|---|"]
    for measure, by_model in table.items():
        cells = [fmt(by_model[m]) if m in by_model else "" for m in MODELS]
        lines.append(f"| {measure} | {direction(measure)} | " + " | ".join(cells) + " |")
    return lines


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------


def write_report(folder: Path) -> Path:
    """Write `<folder>/report/report.md` and its plots; return the report path."""
    folder = Path(folder)
    starts = find_artifacts(folder)
    artifacts = collect(starts)
    out = (folder if not (folder / METADATA).exists() else folder.parent.parent) / "report"
    out.mkdir(parents=True, exist_ok=True)

    md = [
        *header("nano2", artifacts),
        "## Did it work?",
        "",
        *lesson_lines(artifacts),
        "## Results: base (stage 0) vs SFT (stage 1) vs DPO (stage 2), on held-out data",
        "",
        *side_by_side(artifacts),
        "",
        MUTUAL_INFO_NOTE,
    ]
    samples = samples_table(artifacts)
    if samples:
        md += ["", "## What the models say", "",
               "Greedy answers to the same held-out questions (never trained on), cut at the sample length. "
               "*copied (N tokens, from ...)* marks an answer with a run of 8+ tokens (or, if shorter, all its "
               "tokens but at most one) word for word in that model's training data: "
               "`python -m nemotron.trace CHECKPOINT "
               "\"answer\"` shows where.", "",
               *samples]
    for art in artifacts:
        if art["type"] == "pretrainresults":
            md += ["", "## Pretraining evaluation", "", *plain_metrics(art)]

    checkpoints = [a for a in artifacts if a["type"].endswith("checkpoint") and "metrics_path" in a]
    if checkpoints:
        plot_loss_curves(checkpoints, out / "loss_curves.png")
        md += ["", "## Loss curves", "", "![training and validation loss](loss_curves.png)"]

    md += standard_benchmarks_section(artifacts)
    md += steps_section(artifacts, starts[-1])
    md += talk_section(artifacts, "A tiny model has seen few chats (its SFT data is in the steps above): expect "
                                  "short, repetitive answers, and the \"which is the largest\" skill it learnt.")

    report = out / "report.md"
    atomic.write_text(report, "\n".join(md))
    return report


def main(argv: list[str]) -> int:
    return report_main(argv, write_report, "python -m nemotron.recipes.nano2.report FOLDER")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
