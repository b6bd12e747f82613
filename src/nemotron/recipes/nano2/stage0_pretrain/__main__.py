"""nano2 stage 0, end to end: raw text -> curated shards -> pretrained model -> held-out numbers.

    python -m nemotron.recipes.nano2.stage0_pretrain --scale tiny

is the same as the three-step pipe

    python -m nemotron.recipes.nano2.stage0_pretrain.data_curation --scale tiny \\
      | python -m nemotron.recipes.nano2.stage0_pretrain.training --scale tiny \\
      | python -m nemotron.recipes.nano2.stage0_pretrain.evaluation

with each step's knobs under `--data-curation.*`, `--training.*` and `--evaluation.*`. Steps whose
output is already there (same config, same inputs, files intact) are skipped; `--force` re-runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from nemotron.cli import run
from nemotron.recipes.nano2.stage0_pretrain import data_curation, evaluation, training
from nemotron.recipes.orchestration import RecipeSettings, refuse_overridden_flags, run_step


@dataclass
class Config(RecipeSettings):
    """Stage 0: pretraining from raw text."""

    output_dir: Path = Path("runs/nano2/stage0_pretrain")
    """Each step writes into a folder of its own name under this one."""
    data_curation: data_curation.Config = field(default_factory=data_curation.Config)
    """Settings of the data curation step (`data_curation.py --help` lists them)."""
    training: training.Config = field(default_factory=training.Config)
    """Settings of the training step (`training.py --help` lists them)."""
    evaluation: evaluation.Config = field(default_factory=evaluation.Config)
    """Settings of the evaluation step (`evaluation.py --help` lists them)."""


def main(config: Config) -> dict:
    refuse_overridden_flags(config)  # a nested flag the orchestrator would overwrite is one error line
    shared = dict(scale=config.scale, seed=config.seed)
    out = config.output_dir

    dataset = run_step(
        data_curation.main,
        replace(config.data_curation, output_dir=out / "data_curation", **shared),
        data_curation.PretrainDataset,
        force=config.force,
    )
    checkpoint = run_step(
        training.main,
        replace(config.training, dataset_path=dataset.path, output_dir=out / "training", **shared),
        training.PretrainCheckpoint,
        inputs=[dataset],
        force=config.force,
    )
    results = run_step(
        evaluation.main,
        replace(
            config.evaluation,
            checkpoint_path=checkpoint.path,
            dataset_path=dataset.path,
            output_dir=out / "evaluation",
            **shared,
        ),
        evaluation.PretrainResults,
        inputs=[checkpoint],
        force=config.force,
    )
    return {a.type: a for a in (dataset, checkpoint, results)}


if __name__ == "__main__":
    run(main)
