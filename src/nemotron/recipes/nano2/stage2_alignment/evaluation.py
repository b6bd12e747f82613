"""Stage 2, step 3: evaluate the DPO model next to the SFT model it was aligned from.

Both models are scored in the same run on the held-out TEST preference pairs (built from test
conversations, never trained on), so `sft_*` and `dpo_*` metrics sit side by side:
- preference accuracy: how often a model gives the chosen answer a higher log-probability per token
  than the rejected one (`nemotron.evaluation.preference.preference_accuracy`); also per rejected kind
  (another question's answer, shuffled words, truncated answer), since they test different skills;
- reward accuracy and margin: DPO's implicit reward beta * log(pi_dpo / pi_sft) of chosen minus
  rejected (Rafailov et al., 2023, eq. 5), with the SFT model as the reference, as TRL logs them during
  training, here on unseen pairs. Accuracy > 0.5 and a positive margin mean DPO learned to separate
  answers beyond what SFT already did;
- answer accuracy: the stage-1 multiple-choice test on the SFT dataset's held-out questions, for both
  models, to show that alignment did not cost the model its answers (the "alignment tax", Ouyang et al.,
  2022);
- greedy chat answers of the DPO model to the held-out questions stage 1 sampled (samples.json:
  prompt, completion, sft_completion), so the report card shows base, SFT and DPO answers side by side.

With `--harness lm_eval`, lm-evaluation-harness 0.4.13 scores the same pairs (`nano2_preferences`, the
chosen answer as choice 0: its `acc` is our summed-log-prob preference accuracy) and answer items
(`nano2_answers`) for both models, plus any standard `--benchmarks` from the local Hugging Face cache.

Inputs: a `DPOCheckpoint` (stdin, `--checkpoint-path` or `--checkpoint-artifact`), and, each by its
`--...-path` flag, else stdin in a pipe, else the recorded lineage: the `PreferenceDataset` and the
`SFTCheckpoint` DPO was trained from, and the `SFTDataset` behind them. Output: a `DPOResults`.

    python -m nemotron.recipes.nano2.stage2_alignment.evaluation --scale tiny \\
        --checkpoint-path runs/nano2/stage2_alignment/training
    python -m nemotron.recipes.nano2.stage2_alignment.data_curation --scale tiny --dataset-path SFT_DATA \\
        | python -m nemotron.recipes.nano2.stage2_alignment.training --scale tiny --checkpoint-path SFT \\
        | python -m nemotron.recipes.nano2.stage2_alignment.evaluation --scale tiny
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from nemotron import atomic
from nemotron.artifact import apply_scale, mark_unfinished
from nemotron.artifact.upstream import load_upstream_input
from nemotron.cli import run
from nemotron.data_prep.conversations import read_conversations
from nemotron.data_prep.preference import read_pairs, tokenize_pairs
from nemotron.errors import NemotronError
from nemotron.evaluation.settings import CHAT_SAMPLE_TOKENS, ChatEvaluationSettings
from nemotron.recipes.nano2.artifacts import DPOCheckpoint, DPOResults, PreferenceDataset, SFTCheckpoint, SFTDataset
from nemotron.trackers import get_lineage_tracker

# Held-out pairs / questions scored at full scale; apply_scale gives tiny 1,000 (all of ours).
FULL_EVAL_ITEMS = 100_000


@dataclass
class Config(ChatEvaluationSettings):
    """Preference accuracy, reward margins and answer accuracy of the DPO model and its SFT reference."""

    dataset_path: Path | None = None
    """The PreferenceDataset whose test pairs are scored; default: stdin, else the checkpoint's lineage."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `preferencedataset:latest`."""
    sft_checkpoint_path: Path | None = None
    """The SFTCheckpoint used as reference; default: stdin, else the checkpoint's lineage."""
    sft_checkpoint_artifact: str | None = None
    """Or a tracked reference such as `sftcheckpoint:latest`."""
    sft_dataset_path: Path | None = None
    """The SFTDataset with the held-out questions; default: stdin, else the SFT checkpoint's lineage."""
    sft_dataset_artifact: str | None = None
    """Or a tracked reference such as `sftdataset:latest`."""
    beta: float | None = None
    """DPO's beta for the implicit rewards; default: the beta the checkpoint was trained with."""
    max_items: int | None = None
    """Held-out pairs and questions to score (the first ones of each file); default per scale."""
    output_dir: Path = Path("runs/nano2/stage2_alignment/evaluation")


def main(config: Config) -> DPOResults:
    # --- setup: the DPO checkpoint and everything it was made from ---
    from nemotron.cpu import evaluation_threads
    from nemotron.evaluation.chat import answer_accuracy, answer_items, chat_samples, sample_questions
    from nemotron.evaluation.harness import (
        chat_choice_task,
        check_harness_flags,
        evaluate_with_lm_eval,
        preference_task,
    )
    from nemotron.evaluation.lessons import changed_answers, lesson
    from nemotron.models.loading import load_model
    from nemotron.training.dpo import reward_metrics
    from nemotron.training.logprobs import pair_logprobs

    lm_eval_tasks = check_harness_flags(config.harness, config.benchmarks)  # before any work: fail fast
    checkpoint = DPOCheckpoint.load_input(config, "checkpoint")
    started = time.perf_counter()  # after the input: in a pipe, loading waits for the previous step
    pairs_dataset = load_upstream_input(PreferenceDataset, config, "dataset", made_from=[checkpoint])
    sft = load_upstream_input(SFTCheckpoint, config, "sft_checkpoint", made_from=[checkpoint])
    sft_dataset = load_upstream_input(SFTDataset, config, "sft_dataset", made_from=[sft, pairs_dataset])
    beta = config.beta if config.beta is not None else trained_beta(checkpoint)

    # --- data: held-out pairs and the stage-1 answer test ---
    limit = config.max_items or apply_scale(FULL_EVAL_ITEMS, config.scale)
    pairs = read_pairs(pairs_dataset.test_pairs)[:limit]
    conversations = read_conversations(sft_dataset.test_conversations)[:limit]
    items = answer_items(conversations, config.num_distractors, config.seed)
    questions = sample_questions(conversations, config.num_samples)

    # --- evaluate: summed log-probs of both answers of every pair, and the answer test, per model ---
    out = mark_unfinished(config.output_dir)
    # Per model: the pairs' log-probs, the answer test's MCResult, the greedy samples, the tokenizer.
    logps, metrics, answers_by_model, samples_by_model, tokenizers, prefers = {}, {}, {}, {}, {}, {}
    with evaluation_threads(config.num_threads):
        for name, source in (("sft", sft), ("dpo", checkpoint)):
            model, tokenizers[name] = load_model(source.model_dir)
            prompts, chosen, rejected = tokenize_pairs(tokenizers[name], pairs)
            logps[name] = pair_logprobs(model, prompts, chosen, rejected, batch_size=config.batch_size)
            lengths = ([len(ids) for ids in chosen], [len(ids) for ids in rejected])
            metrics |= preference_metrics(name, *logps[name], *lengths, kinds=[p["rejected_kind"] for p in pairs])
            prefers[name] = pair_preferences(*logps[name], *lengths)
            answers_by_model[name] = answer_accuracy(model, tokenizers[name], items, batch_size=config.batch_size)
            metrics |= answers_by_model[name].metrics(f"{name}_answer")
            samples_by_model[name] = chat_samples(model, tokenizers[name], questions,
                                                  config.max_new_tokens or CHAT_SAMPLE_TOKENS[config.scale])

        # --- lm-eval (--harness lm_eval): the same pairs and items as lm-eval tasks, and any --benchmarks ---
        lm_eval = {"benchmarks": []}
        if lm_eval_tasks is not None:
            tokenizer = tokenizers["dpo"]  # the SFT model's tokenizer, unchanged by DPO
            tasks = [preference_task("nano2_preferences", tokenizer, pairs),
                     chat_choice_task("nano2_answers", tokenizer, items)]
            metrics["lm_eval"], benchmarks, results_path = evaluate_with_lm_eval(
                out, lm_eval_tasks, tasks, {"sft": sft.model_dir, "dpo": checkpoint.model_dir}, config.benchmarks,
                batch_size=config.batch_size, limit=config.benchmark_limit,
            )
            lm_eval = {"benchmarks": benchmarks, "lm_eval_results": results_path}
    # The SFT model is DPO's reference: its log-probs of the same answers turn into the implicit rewards.
    rewards = reward_metrics(*logps["dpo"], *logps["sft"], beta=beta)
    metrics |= rewards | {"beta": beta, "num_pairs": len(pairs)}
    # The lesson: per held-out pair, does the model prefer the chosen answer (per token), SFT -> DPO
    # (paired); the pairs whose preference DPO turned right, or wrong, for the report card.
    metrics["lesson"] = lesson("held-out preference accuracy per pair (chosen above rejected, per token), SFT -> DPO",
                               prefers["sft"], prefers["dpo"])
    metrics["changed_answers"] = changed_answers(prefers["sft"], prefers["dpo"], [
        {"question": pair["prompt"][-1]["content"], "expected": pair["chosen"], "rejected": pair["rejected"],
         "rejected_kind": pair["rejected_kind"]} for pair in pairs])
    metrics["wall_seconds"] = time.perf_counter() - started

    # --- save ---
    samples = [dpo | {"sft_completion": sft["completion"]}
               for sft, dpo in zip(samples_by_model["sft"], samples_by_model["dpo"])]
    atomic.write_text(out / "samples.json", json.dumps(samples, indent=2, ensure_ascii=False) + "\n")
    get_lineage_tracker().log_metrics(
        {f"eval/{k}": v for k, v in metrics.items() if isinstance(v, float)}, step=checkpoint.steps
    )
    return DPOResults(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[checkpoint, pairs_dataset, sft, sft_dataset],
        sft_preference_accuracy=metrics["sft_preference_accuracy"],
        dpo_preference_accuracy=metrics["dpo_preference_accuracy"],
        reward_accuracy=rewards["reward_accuracy"],
        reward_margin=rewards["reward_margin"],
        sft_answer_accuracy=answers_by_model["sft"].accuracy,
        dpo_answer_accuracy=answers_by_model["dpo"].accuracy,
        sft_answer_accuracy_mutual_info=answers_by_model["sft"].accuracy_mutual_info,
        dpo_answer_accuracy_mutual_info=answers_by_model["dpo"].accuracy_mutual_info,
        num_pairs=len(pairs),
        samples_path=out / "samples.json",
        harness=config.harness,
        **lm_eval,
        metrics=metrics,
    ).save()


def preference_metrics(
    name: str,
    chosen,
    rejected,
    chosen_lengths: list[int],
    rejected_lengths: list[int],
    kinds: list[str],
) -> dict:
    """`<name>_preference_accuracy` (per token), its summed-log-prob form, and the accuracy per rejected kind."""
    from nemotron.evaluation.preference import preference_accuracy

    by_kind = defaultdict(list)
    for i, kind in enumerate(kinds):
        by_kind[kind].append(i)
    per_kind = {
        kind: preference_accuracy(chosen[rows], rejected[rows], [chosen_lengths[i] for i in rows],
                                  [rejected_lengths[i] for i in rows])
        for kind, rows in sorted(by_kind.items())
    }
    return {
        f"{name}_preference_accuracy": preference_accuracy(chosen, rejected, chosen_lengths, rejected_lengths),
        f"{name}_preference_accuracy_sum": preference_accuracy(
            chosen, rejected, chosen_lengths, rejected_lengths, length_normalized=False
        ),
        f"{name}_preference_accuracy_by_kind": per_kind,
    }


def pair_preferences(chosen, rejected, chosen_lengths: list[int], rejected_lengths: list[int]) -> list[bool]:
    """Per pair: does the model give the chosen answer a higher log-probability per token than the rejected?
    (`preference_accuracy` is the mean of this.)"""
    return [float(c) / nc > float(r) / nr for c, r, nc, nr in zip(chosen, rejected, chosen_lengths, rejected_lengths)]


def trained_beta(checkpoint: DPOCheckpoint) -> float:
    """The beta DPO was trained with, from the checkpoint's recorded config."""
    beta = checkpoint.config.get("beta")
    if not isinstance(beta, (int, float)) or beta <= 0:
        raise NemotronError(f"{checkpoint.path}: the checkpoint's config records no beta; pass --beta 0.1")
    return float(beta)


if __name__ == "__main__":
    run(main)
