"""nano3 stage 2, end to end: GRPO from the SFT model, then SFT vs RL on held-out problems.

    python -m nemotron.recipes.nano3.stage2_rl --checkpoint-path runs/nano3/stage1_sft/training

  data_curation  the RL prompts (the SFT dataset's training problems, through a stage list) and the
                 checker's specification -> Nano3RLDataset
  training     GRPO: sample a group per question, reward by the checker, group-normalised advantages,
               clipped surrogate (+ KL to the SFT model with --training.kl-beta)
  evaluation   held-out reward and exact match, SFT vs RL, the gain against its standard error
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from nemotron.cli import run
from nemotron.recipes.nano3.artifacts import Nano3SFTCheckpoint
from nemotron.recipes.nano3.stage2_rl import data_curation, evaluation, training
from nemotron.recipes.orchestration import RecipeSettings, refuse_overridden_flags, run_step


@dataclass
class Config(RecipeSettings):
    """nano3 stage 2: reinforcement learning from verifiable rewards."""

    output_dir: Path = Path("runs/nano3/stage2_rl")
    """Each step writes into a folder of its own name under this one."""
    checkpoint_path: Path | None = None
    """The Nano3SFTCheckpoint to start from; default: read it from stdin (a stage-1 pipe)."""
    data_curation: data_curation.Config = field(default_factory=data_curation.Config)
    """Settings of the data curation step (`data_curation.py --help`)."""
    training: training.Config = field(default_factory=training.Config)
    """Settings of the GRPO training step (`training.py --help`)."""
    evaluation: evaluation.Config = field(default_factory=evaluation.Config)
    """Settings of the evaluation step (`evaluation.py --help`)."""


def main(config: Config) -> dict:
    refuse_overridden_flags(config)
    shared = dict(scale=config.scale, seed=config.seed)
    out = config.output_dir
    sft = Nano3SFTCheckpoint.load(path=config.checkpoint_path, scale=config.scale, flag="--checkpoint-path")
    prompts = run_step(data_curation.main, replace(config.data_curation, checkpoint_path=sft.path,
                                                   output_dir=out / "data_curation", **shared),
                       data_curation.Nano3RLDataset, inputs=[sft], force=config.force)
    policy = run_step(training.main, replace(config.training, checkpoint_path=sft.path, dataset_path=prompts.path,
                                             output_dir=out / "training", **shared),
                      training.Nano3RLCheckpoint, inputs=[sft, prompts], force=config.force)
    results = run_step(evaluation.main, replace(config.evaluation, checkpoint_path=policy.path,
                                                output_dir=out / "evaluation", **shared),
                       evaluation.Nano3RLResults, inputs=[policy], force=config.force)
    return {a.type: a for a in (prompts, policy, results)}


if __name__ == "__main__":
    run(main)
