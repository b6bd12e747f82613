"""nano2 stage 2, end to end: judged pairs of the SFT model's answers -> DPO -> SFT vs DPO on held-out problems.

    python -m nemotron.recipes.nano2.stage2_alignment --scale tiny \\
        --checkpoint-path runs/nano2/stage1_sft/training --dataset-path runs/nano2/stage1_sft/data_curation

or, in a pipe after stage 1 (its artifacts arrive on stdin):

    python -m nemotron.recipes.nano2.stage1_sft ... | python -m nemotron.recipes.nano2.stage2_alignment

Each step's knobs live under `--data-curation.*`, `--training.*` and `--evaluation.*`. Steps whose
output is already there (same config, same inputs, files intact) are skipped; `--force` re-runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from nemotron.artifact.fields import execution
from nemotron.cli import run
from nemotron.recipes.nano2.artifacts import SFTCheckpoint, SFTDataset
from nemotron.recipes.nano2.stage2_alignment import data_curation, evaluation, training
from nemotron.recipes.orchestration import refuse_overridden_flags, run_step


@dataclass
class Config:
    """Stage 2: preference alignment with DPO."""

    checkpoint_path: Path | None = None
    """The stage-1 SFTCheckpoint folder; default: from stdin."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference (`TYPE:latest` or `TYPE:vN`, resolved by the active tracker) instead of the path."""
    dataset_path: Path | None = None
    """The stage-1 SFTDataset folder (its skill problems are what the SFT model answers); default: stdin."""
    dataset_artifact: str | None = None
    """Or a tracked reference (`TYPE:latest` or `TYPE:vN`, resolved by the active tracker) instead of the path."""
    output_dir: Path = Path("runs/nano2/stage2_alignment")
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
    sft = SFTCheckpoint.load(
        path=config.checkpoint_path, tracked_artifact=config.checkpoint_artifact, scale=config.scale
    )
    sft_data = SFTDataset.load(
        path=config.dataset_path, tracked_artifact=config.dataset_artifact, scale=config.scale
    )

    pairs = run_step(
        data_curation.main,
        replace(config.data_curation, checkpoint_path=sft.path, dataset_path=sft_data.path,
                output_dir=out / "data_curation", **shared),
        data_curation.PreferenceDataset,
        inputs=[sft, sft_data],
        force=config.force,
    )
    checkpoint = run_step(
        training.main,
        replace(
            config.training,
            dataset_path=pairs.path,
            checkpoint_path=sft.path,
            output_dir=out / "training",
            **shared,
        ),
        training.DPOCheckpoint,
        inputs=[pairs, sft],
        force=config.force,
    )
    results = run_step(
        evaluation.main,
        replace(
            config.evaluation,
            checkpoint_path=checkpoint.path,
            dataset_path=pairs.path,
            sft_checkpoint_path=sft.path,
            sft_dataset_path=sft_data.path,
            output_dir=out / "evaluation",
            **shared,
        ),
        evaluation.DPOResults,
        inputs=[checkpoint],
        force=config.force,
    )
    return {a.type: a for a in (pairs, checkpoint, results)}


if __name__ == "__main__":
    run(main)
