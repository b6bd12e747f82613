"""nano3 stage 1, end to end: worked problems + chat data -> SFT of the MoE model -> exact match, on and off.

    python -m nemotron.recipes.nano3.stage1_sft --checkpoint-path runs/nano3/stage0_pretrain/training

  data_curation   addition problems with worked steps (10% without), chat data, nano3 template, packed
  training        SFT with the load-balancing loss still on
  evaluation      held-out exact match, base vs SFT, reasoning on and off
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from nemotron.cli import run
from nemotron.errors import NemotronError
from nemotron.recipes.nano3.artifacts import Nano3PretrainCheckpoint
from nemotron.recipes.nano3.stage1_sft import data_curation, evaluation, training
from nemotron.recipes.orchestration import RecipeSettings, refuse_overridden_flags, run_step


@dataclass
class Config(RecipeSettings):
    """nano3 stage 1: supervised fine-tuning with reasoning traces."""

    output_dir: Path = Path("runs/nano3/stage1_sft")
    """Each step writes into a folder of its own name under this one."""
    checkpoint_path: Path | None = None
    """The stage-0 MoE Nano3PretrainCheckpoint; default: read it from stdin (a stage-0 pipe)."""
    data_curation: data_curation.Config = field(default_factory=data_curation.Config)
    """Settings of the data curation step (`data_curation.py --help`)."""
    training: training.Config = field(default_factory=training.Config)
    """Settings of the training step (`training.py --help`)."""
    evaluation: evaluation.Config = field(default_factory=evaluation.Config)
    """Settings of the evaluation step (`evaluation.py --help`)."""


def main(config: Config) -> dict:
    refuse_overridden_flags(config)
    shared = dict(scale=config.scale, seed=config.seed)
    out = config.output_dir
    base = Nano3PretrainCheckpoint.load(path=config.checkpoint_path, scale=config.scale, flag="--checkpoint-path")
    if base.dense:
        raise NemotronError(f"{base.path} is the dense counterpart; pass the MoE checkpoint (stage-0 training/)")
    dataset = run_step(data_curation.main, replace(config.data_curation, checkpoint_path=base.path,
                                                   output_dir=out / "data_curation", **shared),
                       data_curation.Nano3SFTDataset, inputs=[base], force=config.force)
    sft = run_step(training.main, replace(config.training, dataset_path=dataset.path, checkpoint_path=base.path,
                                          output_dir=out / "training", **shared),
                   training.Nano3SFTCheckpoint, inputs=[dataset, base], force=config.force)
    results = run_step(evaluation.main, replace(config.evaluation, checkpoint_path=sft.path,
                                                output_dir=out / "evaluation", **shared),
                       evaluation.Nano3SFTResults, inputs=[sft], force=config.force)
    return {a.type: a for a in (dataset, sft, results)}


if __name__ == "__main__":
    run(main)
