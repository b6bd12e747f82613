"""Every artifact the nano2 recipe makes, in the order the steps make them.

A step's output is one of these classes, saved as `<output_dir>/metadata.json`; the next step loads
it by type (`PretrainDataset.load(path=..., scale=...)`, or from the pipe). Fields typed
`ArtifactPath` are files or folders that must exist; they are checked and hashed into the digest.
The common fields of every artifact (config, scale, seed, inputs, producer, metrics, digest) come from
`nemotron.artifact.Artifact`; `made_by` names the step that makes each one (errors about a missing
input say which step to run); the three checkpoints share `nemotron.training.artifacts.ModelCheckpoint`
(model_dir, metrics_path, training_loss, validation_loss, steps).

    stage 0  data_curation -> PretrainDataset    training -> PretrainCheckpoint    evaluation -> PretrainResults
    stage 1  data_curation -> SFTDataset         training -> SFTCheckpoint         evaluation -> SFTResults
    stage 2  data_curation -> PreferenceDataset  training -> DPOCheckpoint         evaluation -> DPOResults

This module imports neither torch nor transformers: any step can import it cheaply.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from nemotron.artifact import Artifact, ArtifactPath, ArtifactPrefix
from nemotron.data_prep.indexed import bin_path, idx_path
from nemotron.training.artifacts import ModelCheckpoint


class EvaluationResults(Artifact):
    """What every evaluation step records besides its numbers: which harness ran, on which benchmarks."""
    harness: str = "ours"  # "ours", or "lm_eval": lm-evaluation-harness ran as well
    benchmarks: list[str] = Field(default_factory=list)  # the lm-eval tasks run: our held-out sets, then --benchmarks
    lm_eval_results: ArtifactPath | None = None  # lm_eval_results.json: lm-eval's numbers and per-request scores


# --------------------------------------------------------------------------------------------------
# stage 0: pretraining
# --------------------------------------------------------------------------------------------------


class PretrainDataset(Artifact):
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage0_pretrain.data_curation"
    tokenizer_dir: ArtifactPath  # HF tokenizer folder with SPECIAL_TOKENS and NANO2_CHAT_TEMPLATE
    train_prefixes: list[ArtifactPrefix]  # bin/idx prefixes (files() adds each one's .bin and .idx)
    valid_prefixes: list[ArtifactPrefix]
    test_prefixes: list[ArtifactPrefix] = Field(default_factory=list)  # empty when the blend has no test split
    num_documents: int = Field(gt=0)
    num_train_tokens: int = Field(gt=0)
    num_valid_tokens: int = Field(gt=0)
    vocab_size: int = Field(gt=0)

    def files(self) -> list[Path]:
        prefixes = [*self.train_prefixes, *self.valid_prefixes, *self.test_prefixes]
        return [*super().files(), *(f for p in prefixes for f in (bin_path(p), idx_path(p)))]


class PretrainCheckpoint(ModelCheckpoint):
    """The pretrained base model; training_loss is nats per token."""
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage0_pretrain.training"


class PretrainResults(EvaluationResults):
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage0_pretrain.evaluation"
    samples_path: ArtifactPath  # samples.json: [{"prompt", "completion"}]
    validation_loss: float  # mean next-token NLL, nats, on `config.split`
    perplexity: float
    bits_per_byte: float
    unigram_loss: float
    unigram_bits_per_byte: float
    num_tokens: int = Field(gt=0)  # targets scored


# --------------------------------------------------------------------------------------------------
# stage 1: supervised fine-tuning
# --------------------------------------------------------------------------------------------------


class SFTDataset(Artifact):
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage1_sft.data_curation"
    tokenizer_dir: ArtifactPath
    train_packed: ArtifactPath
    valid_packed: ArtifactPath
    train_conversations: ArtifactPath
    valid_conversations: ArtifactPath
    test_conversations: ArtifactPath
    train_problems: ArtifactPath  # the skill's training problems with their true answers (verifiable.Largest)
    test_problems: ArtifactPath  # its held-out problems, never trained on (stage-1 and stage-2 evaluation)
    pack_size: int = Field(gt=1)
    num_train_conversations: int = Field(gt=0)
    num_valid_conversations: int = Field(gt=0)
    num_test_conversations: int = Field(gt=0)
    num_train_rows: int = Field(gt=0)
    vocab_size: int = Field(gt=0)


class SFTCheckpoint(ModelCheckpoint):
    """The chat model; training_loss is per assistant token."""
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage1_sft.training"


class SFTResults(EvaluationResults):
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage1_sft.evaluation"
    samples_path: ArtifactPath  # samples.json: [{"prompt", "completion" (SFT), "base_completion"}]
    base_completion_nll: float
    sft_completion_nll: float
    base_answer_accuracy: float
    sft_answer_accuracy: float
    base_answer_accuracy_mutual_info: float  # the headline answer metric, see stage-1 evaluation
    sft_answer_accuracy_mutual_info: float
    num_conversations: int = Field(gt=0)
    num_completion_tokens: int = Field(gt=0)


# --------------------------------------------------------------------------------------------------
# stage 2: preference alignment
# --------------------------------------------------------------------------------------------------


class PreferenceDataset(Artifact):
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage2_alignment.data_curation"
    tokenizer_dir: ArtifactPath
    train_pairs: ArtifactPath  # preference JSONL (prompt messages, chosen, rejected, rejected_kind, ...)
    valid_pairs: ArtifactPath  # the seeded held-out slice of the training pairs (DPO validation)
    test_pairs: ArtifactPath  # pairs from the stage-1 test conversations (stage-2 evaluation)
    train_tokens: ArtifactPath  # the train pairs tokenized: {"id", "prompt_ids", "chosen_ids", "rejected_ids"}
    valid_tokens: ArtifactPath
    max_length: int = Field(gt=1)  # no tokenized pair is longer (prompt + the longer answer)
    num_train_pairs: int = Field(gt=0)
    num_valid_pairs: int = Field(ge=0)
    num_test_pairs: int = Field(gt=0)


class DPOCheckpoint(ModelCheckpoint):
    """The aligned model; training_loss is the DPO loss, validation_loss the DPO loss on valid_pairs."""
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage2_alignment.training"


class DPOResults(EvaluationResults):
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage2_alignment.evaluation"
    sft_skill_p_right: float  # the lesson: mean chance of a right answer on held-out skill problems
    dpo_skill_p_right: float
    sft_skill_accuracy: float  # greedy answers the checker accepts
    dpo_skill_accuracy: float
    sft_preference_accuracy: float  # held-out pairs: the right answer above the teacher's near miss
    dpo_preference_accuracy: float
    reward_accuracy: float
    reward_margin: float
    sft_completion_nll: float  # stage-1 test chats: what aligning the skill cost the rest
    dpo_completion_nll: float
    num_pairs: int = Field(gt=0)
    samples_path: ArtifactPath | None = None  # samples.json: [{"prompt", "completion", "sft_completion"}]


# --------------------------------------------------------------------------------------------------
# stage 0, optional: synthetic pretraining data by rephrasing
# --------------------------------------------------------------------------------------------------


class SyntheticDataset(Artifact):
    """Seed documents rephrased by an LLM (one row per document and strategy), judged, with the bill."""
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage0_pretrain.synthetic_data"
    data_path: ArtifactPath  # synthetic.parquet: id, seed_id, strategy, text, output, model, tokens, judge_*
    bill_path: ArtifactPath  # bill.json: tokens, FLOPs, GPU-hours, memory, projections (nemotron.sdg.cost)
    strategies: list[str]
    model: dict  # the endpoint: url, served model id, alias, and what /v1/models says of it
    num_records: int = Field(gt=0)


class SyntheticQuality(Artifact):
    """Perplexity of originals and rephrases under a reference LM, beside the judge's scores, per strategy."""
    made_by: ClassVar[str] = "nemotron.recipes.nano2.stage0_pretrain.synthetic_quality"
    scores_path: ArtifactPath  # scores.parquet: the synthetic rows plus ppl_original and ppl_rephrased
    table: dict  # {strategy: {records, ppl_original, ppl_rephrased, judge_*, output_input_token_ratio}}
