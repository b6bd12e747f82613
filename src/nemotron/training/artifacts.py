"""The artifacts a training step saves: a trained model folder, or a run handed to Megatron-Bridge.

`ModelCheckpoint` is the base class of a recipe's checkpoint artifacts (nano2's PretrainCheckpoint,
SFTCheckpoint, DPOCheckpoint): what `TrainingRun.finish` fills in. `MegatronBridgeRun` is what a
training step saves instead at `--scale full` / `--engine megatron-bridge`: the run folder of
`nemotron.training.megatron_bridge` (plan.json, overrides.yaml, torchrun.sh, sbatch.sh) and where the
Megatron checkpoints will be. This module imports neither torch nor transformers, so a data-curation
step can load the checkpoint it starts from without the model stack.
"""

from __future__ import annotations

from pydantic import Field

from nemotron.artifact import Artifact, ArtifactPath


class ModelCheckpoint(Artifact):
    model_dir: ArtifactPath  # final Hugging Face folder: weights + config + tokenizer (with chat template)
    metrics_path: ArtifactPath  # metrics.jsonl: step, loss, lr, grad_norm, val_loss, ... (no wall-clock values)
    # watch.jsonl: what the steps did (samples, probe pairs, per-token losses: nemotron.training.watch);
    # None in artifacts saved before it was kept
    watch_path: ArtifactPath | None = None
    training_loss: float  # final smoothed training loss
    validation_loss: float | None  # the last validation loss, if the run measured one
    steps: int = Field(gt=0)


class MegatronBridgeRun(Artifact):
    run_dir: ArtifactPath  # plan.json, overrides.yaml, torchrun.sh, sbatch.sh
    recipe: str  # module.function of the Megatron-Bridge recipe the run starts
    checkpoint_location: str  # where its Megatron checkpoints go (the next stage starts from here)
    launched: bool  # False for a --dry-run: written and printed, nothing started

