"""Stage 0, step 3: the MoE model against its dense counterpart and a unigram baseline, on held-out text.

The question a mixture of experts must answer: for the same compute per token, does having more
parameters (but using only a few of them per token) predict text better? Both checkpoints are scored
on the same held-out windows (`nemotron.training.windows.heldout_windows`, in stream order) in bits per
byte, next to a unigram model of the training shards' token frequencies
(`nemotron.evaluation.language_modeling.score_against_unigram`). The dense counterpart has the MoE
model's active parameters and was trained for about the same CPU time; both runs' measured training
seconds are reported too, so "same time" is a number on the page, not a promise.

Inputs: the MoE checkpoint (`--checkpoint-path`), the dense one (`--dense-checkpoint-path`), and the
`PretrainDataset` they were trained on (found through their recorded lineage, or `--dataset-path`).
Refuses a pair that is not one MoE and one dense checkpoint, or that was trained on other datasets.

    python -m nemotron.recipes.nano3.stage0_pretrain.evaluation \\
        --checkpoint-path runs/nano3/stage0_pretrain/training \\
        --dense-checkpoint-path runs/nano3/stage0_pretrain/training_dense
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
    """The dense counterpart's Nano3PretrainCheckpoint folder (training --dense)."""
    dataset_path: Path | None = None
    """The PretrainDataset both were trained on; default: the MoE checkpoint's recorded input."""
    max_tokens: int | None = None
    """Held-out tokens to score; default per scale (tiny 10,000)."""
    output_dir: Path = Path("runs/nano3/stage0_pretrain/evaluation")


def main(config: Config) -> Nano3PretrainResults:
    from nemotron.evaluation.language_modeling import score_against_unigram
    from nemotron.training.windows import heldout_windows

    # --- inputs: one MoE and one dense checkpoint of the same dataset ---
    evaluation = EvaluationRun(config, Nano3PretrainCheckpoint)
    moe = evaluation.checkpoint
    if config.dense_checkpoint_path is None:
        raise NemotronError("--dense-checkpoint-path is required: the dense counterpart to compare with "
                            "(python -m nemotron.recipes.nano3.stage0_pretrain.training --dense)")
    dense = Nano3PretrainCheckpoint.load(path=config.dense_checkpoint_path, scale=config.scale)
    if moe.dense or not dense.dense:
        raise NemotronError(f"{moe.path} and {dense.path}: pass the MoE checkpoint as --checkpoint-path and the "
                            "dense counterpart (trained with --dense) as --dense-checkpoint-path")
    dataset = load_upstream(PretrainDataset, path=config.dataset_path, tracked_artifact=None, scale=config.scale,
                            made_from=[moe], stdin=False, flag="--dataset-path")
    if [ref.digest for ref in dense.inputs] != [ref.digest for ref in moe.inputs]:
        raise NemotronError(f"{dense.path} was trained on another dataset than {moe.path}; train both on the same "
                            "PretrainDataset so the comparison means something")
    seq_len = moe.config.get("seq_len") or SEQ_LEN[config.scale]
    max_tokens = config.max_tokens or apply_scale(FULL_EVAL_TOKENS, config.scale)
    windows = heldout_windows(dataset.valid_prefixes, seq_len, max_tokens)

    # --- both models, and the unigram baseline, on the same held-out targets ---
    scores = {}
    for name, model, tokenizer in evaluation.models(moe=moe, dense=dense):
        scores[name] = score_against_unigram(model, tokenizer, windows, dataset.train_prefixes, config.batch_size)

    # --- save ---
    train_seconds = {name: c.metrics["seconds_per_step"] * (c.steps - c.metrics["resumed_from_step"])
                     for name, c in (("moe", moe), ("dense", dense))}
    metrics = {
        **{f"{name}_{key}": value for name, numbers in scores.items() for key, value in numbers.items()
           if not key.startswith("unigram") and key not in ("num_tokens", "num_bytes", "lesson")},
        "unigram_bits_per_byte": scores["moe"]["unigram_bits_per_byte"],
        "unigram_loss": scores["moe"]["unigram_loss"],
        "moe_parameters": moe.parameters, "moe_active_parameters": moe.active_parameters,
        "dense_parameters": dense.parameters,
        "moe_steps": moe.steps, "dense_steps": dense.steps,
        **{f"{name}_train_seconds": seconds for name, seconds in train_seconds.items()},
        "num_tokens": scores["moe"]["num_tokens"], "num_bytes": scores["moe"]["num_bytes"],
        # What pretraining taught the MoE model: its held-out loss per window against the unigram's.
        "lesson": scores["moe"]["lesson"],
    }
    return evaluation.save(
        Nano3PretrainResults, inputs=[moe, dense, dataset], metrics=metrics,
        moe_bits_per_byte=scores["moe"]["bits_per_byte"], dense_bits_per_byte=scores["dense"]["bits_per_byte"],
        unigram_bits_per_byte=scores["moe"]["unigram_bits_per_byte"],
        moe_validation_loss=scores["moe"]["validation_loss"], dense_validation_loss=scores["dense"]["validation_loss"],
        num_tokens=scores["moe"]["num_tokens"],
    )


if __name__ == "__main__":
    run(main)
