"""The nano3 report card, written from the artifacts alone (pieces shared with nano2: recipes.report_card).

    python -m nemotron.recipes.nano3.report runs/nano3

writes `runs/nano3/report/`:

  report.md          the MoE model, its dense counterpart and the unigram baseline side by side (held-out
                     bits per byte, parameters, training time), the steps and the lineage
  loss_curves.png    training and validation loss of both pretraining runs
  expert_load.png    per MoE layer, each expert's share of the routed tokens over the steps, and the
                     load-balancing loss (1.0 = perfectly even): routing settling, or not
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.artifact import METADATA
from nemotron.errors import NemotronError
from nemotron.recipes import report_card
from nemotron.recipes.report_card import (
    collect,
    fmt,
    header,
    plot_loss_curves,
    report_main,
    steps_section,
    talk_section,
)
from nemotron.training.metrics import read_metrics

STEPS = [*(("stage0_pretrain", step) for step in ("data_curation", "training", "training_dense", "training_dense_time",
                                                  "evaluation")),
         *(("stage1_sft", step) for step in ("data_curation", "training", "evaluation")),
         *(("stage2_rl", step) for step in ("data_curation", "training", "evaluation")),
         ("evaluation", "benchmarks")]  # the final model's standard benchmarks (orchestration.benchmark_final_model)


def write_report(folder: Path) -> Path:
    """Write `<folder>/report/report.md` and its plots for a nano3 recipe output folder; return the report."""
    folder = Path(folder)
    starts = [folder / stage / step for stage, step in STEPS if (folder / stage / step / METADATA).exists()]
    if not starts:
        raise NemotronError(f"{folder}: no nano3 artifact found (looked for <stage>/<step>/metadata.json); pass the "
                            "nano3 recipe output folder")
    artifacts = collect(starts)
    out = folder / "report"
    out.mkdir(parents=True, exist_ok=True)
    md = header("nano3", artifacts)
    md += lesson_lines(artifacts)

    results = [a for a in artifacts if a["type"] == "nano3pretrainresults"]
    if results:
        md += ["## Stage 0: mixture of experts vs dense, same active parameters, on held-out text", "",
               *comparison(results[-1]["metrics"])]
    sft = [a for a in artifacts if a["type"] == "nano3sftresults"]
    if sft:
        data = next((a["metrics"] for a in artifacts if a["type"] == "nano3sftdataset"), {})
        md += ["", "## Stage 1: exact match on held-out problems, base vs SFT (± one standard error)", "",
               *exact_match(sft[-1]["metrics"], data)]
    rl = [a for a in artifacts if a["type"] == "nano3rlresults"]
    if rl:
        md += ["", "## Stage 2: GRPO, held-out reward and exact match (reasoning on), SFT vs RL", "",
               *rl_table(rl[-1]["metrics"])]
    policies = [a for a in artifacts if a["type"] == "nano3rlcheckpoint"]
    if policies:
        plot_reward(policies[-1]["metrics_path"], out / "reward.png")
        md += ["", "![GRPO reward per step](reward.png)"]
    md += samples_table(artifacts)
    checkpoints = [a for a in artifacts if a["type"] in ("nano3pretraincheckpoint", "nano3sftcheckpoint")]
    if checkpoints:
        plot_loss_curves(checkpoints, out / "loss_curves.png")
        md += ["", "## Loss curves", "", "![training and validation loss](loss_curves.png)"]
    moe = [a for a in checkpoints if a["type"] == "nano3pretraincheckpoint" and not a.get("dense")]
    if moe:
        plot_expert_load(moe[-1]["metrics_path"], out / "expert_load.png")
        md += ["", "## Expert load", "",
               "Each expert's share of the routed tokens per MoE layer (an even split is 1/experts), and each",
               "layer's busiest expert over the steps.", "", "![expert load](expert_load.png)", "",
               *expert_balance(moe[-1]["metrics_path"])]
    md += report_card.standard_benchmarks_section(artifacts)
    md += steps_section(artifacts, starts[-1])
    md += talk_section(artifacts, what_it_has_seen(artifacts))
    report = out / "report.md"
    atomic.write_text(report, "\n".join(md))
    return report


STAGES = {"nano3pretrainresults": "stage 0: pretraining (MoE)", "nano3sftresults": "stage 1: SFT",
          "nano3rlresults": "stage 2: RL (GRPO)"}


def what_it_has_seen(artifacts: list[dict[str, Any]]) -> str:
    """The card's sentence on what to ask the model: its SFT data holds chat only with `--chat-data`."""
    sft_data = [a for a in artifacts if a["type"] == "nano3sftdataset"]
    if sft_data and sft_data[-1].get("config", {}).get("chat_data"):
        return ("Its SFT data held nano2's chat beside the sums: expect short, repetitive chat answers, and "
                "sums worked out column by column.")
    return ("Its SFT data held sums and no chat (`--chat-data` was off): ask it sums in your own wording "
            "(`What is 12+30?`); anything else gets a sum-shaped reply.")


def lesson_lines(artifacts: list[dict[str, Any]]) -> list[str]:
    """"Did it work?": each stage's lesson and the answers it changed (recipes.report_card), then GRPO's
    share of clipped probability ratios, or why it is zero."""
    from nemotron.recipes.report_card import lessons_section

    md = lessons_section(artifacts, STAGES)
    if not md:
        return []
    md = ["## Did it work?", "", *md]
    policies = [a for a in artifacts if a["type"] == "nano3rlcheckpoint" and a.get("metrics_path")]
    if policies and Path(policies[-1]["metrics_path"]).exists():
        clipped = [r["clipped"] for r in read_metrics(policies[-1]["metrics_path"]) if "clipped" in r]
        if clipped:
            share = sum(clipped) / len(clipped)
            md += ["", "### stage 2: RL, finer measures", "",
                   f"Share of completion tokens whose probability ratio PPO's clip cut, mean over {len(clipped)} "
                   f"steps: {fmt(share)}."]
            if share == 0:
                md.append("It is zero because each batch of samples gets one gradient step: the policy being "
                          "updated is the one that sampled, so every ratio is exactly 1 and the clip never acts "
                          "(it only matters from the second update on the same samples).")
    return md + [""]


def samples_table(artifacts: list[dict[str, Any]]) -> list[str]:
    """Greedy answers of base, SFT and RL to the same held-out questions, reasoning on (the stage-1 and
    stage-2 evaluations' samples.json): the worked steps and the answer each model gives."""
    rows: dict[str, dict[str, str]] = {}
    for kind in ("nano3sftresults", "nano3rlresults"):
        for art in (a for a in artifacts if a["type"] == kind and a.get("samples_path")):
            for sample in json.loads(Path(art["samples_path"]).read_text(encoding="utf-8")):
                if sample.get("reasoning", "on") == "on":
                    rows.setdefault(sample["question"], {"answer": sample["answer"]})[sample["model"]] = \
                        sample["completion"]
    if not rows:
        return []
    lines = ["", "## What the models say", "",
             "Greedy answers to held-out questions (never trained on), reasoning on: the worked steps, `</think>`, "
             "then the answer.", "", "| question | right answer | base | SFT | RL |", "|---|---|---|---|---|"]
    for question, row in rows.items():
        lines.append(f"| {report_card.cell(question)} | {row['answer']} | " + " | ".join(
            report_card.cell(row.get(model, ""), width=140) for model in ("base", "sft", "rl")) + " |")
    return lines


BUDGETS = {"equal_tokens": ("dense", "same tokens"), "equal_time": ("dense_time", "same training time")}


def comparison(metrics: dict[str, Any]) -> list[str]:
    """The models side by side, then the answer per budget: the MoE model's held-out loss minus each dense
    counterpart's, per window, with its paired standard error (`metrics["moe_against_dense"]`)."""
    rows = [("held-out bits per byte", "bits_per_byte"), ("held-out loss (nats/token)", "validation_loss"),
            ("perplexity", "perplexity"), ("parameters", "parameters"), ("training steps", "steps"),
            ("training time (s)", "train_seconds")]
    models = [("moe", "MoE"), *((name, f"dense, {what}") for name, what in BUDGETS.values()
                                if f"{name}_steps" in metrics)]
    lines = ["| | " + " | ".join(label for _, label in models) + " | unigram |",
             "|---|" + "---|" * len(models) + "---|"]
    for label, key in rows:
        lines.append(f"| {label} | " + " | ".join(fmt(metrics.get(f"{name}_{key}", "")) for name, _ in models) +
                     f" | {fmt(metrics.get(f'unigram_{key}', ''))} |")
    lines.append("| active parameters per token | " + " | ".join(
        fmt(metrics.get("moe_active_parameters" if name == "moe" else f"{name}_parameters", "")) for name, _ in models)
        + " | |")
    against = metrics.get("moe_against_dense", {})
    if against:
        lines += ["", "Does the mixture of experts predict better at the same active parameters? The MoE model's "
                  "held-out loss minus the dense model's, window by window (the same windows), ± its paired "
                  "standard error; negative: the MoE predicts better.", ""]
    for budget, record in against.items():
        name, what = BUDGETS[budget]
        difference, error = -record["gain"], record["standard_error"]
        verdict = ("the MoE model predicts better" if difference < -2 * error else
                   "the dense model predicts better" if difference > 2 * error else "no clear difference")
        lines.append(f"- {what.capitalize()} (MoE {record['moe_steps']} steps in {fmt(record['moe_train_seconds'])} s, "
                     f"dense {record['dense_steps']} in {fmt(record['dense_train_seconds'])} s): "
                     f"{difference:+.4f} ± {error:.4f} nats/token over {record['n']} windows: {verdict}.")
    return lines


def exact_match(metrics: dict[str, Any], data: dict[str, Any]) -> list[str]:
    lines = []
    if "teacher_error_share" in data:
        lines += [f"The demonstrations came from an imperfect teacher: {fmt(data['teacher_error_share'])} of its "
                  "worked answers drop one carry (`--teacher-error-rate`); SFT learns them, mistakes included, and "
                  "RL's checker rewards the right sums.", ""]
    lines += ["| | base | SFT |", "|---|---|---|"]
    rows = [(f"exact match, reasoning {mode} (greedy)", f"exact_match_reasoning_{mode}") for mode in ("on", "off")]
    rows += [("chance of the right working, word for word", "p_right_working"),
             ("chance of a working with a dropped carry (the teacher's mistake)", "p_dropped_carry")]
    for label, key in rows:
        if f"sft_{key}" in metrics:  # the chances: evaluations since they were added
            cells = [f"{fmt(metrics[f'{m}_{key}'])} ± {fmt(metrics[f'{m}_{key}_stderr'])}" for m in ("base", "sft")]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(f"\n{metrics['num_problems']} held-out problems, greedy decoding; samples in "
                 "stage1_sft/evaluation/samples.json. The chances are exact (no sampling): greedy exact match jumps "
                 "when one column's likeliest digit flips, they move smoothly (the README's \"How long SFT trains\").")
    return lines


def rl_table(metrics: dict[str, Any]) -> list[str]:
    k, n = metrics.get("samples_per_problem", 1), metrics["num_problems"]
    lines = ["| | SFT | RL |", "|---|---|---|",
             f"| held-out reward ({k} samples per question) | {fmt(metrics['sft_reward'])} | "
             f"{fmt(metrics['rl_reward'])} |",
             f"| exact match (greedy) | {fmt(metrics['sft_exact_match'])} ± {fmt(metrics['sft_exact_match_stderr'])} | "
             f"{fmt(metrics['rl_exact_match'])} ± {fmt(metrics['rl_exact_match_stderr'])} |"]
    mistakes = [("drop a carry (the teacher's mistake)", "dropped_carry"),
                ("add a carry that is not there", "added_carry"), ("are wrong otherwise", "other")]
    for label, kind in mistakes:  # evaluations before the added carries were counted have the first only
        if f"sft_{kind}_share" in metrics:
            lines.append(f"| sampled answers that {label} | {fmt(metrics[f'sft_{kind}_share'])} | "
                         f"{fmt(metrics[f'rl_{kind}_share'])} |")
    verdict = "above" if metrics["gain_above_two_stderr"] else "not above"
    lines.append(f"\nHeld-out reward gain RL - SFT: {fmt(metrics['reward_gain'])} ± "
                 f"{fmt(metrics['reward_gain_stderr'])} "
                 f"(paired, {n} held-out problems): {verdict} two standard errors.")
    if "greedy_reward_gain" in metrics:
        lines.append(f"Greedy reward gain: {fmt(metrics['greedy_reward_gain'])} ± "
                     f"{fmt(metrics['greedy_reward_gain_stderr'])}.")
    return lines


def plot_reward(metrics_path: str | Path, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in read_metrics(metrics_path) if "reward" in r]
    if not records:
        return
    fig, ax = plt.subplots(figsize=(6, 3.4))
    steps = [r["step"] for r in records]
    ax.plot(steps, [r["reward"] for r in records], lw=1, label="mean reward of the sampled groups")
    ax.plot(steps, [r["correct"] for r in records], lw=1, label="share correct")
    ax.set_xlabel("GRPO step")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic.output_path(path) as temp:
        fig.savefig(temp, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)


def expert_balance(metrics_path: str | Path) -> list[str]:
    """Markdown: each MoE layer's balance at the last logged step, its busiest and idlest expert's share of
    the routed tokens against the even share, so a layer one expert dominates is named, not averaged away."""
    records = [r for r in read_metrics(metrics_path) if "expert_load" in r]
    if not records:
        return []
    last = records[-1]
    even = 1 / len(last["expert_load"][0])
    lines = [f"| MoE layer | busiest expert's share | idlest expert's share | busiest / even (step {last['step']}) |",
             "|---|---|---|---|"]
    lines += [f"| {layer + 1} | {fmt(max(shares))} | {fmt(min(shares))} | {max(shares) / even:.2f}x |"
              for layer, shares in enumerate(last["expert_load"])]
    return [*lines, "", f"An even split gives every expert {fmt(even)}."]


def plot_expert_load(metrics_path: str | Path, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in read_metrics(metrics_path) if "expert_load" in r]
    if not records:
        return
    steps = [r["step"] for r in records]
    layers = len(records[0]["expert_load"])
    fig, axes = plt.subplots(1, layers + 1, figsize=(4.5 * (layers + 1), 3.4), squeeze=False)
    for layer, ax in enumerate(axes[0][:layers]):
        shares = list(zip(*(r["expert_load"][layer] for r in records)))  # per expert, over the steps
        ax.stackplot(steps, *shares, lw=0.3)
        ax.set_title(f"MoE layer {layer + 1}: share per expert")
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
    ax = axes[0][layers]
    for layer in range(layers):
        ax.plot(steps, [max(r["expert_load"][layer]) for r in records], lw=1, label=f"MoE layer {layer + 1}")
    ax.axhline(1 / len(records[0]["expert_load"][0]), color="gray", ls="--", lw=0.8, label="even share")
    ax.set_title("busiest expert's share, per MoE layer")
    ax.set_xlabel("step")
    ax.legend()
    fig.tight_layout()
    with atomic.output_path(path) as temp:
        fig.savefig(temp, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str]) -> int:
    return report_main(argv, write_report, "python -m nemotron.recipes.nano3.report FOLDER")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
