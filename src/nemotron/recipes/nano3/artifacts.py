"""Every artifact the nano3 recipe makes (stage 0 reuses nano2's `PretrainDataset`: same data path).

    stage 0  nano2 data_curation -> PretrainDataset
             training (MoE) -> Nano3PretrainCheckpoint     training --dense -> Nano3PretrainCheckpoint
             evaluation -> Nano3PretrainResults (MoE, dense and unigram bits per byte side by side)

A checkpoint records whether it holds the MoE model or its dense counterpart (`dense`), the model's
total and active parameter counts, so the evaluation can say what it compares. This module imports
neither torch nor transformers.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from nemotron.artifact import Artifact
from nemotron.recipes.nano2.artifacts import PretrainDataset  # noqa: F401 (stage 0's input, re-exported)
from nemotron.training.artifacts import ModelCheckpoint


class Nano3PretrainCheckpoint(ModelCheckpoint):
    """A pretrained nano3 model (MoE) or its dense counterpart; training_loss is nats per token."""
    made_by: ClassVar[str] = "nemotron.recipes.nano3.stage0_pretrain.training"
    dense: bool  # True: the dense counterpart (every MoE layer an MLP of the same active width)
    parameters: int = Field(gt=0)
    active_parameters: int = Field(gt=0)  # parameters used per token (all of them for a dense model)


class Nano3PretrainResults(Artifact):
    made_by: ClassVar[str] = "nemotron.recipes.nano3.stage0_pretrain.evaluation"
    moe_bits_per_byte: float
    dense_bits_per_byte: float
    unigram_bits_per_byte: float
    moe_validation_loss: float
    dense_validation_loss: float
    moe_train_seconds: float  # the training loops' wall time: "same CPU time" is checked, not assumed
    dense_train_seconds: float
    num_tokens: int = Field(gt=0)
