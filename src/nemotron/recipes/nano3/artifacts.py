"""Every artifact the nano3 recipe makes (stage 0 reuses nano2's `PretrainDataset`: same data path).

    stage 0  data_curation (the curation library, nemotron.data_prep.curation; nano3's stage lists) -> PretrainDataset
             training (MoE) -> Nano3PretrainCheckpoint     training --dense -> Nano3PretrainCheckpoint
             evaluation -> Nano3PretrainResults (MoE, dense and unigram bits per byte side by side)
    stage 1  data_curation -> Nano3SFTDataset -> training -> Nano3SFTCheckpoint -> evaluation
    stage 2  data_curation -> Nano3RLDataset -> training (GRPO) -> Nano3RLCheckpoint -> evaluation -> Nano3RLResults

At scale (`--scale full` or `--engine megatron-bridge`) the training steps save the shared
`nemotron.training.artifacts.MegatronBridgeRun` instead of a checkpoint: stage-0 data_curation ->
PretrainDataset -> training -> MegatronBridgeRun; stage-1 data_curation (from the PretrainDataset's
tokenizer) -> Nano3SFTDataset -> training (from the stage-0 run's checkpoint location) -> MegatronBridgeRun.

A checkpoint records whether it holds the MoE model or its dense counterpart (`dense`), the model's
total and active parameter counts, so the evaluation can say what it compares. This module imports
neither torch nor transformers.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from nemotron.artifact import Artifact, ArtifactPath
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
    # The training loops' wall times ("same CPU time" is checked, not assumed) are metrics
    # (`moe_train_seconds`, `dense_train_seconds`): wall times stay out of the digest.
    num_tokens: int = Field(gt=0)


# --------------------------------------------------------------------------------------------------
# stage 1: supervised fine-tuning with reasoning traces
# --------------------------------------------------------------------------------------------------


class Nano3SFTDataset(Artifact):
    """Packed nano3-format conversations: worked addition problems (reasoning on, or stripped for a share
    of them: the on/off switch) and nano2's chat data; plus the problems, train and held out, as JSONL."""
    made_by: ClassVar[str] = "nemotron.recipes.nano3.stage1_sft.data_curation"
    tokenizer_dir: ArtifactPath
    train_packed: ArtifactPath
    valid_packed: ArtifactPath
    train_problems: ArtifactPath  # {"question", "answer"} per line: RL prompts come from here
    test_problems: ArtifactPath  # held out: never trained on, by question
    pack_size: int = Field(gt=1)
    num_train_conversations: int = Field(gt=0)
    num_test_problems: int = Field(gt=0)
    train_reasoning: bool  # were reasoning tokens targets of the loss
    vocab_size: int | None = Field(default=None, gt=0)  # the tokenizer's; None in datasets curated before it was kept


class Nano3SFTCheckpoint(ModelCheckpoint):
    """The fine-tuned MoE model; training_loss is per trained token."""
    made_by: ClassVar[str] = "nemotron.recipes.nano3.stage1_sft.training"


class Nano3SFTResults(Artifact):
    """Exact match on held-out problems, base vs SFT, with reasoning on and off."""
    made_by: ClassVar[str] = "nemotron.recipes.nano3.stage1_sft.evaluation"
    samples_path: ArtifactPath  # samples.json: question, answer, completion per model and mode
    base_exact_match_reasoning_on: float
    base_exact_match_reasoning_off: float
    sft_exact_match_reasoning_on: float
    sft_exact_match_reasoning_off: float
    num_problems: int = Field(gt=0)


# --------------------------------------------------------------------------------------------------
# stage 2: reinforcement learning from verifiable rewards (GRPO)
# --------------------------------------------------------------------------------------------------


class Nano3RLDataset(Artifact):
    """GRPO's prompts (the SFT dataset's training problems, passed through the stage list) and the checker's
    specification: what RL samples from and how each completion is rewarded."""
    made_by: ClassVar[str] = "nemotron.recipes.nano3.stage2_rl.data_curation"
    prompt_files: list[ArtifactPath]  # JSONL, {"question", "answer", ...} per line, in training order
    checker: ArtifactPath  # checker.json: the reward function and what it rewards
    num_prompts: int = Field(gt=0)


class Nano3RLCheckpoint(ModelCheckpoint):
    """The policy after GRPO; training_loss is the GRPO loss (it hovers near 0: advantages average 0)."""
    made_by: ClassVar[str] = "nemotron.recipes.nano3.stage2_rl.training"


class Nano3RLResults(Artifact):
    """Held-out reward (sampled, the policy's expected reward) and greedy exact match (reasoning on), SFT vs RL,
    with standard errors."""
    made_by: ClassVar[str] = "nemotron.recipes.nano3.stage2_rl.evaluation"
    samples_path: ArtifactPath
    sft_reward: float
    rl_reward: float
    sft_exact_match: float
    rl_exact_match: float
    num_problems: int = Field(gt=0)
