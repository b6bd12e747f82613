"""Stage 0, step 3: evaluate the pretrained model on held-out text, against a unigram baseline.

What a pretrained base model is measured by (GPT-2, Radford et al. 2019; the Pile, Gao et al. 2020):
- held-out loss: mean next-token negative log-likelihood (nats) on the validation shards, cut into the
  same fixed-length windows pretraining reads (`nemotron.training.windows`), in stream order;
- perplexity: exp(loss), the number of equally likely tokens the model is as unsure as;
- bits per byte: the same total NLL in bits, divided by the UTF-8 bytes of the text scored. Unlike loss
  and perplexity it does not depend on the tokenizer, so any two models (or a compressor) compare;
- a unigram baseline fitted in this run on the training shards' tokens and scored on exactly the same
  targets: what knowing only token frequencies gives. The model must beat it by a wide margin;
- greedy samples from a few fixed Shakespeare-style openings, so a reader sees what it writes.

With `--harness lm_eval`, lm-evaluation-harness 0.4.13 scores the same held-out documents too
(`loglikelihood_rolling` in windows of the trained seq_len: word and byte perplexity, bits per byte),
and any standard `--benchmarks` whose data is in the local Hugging Face cache; its numbers go to
`metrics["lm_eval"]` and lm_eval_results.json, the task YAMLs to lm_eval_tasks/ (rerun them with
`lm_eval --include_path`); its bits per byte is close to ours, not equal (`heldout_documents` says why).
The model is loaded from the checkpoint's Hugging Face folder alone (`heldout_loss_of_model_dir`).

Inputs: a `PretrainCheckpoint` (stdin, `--checkpoint-path` or `--checkpoint-artifact`) and the
`PretrainDataset` it was trained on (`--dataset-path`, else stdin in a pipe, else the checkpoint's
recorded lineage). Output: a `PretrainResults` (numbers in fields and metrics, samples in samples.json).

    python -m nemotron.recipes.nano2.stage0_pretrain.evaluation --scale tiny \\
        --checkpoint-path runs/nano2/stage0_pretrain/training
    python -m nemotron.recipes.nano2.stage0_pretrain.data_curation --scale tiny \\
        | python -m nemotron.recipes.nano2.stage0_pretrain.training --scale tiny \\
        | python -m nemotron.recipes.nano2.stage0_pretrain.evaluation --scale tiny
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nemotron.artifact import apply_scale
from nemotron.cli import run
from nemotron.data_prep.indexed import IndexedReader
from nemotron.data_prep.tokenizer import EOS_ID
from nemotron.errors import NemotronError
from nemotron.evaluation.run import EvaluationRun
from nemotron.evaluation.settings import LMEvalSettings
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, PretrainDataset, PretrainResults
from nemotron.recipes.nano2.stage0_pretrain.training import SEQ_LEN as TRAINING_SEQ_LEN

# Held-out tokens scored at full scale; apply_scale gives tiny 10,000 (~40 windows of 256 tokens).
FULL_EVAL_TOKENS = 4_000_000
SAMPLE_TOKENS = {"tiny": 48, "small": 96, "medium": 128, "full": 256}
# Document openings in the style of the training text (a scene heading, a stage direction, a speaker;
# a sonnet number). Each prompt starts with EOS because every document in the training stream follows
# the previous document's EOS: the model is prompted exactly where it learned that documents begin.
SAMPLE_PROMPTS = (
    "SCENE I. Elsinore. A platform before the castle.\n\n[Enter HAMLET.]\n\nHAMLET.\n",
    "SCENE II. Verona. A street.\n\n[Enter ROMEO.]\n\nROMEO.\n",
    "SCENE I. London. A street.\n\n[Enter GLOUCESTER.]\n\nGLOUCESTER.\nNow is the winter of",
    "XVIII\n\nShall I compare thee to a",
)


@dataclass
class Config(LMEvalSettings):
    """Held-out loss, perplexity and bits per byte of a pretrained checkpoint, plus greedy samples."""

    dataset_path: Path | None = None
    """The PretrainDataset to evaluate on; default: stdin in a pipe, else the one the checkpoint recorded."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `pretraindataset:latest`."""
    split: Literal["valid", "test"] = "valid"
    """Which held-out shards to score."""
    seq_len: int | None = None
    """Tokens per scored window; default: the seq_len the checkpoint was trained with."""
    max_tokens: int | None = None
    """Held-out tokens to score (whole windows, from the start of the split); default per scale."""
    max_new_tokens: int | None = None
    """Tokens per greedy sample; default per scale (tiny 48)."""
    # Pretraining has no items: lm-eval scores the held-out text itself.
    harness: Literal["ours", "lm_eval"] = "ours"
    """ours: our metrics; lm_eval: also lm-evaluation-harness on the held-out documents, rolling windows of
    seq_len (nemotron.evaluation.harness)."""
    output_dir: Path = Path("runs/nano2/stage0_pretrain/evaluation")


def main(config: Config) -> PretrainResults:
    from nemotron.evaluation.generation import greedy_samples
    from nemotron.evaluation.harness import text_task
    from nemotron.evaluation.language_modeling import score_against_unigram
    from nemotron.training.windows import heldout_windows

    # --- inputs: the checkpoint, the dataset it was trained on, and how much to score ---
    evaluation = EvaluationRun(config, PretrainCheckpoint)  # refuses bad --harness/--benchmarks first
    checkpoint = evaluation.checkpoint
    dataset = evaluation.upstream(PretrainDataset, "dataset", made_from=[checkpoint])
    seq_len = config.seq_len or trained_seq_len(checkpoint)
    prefixes = dataset.valid_prefixes if config.split == "valid" else dataset.test_prefixes
    if not prefixes:
        raise NemotronError(f"{dataset.path}: the dataset has no {config.split} shards; pass --split valid")
    max_tokens = config.max_tokens or apply_scale(FULL_EVAL_TOKENS, config.scale)

    with evaluation.model(checkpoint) as (model, tokenizer):
        # --- model and baseline: held-out loss of the checkpoint's Hugging Face folder, and of unigram
        # frequencies of the training shards on the same targets ---
        windows = heldout_windows(prefixes, seq_len, max_tokens)
        scores = score_against_unigram(model, tokenizer, windows, dataset.train_prefixes, config.batch_size)

        # --- samples: greedy continuations of fixed openings ---
        max_new_tokens = config.max_new_tokens or SAMPLE_TOKENS[config.scale]
        prompts = [[EOS_ID, *tokenizer.encode(text, add_special_tokens=False)] for text in SAMPLE_PROMPTS]
        completions = greedy_samples(model, tokenizer, prompts, max_new_tokens, stop_token_ids=[EOS_ID])
        samples = [{"prompt": p, "completion": c} for p, c in zip(SAMPLE_PROMPTS, completions)]

        # --- lm-eval (--harness lm_eval): held-out documents, rolling windows of seq_len; any --benchmarks ---
        lm_eval_metrics = {}
        if evaluation.with_lm_eval:
            texts = heldout_documents(prefixes, tokenizer, max_tokens)
            lm_eval_metrics = evaluation.lm_eval([text_task("nano2_heldout_text", texts)],
                                                 {"base": checkpoint.model_dir}, max_length=seq_len)

    # --- save ---
    numbers = {name: scores[name] for name in ("validation_loss", "perplexity", "bits_per_byte", "unigram_loss",
                                                "unigram_bits_per_byte")}
    metrics = {**scores, "num_windows": len(windows), "seq_len": seq_len}
    if lm_eval_metrics:
        metrics["lm_eval"] = lm_eval_metrics
    return evaluation.save(
        PretrainResults,
        inputs=[checkpoint, dataset],
        samples=samples,
        metrics=metrics,
        num_tokens=scores["num_tokens"],
        **numbers,
    )


def trained_seq_len(checkpoint: PretrainCheckpoint) -> int:
    """The window length the checkpoint was trained on: its recorded --seq-len, else the scale's default."""
    seq_len = checkpoint.config.get("seq_len") or TRAINING_SEQ_LEN.get(checkpoint.scale)
    if not isinstance(seq_len, int) or seq_len < 1:
        raise NemotronError(f"{checkpoint.path}: the checkpoint's config records no seq_len; pass --seq-len N")
    return seq_len


def heldout_documents(prefixes: list[Path], tokenizer, max_tokens: int) -> list[str]:
    """The held-out documents as text, in stream order, until `max_tokens` tokens (the last one cut there).

    lm-eval's rolling log-likelihood scores each document on its own, from the prefix token (EOS), in
    windows of the model's length; our `validation_loss` scores the concatenated stream in windows that
    run across documents. Same text, other windows: the two bits-per-byte numbers are close, not equal.
    """
    texts, budget = [], max_tokens
    for prefix in prefixes:
        for document in IndexedReader(prefix):
            ids = [int(t) for t in document[:budget] if int(t) != EOS_ID]
            text = tokenizer.decode(ids)
            if text:
                texts.append(text)
            budget -= min(len(document), budget)
            if budget == 0:
                return texts
    return texts


def heldout_loss_of_model_dir(
    model_dir: Path | str, prefixes: list[Path], seq_len: int, max_tokens: int, batch_size: int = 8
) -> tuple[float, int]:
    """(mean NLL in nats, tokens scored) of a Hugging Face model folder on held-out bin/idx shards.

    Exactly what `main` reports as validation_loss, from the folder and the shards alone: the model is
    loaded with `AutoModelForCausalLM.from_pretrained`, nothing of ours in between, so the numbers are what
    anyone gets from that folder (a test checks them against plain transformers).
    """
    from nemotron.evaluation.language_modeling import heldout_loss
    from nemotron.models.loading import load_model
    from nemotron.training.windows import heldout_windows

    model, _ = load_model(model_dir)
    return heldout_loss(model, heldout_windows(prefixes, seq_len, max_tokens), batch_size=batch_size)


if __name__ == "__main__":
    run(main)
