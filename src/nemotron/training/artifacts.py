"""The artifact every training step saves: a trained model folder and how it got there.

`ModelCheckpoint` is the base class of a recipe's checkpoint artifacts (nano2's PretrainCheckpoint,
SFTCheckpoint, DPOCheckpoint): what `TrainingRun.finish` fills in. It imports neither torch nor
transformers, so a data-curation step can load the checkpoint it starts from without the model stack.
"""

from __future__ import annotations

from pydantic import Field

from nemotron.artifact import Artifact, ArtifactPath


class ModelCheckpoint(Artifact):
    model_dir: ArtifactPath  # final Hugging Face folder: weights + config + tokenizer (with chat template)
    metrics_path: ArtifactPath  # metrics.jsonl: step, loss, lr, grad_norm, val_loss, ... (no wall-clock values)
    training_loss: float  # final smoothed training loss
    validation_loss: float | None  # the last validation loss, if the run measured one
    steps: int = Field(gt=0)
