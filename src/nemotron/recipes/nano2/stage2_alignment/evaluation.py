"""Stage 2, step 3: the DPO model next to the SFT model it was aligned from, on what DPO was for.

Both models are scored in the same run on held-out data neither trained on, so `sft_*` and `dpo_*` sit
side by side:
- the skill (the lesson): per held-out problem of the SFT dataset, the probability that the model answers
  right (the right number, then `<|im_end|>`): the chance that one SAMPLED answer is right, computed exactly
  from the log-probs (`evaluation.chat.skill_scores`); the same for the teacher's mistake (the near miss),
  which SFT imitated and DPO's judged pairs push down; and the greedy answer, checked;
- preference accuracy on the held-out pairs (true answer against the teacher's near miss): how often a model
  gives the right answer the higher log-probability per token (`nemotron.evaluation.preference`);
- reward accuracy and margin: DPO's implicit reward beta * log(pi_dpo / pi_sft) of chosen minus rejected
  (Rafailov et al., 2023, eq. 5) on those pairs, as TRL logs them during training, here on unseen pairs;
- the chat: completion NLL on the stage-1 test chats (chatterbot's), to show what aligning the skill cost the rest
  (the "alignment tax", Ouyang et al., 2022), and greedy answers to the questions stage 1 sampled
  (samples.json: prompt, completion, sft_completion) for the report card.

With `--harness lm_eval`, lm-evaluation-harness 0.4.13 scores the same pairs (`nano2_preferences`, the
chosen answer as choice 0: its `acc` is our summed-log-prob preference accuracy) for both models, plus any
standard `--benchmarks`.

Inputs: a `DPOCheckpoint` (stdin, `--checkpoint-path` or `--checkpoint-artifact`), and, each by its
`--...-path` flag, else stdin in a pipe, else the recorded lineage: the `PreferenceDataset` and the
`SFTCheckpoint` DPO was trained from, and the `SFTDataset` behind them. Output: a `DPOResults`.

    python -m nemotron.recipes.nano2.stage2_alignment.evaluation --scale tiny \\
        --checkpoint-path runs/nano2/stage2_alignment/training
    python -m nemotron.recipes.nano2.stage2_alignment.data_curation --scale tiny --checkpoint-path SFT \\
        | python -m nemotron.recipes.nano2.stage2_alignment.training --scale tiny --checkpoint-path SFT \\
        | python -m nemotron.recipes.nano2.stage2_alignment.evaluation --scale tiny
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nemotron.artifact import apply_scale
from nemotron.cli import run
from nemotron.data_prep.conversations import read_conversations
from nemotron.data_prep.preference import read_pairs
from nemotron.data_prep.verifiable import read_problems
from nemotron.errors import NemotronError
from nemotron.evaluation.run import EvaluationRun
from nemotron.evaluation.settings import CHAT_SAMPLE_TOKENS, ChatEvaluationSettings
from nemotron.recipes.nano2.artifacts import DPOCheckpoint, DPOResults, PreferenceDataset, SFTCheckpoint, SFTDataset
from nemotron.recipes.nano2.stage1_sft.data_curation import SKILL_CATEGORY

# Held-out pairs / questions scored at full scale; apply_scale gives tiny 1,000 (all of ours).
FULL_EVAL_ITEMS = 100_000


@dataclass
class Config(ChatEvaluationSettings):
    """The skill (chance of a right answer), preference accuracy, reward margins and chat NLL of the DPO model
    and its SFT reference."""

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
    """Held-out problems, pairs and chats to score (the first ones of each file); default per scale."""
    output_dir: Path = Path("runs/nano2/stage2_alignment/evaluation")


def main(config: Config) -> DPOResults:
    from nemotron.evaluation.chat import (
        chances,
        chat_samples,
        conversation_nll,
        sample_questions,
        skill_metrics,
        skill_scores,
    )
    from nemotron.evaluation.harness import preference_task
    from nemotron.evaluation.language_modeling import mean_nll
    from nemotron.evaluation.lessons import changed_chances, lesson
    from nemotron.training.dpo import reward_metrics

    # --- inputs: the DPO checkpoint and everything it was made from ---
    evaluation = EvaluationRun(config, DPOCheckpoint)  # refuses bad --harness/--benchmarks first
    checkpoint = evaluation.checkpoint
    pairs_dataset = evaluation.upstream(PreferenceDataset, "dataset", made_from=[checkpoint])
    sft = evaluation.upstream(SFTCheckpoint, "sft_checkpoint", made_from=[checkpoint])
    sft_dataset = evaluation.upstream(SFTDataset, "sft_dataset", made_from=[sft, pairs_dataset])
    beta = config.beta if config.beta is not None else trained_beta(checkpoint)

    # --- data: the held-out skill problems and pairs, the stage-1 test chats ---
    limit = config.max_items or apply_scale(FULL_EVAL_ITEMS, config.scale)
    problems = read_problems(sft_dataset.test_problems, limit)
    # The chat: the stage-1 test chats but the skill's (the skill has its own measures, and DPO's pairs were
    # sampled from training problems whose teacher-answered chats may sit in SFT's test split).
    conversations = [c for c in read_conversations(sft_dataset.test_conversations)
                     if c.get("category") != SKILL_CATEGORY][:limit]
    questions = sample_questions(conversations, config.num_samples)

    # --- evaluate: the skill, the pairs' log-probs and the chats, per model ---
    logps, metrics, skill, samples_by_model, tokenizers, prefers, chat_nll = {}, {}, {}, {}, {}, {}, {}
    for name, model, tokenizer in evaluation.models(sft=sft, dpo=checkpoint):
        tokenizers[name] = tokenizer  # for the lm-eval task below
        skill[name] = skill_scores(model, tokenizer, problems)
        metrics |= skill_metrics(name, skill[name])
        # The held-out pairs are these problems' right answer against the teacher's near miss
        # (preference.reference_pairs): their log-probs are the ones just computed.
        logps[name] = (skill[name]["logp_right"], skill[name]["logp_near_miss"])
        prefers[name] = pair_preferences(*logps[name], *pair_lengths(tokenizer, problems))
        metrics[f"{name}_preference_accuracy"] = sum(prefers[name]) / len(prefers[name])
        chat_nll[name] = mean_nll(*conversation_nll(model, tokenizer, conversations,
                                                    batch_size=config.batch_size))[0]
        metrics[f"{name}_completion_nll"] = chat_nll[name]
        samples_by_model[name] = chat_samples(model, tokenizer, questions,
                                              config.max_new_tokens or CHAT_SAMPLE_TOKENS[config.scale])

    # --- lm-eval (--harness lm_eval): the same pairs as an lm-eval task, and any --benchmarks ---
    if evaluation.with_lm_eval:
        pairs = read_pairs(pairs_dataset.test_pairs)[:limit]  # the held-out pairs, as the pairs file holds them
        tasks = [preference_task("nano2_preferences", tokenizers["dpo"], pairs)]  # SFT's tokenizer, unchanged
        metrics["lm_eval"] = evaluation.lm_eval(tasks, {"sft": sft.model_dir, "dpo": checkpoint.model_dir})

    # --- the rewards, the lesson and the answers it changed ---
    # The SFT model is DPO's reference: its log-probs of the same answers turn into the implicit rewards.
    rewards = reward_metrics(*logps["dpo"], *logps["sft"], beta=beta)
    metrics |= rewards | {"beta": beta, "num_pairs": len(problems)}
    # The lesson: per held-out problem, the chance that a sampled answer is right, SFT -> DPO (paired); and
    # the problems whose greedy answer DPO made right, or wrong.
    metrics["lesson"] = lesson("held-out chance of a right answer per problem (its exact probability), SFT -> DPO",
                               skill["sft"]["p_right"], skill["dpo"]["p_right"])
    metrics["changed_answers"] = changed_chances(skill["sft"]["p_right"], skill["dpo"]["p_right"], [
        {"question": p["question"], "expected": p["answer"],
         "before": chances(skill["sft"], i, p["near_miss"]), "after": chances(skill["dpo"], i, p["near_miss"])}
        for i, p in enumerate(problems)])

    # --- save ---
    samples = [dpo | {"sft_completion": sft["completion"]}
               for sft, dpo in zip(samples_by_model["sft"], samples_by_model["dpo"])]
    return evaluation.save(
        DPOResults,
        inputs=[checkpoint, pairs_dataset, sft, sft_dataset],
        samples=samples,
        metrics=metrics,
        sft_skill_p_right=metrics["sft_skill_p_right"],
        dpo_skill_p_right=metrics["dpo_skill_p_right"],
        sft_skill_accuracy=metrics["sft_skill_accuracy"],
        dpo_skill_accuracy=metrics["dpo_skill_accuracy"],
        sft_preference_accuracy=metrics["sft_preference_accuracy"],
        dpo_preference_accuracy=metrics["dpo_preference_accuracy"],
        reward_accuracy=rewards["reward_accuracy"],
        reward_margin=rewards["reward_margin"],
        sft_completion_nll=chat_nll["sft"],
        dpo_completion_nll=chat_nll["dpo"],
        num_pairs=len(problems),
    )


def pair_lengths(tokenizer, problems: list[dict]) -> tuple[list[int], list[int]]:
    """Tokens of each problem's right answer and of its near miss, as DPO scores them (with `<|im_end|>`)."""
    from nemotron.data_prep.preference import answer_ids

    return ([len(answer_ids(tokenizer, p["answer"])) for p in problems],
            [len(answer_ids(tokenizer, p["near_miss"])) for p in problems])


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
