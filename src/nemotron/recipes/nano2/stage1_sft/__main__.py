"""nano2 stage 1, end to end: chat data -> supervised fine-tuning -> base vs SFT on held-out chats.

    python -m nemotron.recipes.nano2.stage1_sft --scale tiny --checkpoint-path runs/nano2/stage0_pretrain/training

or, in a pipe after stage 0 (its artifacts arrive on stdin):

    python -m nemotron.recipes.nano2.stage0_pretrain | python -m nemotron.recipes.nano2.stage1_sft

Each step's knobs live under `--data-curation.*`, `--training.*` and `--evaluation.*`. Steps whose
output is already there (same config, same inputs, files intact) are skipped; `--force` re-runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from nemotron.artifact.fields import execution
from nemotron.cli import run
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint
from nemotron.recipes.nano2.stage1_sft import data_curation, evaluation, training
from nemotron.recipes.orchestration import refuse_overridden_flags, run_step


@dataclass
class Config:
    """Stage 1: supervised fine-tuning on packed conversations."""

    checkpoint_path: Path | None = None
    """The stage-0 PretrainCheckpoint folder; default: from stdin."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference, e.g. pretraincheckpoint:latest."""
    output_dir: Path = Path("runs/nano2/stage1_sft")
    """Root folder: each step writes into its own subfolder (data_curation/, training/, evaluation/)."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the data, the model and the steps (tiny runs on a laptop CPU)."""
    seed: int = 0
    """Seeds every random choice of the run: same config and seed, same bytes."""
    force: bool = execution(False)
    """Re-run steps even when their output is up to date."""
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
    base = PretrainCheckpoint.load(
        path=config.checkpoint_path, tracked_artifact=config.checkpoint_artifact, scale=config.scale
    )

    dataset = run_step(
        data_curation.main,
        replace(config.data_curation, checkpoint_path=base.path, output_dir=out / "data_curation", **shared),
        data_curation.SFTDataset,
        inputs=[base],
        force=config.force,
    )
    checkpoint = run_step(
        training.main,
        replace(
            config.training,
            dataset_path=dataset.path,
            checkpoint_path=base.path,
            output_dir=out / "training",
            **shared,
        ),
        training.SFTCheckpoint,
        inputs=[dataset, base],
        force=config.force,
    )
    results = run_step(
        evaluation.main,
        replace(
            config.evaluation,
            checkpoint_path=checkpoint.path,
            dataset_path=dataset.path,
            base_checkpoint_path=base.path,
            output_dir=out / "evaluation",
            **shared,
        ),
        evaluation.SFTResults,
        inputs=[checkpoint],
        force=config.force,
    )
    return {a.type: a for a in (dataset, checkpoint, results)}


if __name__ == "__main__":
    run(main)
