"""The nano2 report card, written from the artifacts alone.

    python -m nemotron.recipes.nano2.report runs/nano2            # a recipe output folder
    python -m nemotron.recipes.nano2.report runs/nano2/stage2_alignment/evaluation   # or any artifact

Starting from the last evaluation artifact, it follows the recorded inputs back to the raw sources
and writes, next to the recipe output (`<folder>/report/`):

  report.md         lineage tree, each step's settings, the base / SFT / DPO metrics side by side,
                    wall time per step
  loss_curves.png   training loss (line) and validation loss (dots) of each training step,
                    read from the metrics JSONL each checkpoint artifact references

Nothing here re-runs a model or reads a tracker: if the artifacts are on disk, the report can be
rebuilt, by anyone, at any time.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.artifact import METADATA
from nemotron.errors import NemotronError
from nemotron.recipes.report_card import (
    collect,
    fmt,
    plain_metrics,
    plot_loss_curves,
    report_main,
    steps_section,
)

# The recipe's steps in order: (stage folder, step folder). The report lists what exists of these.
STEPS = [
    (stage, step)
    for stage in ("stage0_pretrain", "stage1_sft", "stage2_alignment")
    for step in ("data_curation", "training", "evaluation")
]
MODELS = ("base", "sft", "dpo")  # metric prefixes, in the order the recipe produces the models


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


def side_by_side(artifacts: list[dict[str, Any]]) -> list[str]:
    """Rows of `measure | base | sft | dpo` from metrics named `<model>_<measure>`."""
    table: dict[str, dict[str, Any]] = {}
    for art in artifacts:
        if not art["type"].endswith("results"):
            continue
        for key, value in art.get("metrics", {}).items():
            match = re.fullmatch(rf"({'|'.join(MODELS)})_(.+)", key)
            if match and isinstance(value, (int, float)) and not isinstance(value, bool):
                table.setdefault(match[2], {})[match[1]] = value
    lines = ["| measure | base | SFT | DPO |", "|---|---|---|---|"]
    for measure, by_model in table.items():
        cells = [fmt(by_model[m]) if m in by_model else "" for m in MODELS]
        lines.append(f"| {measure} | " + " | ".join(cells) + " |")
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

    first = artifacts[0]
    producer = first.get("producer") or {}
    md = [
        "# nano2 report card",
        "",
        f"scale **{first['scale']}**, seed **{first['seed']}**, nemotron {producer.get('version')}"
        f", commit `{(producer.get('git_commit') or 'unknown')[:12]}`",
        "",
        "## Results: base (stage 0) vs SFT (stage 1) vs DPO (stage 2), on held-out data",
        "",
        *side_by_side(artifacts),
    ]
    for art in artifacts:
        if art["type"] == "pretrainresults":
            md += ["", "## Pretraining evaluation", "", *plain_metrics(art)]

    checkpoints = [a for a in artifacts if a["type"].endswith("checkpoint") and "metrics_path" in a]
    if checkpoints:
        plot_loss_curves(checkpoints, out / "loss_curves.png")
        md += ["", "## Loss curves", "", "![training and validation loss](loss_curves.png)"]

    md += steps_section(artifacts, starts[-1])

    report = out / "report.md"
    atomic.write_text(report, "\n".join(md))
    return report


def main(argv: list[str]) -> int:
    return report_main(argv, write_report, "python -m nemotron.recipes.nano2.report FOLDER")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
