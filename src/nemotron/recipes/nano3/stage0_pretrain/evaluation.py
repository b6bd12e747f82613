"""Stage 0, step 3: the MoE model against its dense counterpart and a unigram baseline, on held-out text.

The question a mixture of experts must answer: for the same compute per token, does having more
parameters (but using only a few of them per token) predict text better? Every checkpoint is scored
on the same held-out windows (`nemotron.training.windows.heldout_windows`, in stream order) in bits per
byte, next to a unigram model of the training shards' token frequencies
(`nemotron.evaluation.language_modeling.score_against_unigram`). The dense counterparts have the MoE
model's active parameters: one trained on the same tokens (`training --dense`), and, when given, one
trained for the MoE run's time (`training --dense --equal-time`, `training.MOE_STEP_TIME_RATIO` times the
steps). `metrics["moe_against_dense"]` holds the answer, per budget (`equal_tokens`, `equal_time`): the
dense model's held-out loss per window against the MoE model's on the same windows, paired
(`nemotron.evaluation.lessons`; its gain is positive when the MoE model predicts better), beside both runs'
steps and measured training seconds.

Inputs: the MoE checkpoint (`--checkpoint-path`), the dense ones (`--dense-checkpoint-path`,
`--dense-time-checkpoint-path`), and the `PretrainDataset` they were trained on (found through their
recorded lineage, or `--dataset-path`). Refuses checkpoints that are not one MoE and dense ones, or that
were trained on other datasets.

    python -m nemotron.recipes.nano3.stage0_pretrain.evaluation \\
        --checkpoint-path runs/nano3/stage0_pretrain/training \\
        --dense-checkpoint-path runs/nano3/stage0_pretrain/training_dense \\
        --dense-time-checkpoint-path runs/nano3/stage0_pretrain/training_dense_time
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nemotron.artifact import apply_scale
from nemotron.artifact.upstream import load_upstream
from nemotron.cli import run
from nemotron.errors import NemotronError
from nemotron.evaluation.run import EvaluationRun
from nemotron.evaluation.settings import EvaluationSettings
from nemotron.recipes.nano3.artifacts import Nano3PretrainCheckpoint, Nano3PretrainResults, PretrainDataset
from nemotron.recipes.nano3.stage0_pretrain.training import SEQ_LEN

# Held-out tokens scored at full scale; apply_scale gives tiny 10,000 (as nano2's evaluation).
FULL_EVAL_TOKENS = 4_000_000


@dataclass
class Config(EvaluationSettings):
    """Held-out bits per byte of the MoE model, its dense counterpart and a unigram baseline."""

    # Two checkpoints here: say which one the shared flag takes.
    checkpoint_path: Path | None = None
    """The MoE Nano3PretrainCheckpoint folder; default: read it from stdin."""
    dense_checkpoint_path: Path | None = None
    """The dense counterpart's Nano3PretrainCheckpoint folder, trained on the MoE's tokens (training --dense)."""
    dense_time_checkpoint_path: Path | None = None
    """The dense counterpart trained for the MoE run's time (training --dense --equal-time); without it, the
    comparison is at equal tokens only."""
    dataset_path: Path | None = None
    """The PretrainDataset both were trained on; default: the MoE checkpoint's recorded input."""
    max_tokens: int | None = None
    """Held-out tokens to score; default per scale (tiny 10,000)."""
    output_dir: Path = Path("runs/nano3/stage0_pretrain/evaluation")


def main(config: Config) -> Nano3PretrainResults:
    from nemotron.evaluation.language_modeling import score_against_unigram
    from nemotron.evaluation.lessons import lesson
    from nemotron.training.windows import heldout_windows

    # --- inputs: one MoE and one dense checkpoint of the same dataset ---
    evaluation = EvaluationRun(config, Nano3PretrainCheckpoint)
    moe = evaluation.checkpoint
    if config.dense_checkpoint_path is None:
        raise NemotronError("--dense-checkpoint-path is required: the dense counterpart to compare with "
                            "(python -m nemotron.recipes.nano3.stage0_pretrain.training --dense)")
    dense = {"dense": Nano3PretrainCheckpoint.load(path=config.dense_checkpoint_path, scale=config.scale)}
    if config.dense_time_checkpoint_path is not None:
        dense["dense_time"] = Nano3PretrainCheckpoint.load(path=config.dense_time_checkpoint_path, scale=config.scale)
    for name, checkpoint in dense.items():
        flag = "--dense-time-checkpoint-path" if name == "dense_time" else "--dense-checkpoint-path"
        if moe.dense or not checkpoint.dense:
            raise NemotronError(f"{moe.path} and {checkpoint.path}: pass the MoE checkpoint as --checkpoint-path and "
                                f"a dense counterpart (trained with --dense) as {flag}")
        if [ref.digest for ref in checkpoint.inputs] != [ref.digest for ref in moe.inputs]:
            raise NemotronError(f"{checkpoint.path} was trained on another dataset than {moe.path}; train both on "
                                "the same PretrainDataset so the comparison means something")
    dataset = load_upstream(PretrainDataset, path=config.dataset_path, tracked_artifact=None, scale=config.scale,
                            made_from=[moe], stdin=False, flag="--dataset-path")
    seq_len = moe.config.get("seq_len") or SEQ_LEN[config.scale]
    max_tokens = config.max_tokens or apply_scale(FULL_EVAL_TOKENS, config.scale)
    windows = heldout_windows(dataset.valid_prefixes, seq_len, max_tokens)

    # --- both models, and the unigram baseline, on the same held-out targets ---
    scores = {}
    checkpoints = {"moe": moe, **dense}
    for name, model, tokenizer in evaluation.models(**checkpoints):
        scores[name] = score_against_unigram(model, tokenizer, windows, dataset.train_prefixes, config.batch_size)

    # --- the answer: each dense counterpart against the MoE model, window by window (paired) ---
    # A lesson "dense -> MoE": before is the dense model's loss per window, after the MoE model's; the gain is
    # positive when the MoE model predicts the held-out windows better, and its standard error is the paired one
    # (the same windows: most of the window-to-window spread cancels).
    train_seconds = {name: c.metrics["seconds_per_step"] * (c.steps - c.metrics["resumed_from_step"])
                     for name, c in checkpoints.items()}
    against = {}
    for budget, name in (("equal_tokens", "dense"), ("equal_time", "dense_time")):
        if name in scores:
            record = lesson(f"held-out loss per window (nats/token), dense ({checkpoints[name].steps} steps) -> MoE "
                            f"({moe.steps} steps)", scores[name]["lesson_items"]["after"],
                            scores["moe"]["lesson_items"]["after"], higher_is_better=False)
            against[budget] = {**record, "moe_steps": moe.steps, "dense_steps": checkpoints[name].steps,
                               "moe_train_seconds": train_seconds["moe"], "dense_train_seconds": train_seconds[name]}

    # --- save ---
    metrics = {
        **{f"{name}_{key}": value for name, numbers in scores.items() for key, value in numbers.items()
           if not key.startswith("unigram") and key not in ("num_tokens", "num_bytes", "lesson", "lesson_items")},
        "unigram_bits_per_byte": scores["moe"]["unigram_bits_per_byte"],
        "unigram_loss": scores["moe"]["unigram_loss"],
        "moe_parameters": moe.parameters, "moe_active_parameters": moe.active_parameters,
        **{f"{name}_parameters": c.parameters for name, c in dense.items()},
        **{f"{name}_steps": c.steps for name, c in checkpoints.items()},
        **{f"{name}_train_seconds": seconds for name, seconds in train_seconds.items()},
        "num_tokens": scores["moe"]["num_tokens"], "num_bytes": scores["moe"]["num_bytes"],
        "moe_against_dense": against,
        # What pretraining taught the MoE model: its held-out loss per window against the unigram's.
        "lesson": scores["moe"]["lesson"], "lesson_items": scores["moe"]["lesson_items"],
    }
    return evaluation.save(
        Nano3PretrainResults, inputs=[*checkpoints.values(), dataset], metrics=metrics,
        moe_bits_per_byte=scores["moe"]["bits_per_byte"], dense_bits_per_byte=scores["dense"]["bits_per_byte"],
        unigram_bits_per_byte=scores["moe"]["unigram_bits_per_byte"],
        moe_validation_loss=scores["moe"]["validation_loss"], dense_validation_loss=scores["dense"]["validation_loss"],
        num_tokens=scores["moe"]["num_tokens"],
    )


if __name__ == "__main__":
    run(main)
