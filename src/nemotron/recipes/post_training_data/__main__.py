"""The post-training data pipeline end to end: normalize -> pools -> score -> embed_select.

    python -m nemotron.recipes.post_training_data --scale tiny

runs on the demo input shipped with the package (five dataset families in the real field layouts,
awkward records included) and is the same as the pipe

    python -m nemotron.recipes.post_training_data.normalize --scale tiny \\
      | python -m nemotron.recipes.post_training_data.pools \\
      | python -m nemotron.recipes.post_training_data.score \\
      | python -m nemotron.recipes.post_training_data.embed_select

Each step's knobs live under `--normalize.*`, `--pools.*`, `--score.*` and `--embed-select.*` (e.g.
`--normalize.sources math=medium.jsonl`, `--score.reference-model DIR`). Steps whose output is already
there (same config, same inputs, files intact) are skipped; `--force` re-runs them. The last artifact's
lineage leads back to the raw files: `python -m nemotron.artifact lineage runs/post_training_data/embed_select`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from nemotron.artifact.fields import execution
from nemotron.cli import run
from nemotron.recipes.orchestration import refuse_overridden_flags, run_step
from nemotron.recipes.post_training_data import embed_select, normalize, pools, score
from nemotron.recipes.post_training_data.artifacts import (
    CandidatePools,
    DiverseSelection,
    PostTrainingDataset,
    ScoredSelection,
)


@dataclass
class Config:
    """Post-training data: normalize -> pools -> score -> embedding selection."""

    output_dir: Path = Path("runs/post_training_data")
    """Each step writes into a folder of its own name under this one."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the record caps and the selection targets."""
    seed: int = 0
    """Seeds every random choice of the run: same config and seed, same bytes."""
    force: bool = execution(False)
    """Re-run steps even when their output is up to date."""
    normalize: normalize.Config = field(default_factory=normalize.Config)
    """Settings of the normalize step (`normalize.py --help` lists them)."""
    pools: pools.Config = field(default_factory=pools.Config)
    """Settings of the pools step."""
    score: score.Config = field(default_factory=score.Config)
    """Settings of the completion-NLL scoring step."""
    embed_select: embed_select.Config = field(default_factory=embed_select.Config)
    """Settings of the embedding-based selection step."""


def main(config: Config) -> dict:
    refuse_overridden_flags(config)  # a nested flag the orchestrator would overwrite is one error line
    shared = dict(scale=config.scale, seed=config.seed)
    out = config.output_dir

    dataset = run_step(normalize.main, replace(config.normalize, output_dir=out / "normalize", **shared),
                       PostTrainingDataset, force=config.force)
    candidates = run_step(pools.main,
                          replace(config.pools, dataset_path=dataset.path, output_dir=out / "pools", **shared),
                          CandidatePools, inputs=[dataset], force=config.force)
    scored = run_step(score.main, replace(config.score, pools_path=candidates.path, output_dir=out / "score", **shared),
                      ScoredSelection, inputs=[candidates], force=config.force)
    selected = run_step(embed_select.main,
                        replace(config.embed_select, scored_path=scored.path, output_dir=out / "embed_select",
                                **shared),
                        DiverseSelection, inputs=[scored], force=config.force)
    return {a.type: a for a in (dataset, candidates, scored, selected)}


if __name__ == "__main__":
    run(main)
