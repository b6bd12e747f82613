"""The nano3 recipe: raw text -> a pretrained hybrid Mamba-Transformer mixture of experts, next to a dense
model of the same active size.

    python -m nemotron.recipes.nano3 --scale tiny

  stage0_pretrain   data_curation -> training (MoE) -> training --dense (same tokens, same time) -> evaluation
  stage1_sft        worked problems + chat data -> SFT of the MoE model -> exact match, reasoning on / off
  stage2_rl         RL prompts + checker spec -> GRPO from the SFT model on the checkable task -> held-out
                    reward, SFT vs RL
  evaluation        benchmarks: the standard benchmarks of the final (RL) model, each with a control
                    (`python -m nemotron.evaluation`, 10 items per task at tiny)

With `--post-training-data`, a stage before stage 1 runs the post-training data pipeline on its shipped demo
records (normalize -> pools -> completion-NLL score -> embedding selection, `nemotron.recipes.post_training_data`)
and stage-1 curation adds the selected records to its SFT data, in the nano3 template with their reasoning, tool
calls and loss modes. It is off by default because it would add to the tiny recipe's steps, already past 330 s: the NLL
scoring runs a 135M-parameter reference model over every candidate (README, "The post-training selection").

The report card goes to `<output-dir>/report/report.md` (report.py): bits per byte of the MoE model,
the dense model and a unigram baseline, loss curves and the expert load over training. Re-running skips
what is up to date; an interrupted training step resumes from its last checkpoint. Every knob of every
step is a flag (`--stage0.training.steps 100`, `--stage2.training.group-size 4`; see --help).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import nemotron.recipes.nano3.stage0_pretrain.__main__ as stage0
import nemotron.recipes.nano3.stage1_sft.__main__ as stage1
import nemotron.recipes.nano3.stage2_rl.__main__ as stage2
import nemotron.recipes.post_training_data.__main__ as post_training
from nemotron.cli import run
from nemotron.errors import NemotronError
from nemotron.evaluation.settings import BenchmarkSettings
from nemotron.recipes.nano3.report import write_report
from nemotron.recipes.orchestration import SUMMARY, RecipeSettings, benchmark_final_model, refuse_overridden_flags


@dataclass
class Config(RecipeSettings):
    """The nano3 recipe."""

    output_dir: Path = Path("runs/nano3")
    """Each stage writes into a folder of its own name under this one."""
    post_training_data: bool = False
    """Run the post-training data pipeline on its demo records and train stage-1 SFT on its selection too
    (off by default: its NLL scoring alone is past the tiny recipe's time budget)."""
    post_training: post_training.Config = field(default_factory=post_training.Config)
    """Settings of the post-training data pipeline's steps (see its `__main__ --help`)."""
    stage0: stage0.Config = field(default_factory=stage0.Config)
    """Settings of stage 0's steps (see its `__main__ --help`)."""
    stage1: stage1.Config = field(default_factory=stage1.Config)
    """Settings of stage 1's steps (see its `__main__ --help`)."""
    stage2: stage2.Config = field(default_factory=stage2.Config)
    """Settings of stage 2's steps (see its `__main__ --help`)."""
    benchmarks: BenchmarkSettings = field(default_factory=BenchmarkSettings)
    """Settings of the standard benchmarks of the final (RL) model (`python -m nemotron.evaluation --help`):
    `--benchmarks.limit 100`, `--benchmarks.benchmarks mmlu,piqa`."""


def main(config: Config) -> dict:
    refuse_overridden_flags(config)
    if config.post_training_data and config.stage1.data_curation.selected_path is not None:
        raise NemotronError("--post-training-data makes the selection that --stage1.data-curation.selected-path "
                            "would give: pass one of them")
    if config.scale == "full":
        raise NemotronError("--scale full is the published 31.6B Nemotron 3 Nano: no CPU trains it and this pipeline "
                            "does not chain the Megatron-Bridge hand-offs; run the steps one by one (stage-0 and "
                            "stage-1 training write run folders, README 'Going bigger'), "
                            "or use --scale tiny|small|medium")
    shared = dict(scale=config.scale, seed=config.seed, force=config.force)
    pretrain = stage0.main(replace(config.stage0, output_dir=config.output_dir / "stage0_pretrain", **shared))
    stage1_config = config.stage1
    if config.post_training_data:
        made = post_training.main(replace(config.post_training, output_dir=config.output_dir / "post_training_data",
                                          **shared))
        stage1_config = replace(stage1_config, data_curation=replace(
            stage1_config.data_curation, selected_path=made["diverseselection"].path))
    sft = stage1.main(replace(stage1_config, checkpoint_path=pretrain["nano3pretraincheckpoint"].path,
                              output_dir=config.output_dir / "stage1_sft", **shared))
    rl = stage2.main(replace(config.stage2, checkpoint_path=sft["nano3sftcheckpoint"].path,
                             output_dir=config.output_dir / "stage2_rl", **shared))
    scored = benchmark_final_model(config.benchmarks, rl["nano3rlcheckpoint"], config.output_dir, **shared)
    SUMMARY["report"] = write_report(config.output_dir)
    return {**pretrain, **sft, **rl, scored.type: scored}


if __name__ == "__main__":
    run(main)
