"""Stage 1, step 3: evaluate the SFT model next to the stage-0 base model it was fine-tuned from.

Both models are scored in the same run on the same held-out TEST data of the SFT dataset (questions that
never appear in SFT training; see stage-1 data curation), so the gap between the `base_*` and `sft_*` metrics
is what supervised fine-tuning bought:
- the skill (stage-1 curation's skill problems), the lesson: per held-out problem, the exact chance that a
  sampled answer is right (the right number, then `<|im_end|>`, computed from the log-probs), base -> SFT,
  paired, as stage 2 measures DPO; the greedy answer checked; the chance of the teacher's near miss
  (`nemotron.evaluation.chat.skill_scores`);
- the chat (chatterbot's held-out chats, the skill's left out), beside it: the NLL of the answers' content
  tokens, pooled over the tokens, base -> SFT (`metrics["chat"]`, paired). The template's `<|im_end|>` is
  left out because the base model never saw it: pretrained on Shakespeare alone, it learnt to give the
  chat markers almost no probability, so each end of turn costs it several times a uniform guess over
  the vocabulary. Counted in, as the lesson once was (the SFT loss, per conversation), it put the base
  model below a uniform guess, and most of SFT's "gain" was learning that a turn ends;
- completion-only NLL: mean NLL of the assistant tokens (answer + `<|im_end|>`) given the chat so far,
  over all held-out conversations: the SFT training loss itself, on unseen ones. Its perplexity too;
- answer accuracy: each held-out question as a multiple-choice item, its true answer against 3 seeded
  answers to other questions, scored by log-likelihood as lm-evaluation-harness scores MMLU (`acc`,
  and `acc_norm` divided by answer length in characters), and `acc_mutual_info` (Holtzman et al., 2021):
  log p(answer | question) minus log p(answer | "Answer:"). Chance is 25%. The mutual-info accuracy is the
  headline of the answer test (`*_answer_accuracy_mutual_info`; why, measured: at the items in `main`);
- a few greedy chat answers of both models to the same held-out questions (samples.json: prompt,
  completion of the SFT model, base_completion), so a reader sees what SFT changed.
The answers table: the held-out skill problems whose chance of a right answer SFT raised (or lowered) most.
With `--harness lm_eval`,
lm-evaluation-harness 0.4.13 scores the same multiple-choice items as a local task (`nano2_answers`) for
both models, plus any standard `--benchmarks` whose data is in the local Hugging Face cache
(`nemotron.evaluation.harness`; a test checks lm-eval's numbers equal ours on the same requests).

Inputs: an `SFTCheckpoint` (stdin, `--checkpoint-path` or `--checkpoint-artifact`), the `SFTDataset` it
was trained on and the stage-0 `PretrainCheckpoint` it started from (each: its `--...-path` flag, else
stdin in a pipe, else the lineage the checkpoint recorded). Output: an `SFTResults`.

    python -m nemotron.recipes.nano2.stage1_sft.evaluation --scale tiny \\
        --checkpoint-path runs/nano2/stage1_sft/training
    python -m nemotron.recipes.nano2.stage1_sft.data_curation --scale tiny --checkpoint-path STAGE0 \\
        | python -m nemotron.recipes.nano2.stage1_sft.training --scale tiny \\
        | python -m nemotron.recipes.nano2.stage1_sft.evaluation --scale tiny
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nemotron.artifact import apply_scale
from nemotron.cli import run
from nemotron.data_prep.conversations import read_conversations
from nemotron.data_prep.verifiable import read_problems
from nemotron.evaluation.run import EvaluationRun
from nemotron.evaluation.settings import CHAT_SAMPLE_TOKENS, ChatEvaluationSettings
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, SFTCheckpoint, SFTDataset, SFTResults
from nemotron.recipes.nano2.stage1_sft.data_curation import SKILL_CATEGORY

# Held-out conversations scored at full scale; apply_scale gives tiny 1,000 (all of chatterbot's test split).
FULL_EVAL_CONVERSATIONS = 100_000


@dataclass
class Config(ChatEvaluationSettings):
    """The skill (chance of a right answer), chat NLL and answer accuracy of the SFT model and its base model,
    plus chat samples."""

    dataset_path: Path | None = None
    """The SFTDataset whose TEST conversations are scored; default: stdin, else the checkpoint's lineage."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `sftdataset:latest`."""
    base_checkpoint_path: Path | None = None
    """The stage-0 PretrainCheckpoint to compare with; default: stdin, else the checkpoint's lineage."""
    base_checkpoint_artifact: str | None = None
    """Or a tracked reference such as `pretraincheckpoint:latest`."""
    max_conversations: int | None = None
    """Held-out conversations to score (the first ones of the test file); default per scale."""
    output_dir: Path = Path("runs/nano2/stage1_sft/evaluation")


def main(config: Config) -> SFTResults:
    from nemotron.evaluation.chat import (
        answer_accuracy,
        answer_items,
        chances,
        chat_samples,
        conversation_nll,
        sample_questions,
        skill_metrics,
        skill_scores,
    )
    from nemotron.evaluation.harness import chat_choice_task
    from nemotron.evaluation.language_modeling import mean_nll, perplexity
    from nemotron.evaluation.lessons import changed_chances, lesson, lesson_items, pooled_lesson

    # --- inputs: the SFT checkpoint, its dataset and its base model ---
    evaluation = EvaluationRun(config, SFTCheckpoint)  # refuses bad --harness/--benchmarks first
    checkpoint = evaluation.checkpoint
    dataset = evaluation.upstream(SFTDataset, "dataset", made_from=[checkpoint])
    base = evaluation.upstream(PretrainCheckpoint, "base_checkpoint", made_from=[checkpoint, dataset])

    # --- data: held-out conversations and the multiple-choice items built from them ---
    limit = config.max_conversations or apply_scale(FULL_EVAL_CONVERSATIONS, config.scale)
    everything = read_conversations(dataset.test_conversations)
    conversations = everything[:limit]
    # The answer test and the chat samples are about the chat (chatterbot); the skill has its own measures.
    chats = [c for c in everything if c.get("category") != SKILL_CATEGORY][:limit]
    # Why the headline is the mutual-information accuracy (measured on a tiny recipe run: 1.5M-parameter base,
    # SFT at lr 3e-3 for 60 steps on 725 chats; 5 seeded distractor sets per item; +- is the paired standard
    # error of SFT minus base):
    #
    #     distractors from         items  base acc/norm/MI     SFT acc/norm/MI      SFT-base MI
    #     any category, test        90    .264/.258/.118       .256/.258/.384       +.267 +- .047
    #     any category, test+valid 173    .265/.239/.120       .260/.237/.397       +.276 +- .033
    #     same category, test       75    .259/.264/.208       .264/.251/.243       +.035 +- .058
    #
    # Plain `acc` and `acc_norm` stay at chance for both models whatever the distractors: a model this small
    # learns which answers are typical (the answer prior), and that prior, not the question, decides the raw
    # log-likelihood. Subtracting it shows SFT did learn to tie questions to on-topic answers (from below chance
    # to ~0.39), but not the fine-grained answer within a topic (same-category distractors: no significant gain).
    # So the distractors come from ANY category (a test a model of this size can pass or fail), and from TEST
    # conversations only: valid was used to choose the SFT learning rate, and extra distractor draws shrink the
    # distractor noise but not the noise of sampling ~80 distinct questions. Why the base model scores below
    # chance on mutual information is not understood.
    items = answer_items(chats, config.num_distractors, config.seed)
    questions = sample_questions(chats, config.num_samples)
    problems = read_problems(dataset.test_problems, limit)  # the skill's held-out problems

    # --- evaluate: the same numbers for both models, one model after the other ---
    # Per model: (completion NLL, completion tokens), the chats' content NLL (per-chat sums, counts), the answer
    # test's MCResult, the greedy samples, the skill's scores, the tokenizer.
    metrics: dict = {}
    nll_by_model, content, answers_by_model, samples_by_model, skill, tokenizers = {}, {}, {}, {}, {}, {}
    for name, model, tokenizer in evaluation.models(base=base, sft=checkpoint):
        tokenizers[name] = tokenizer  # for the lm-eval task below
        nll_by_model[name] = mean_nll(*conversation_nll(model, tokenizer, conversations,
                                                        batch_size=config.batch_size))
        # the chat without the template's <|im_end|> (the base model never saw it: the module docstring)
        content[name] = conversation_nll(model, tokenizer, chats, batch_size=config.batch_size, content_only=True)
        answers_by_model[name] = answer_accuracy(model, tokenizer, items, batch_size=config.batch_size)
        metrics |= {
            f"{name}_completion_nll": nll_by_model[name][0],
            f"{name}_completion_perplexity": perplexity(nll_by_model[name][0]),
            f"{name}_content_nll": mean_nll(*content[name])[0],
            **answers_by_model[name].metrics(f"{name}_answer"),
        }
        samples_by_model[name] = chat_samples(model, tokenizer, questions,
                                              config.max_new_tokens or CHAT_SAMPLE_TOKENS[config.scale])
        # the skill: the greedy answer checked, and the exact chance that a sampled answer is right
        skill[name] = skill_scores(model, tokenizer, problems)
        metrics |= skill_metrics(name, skill[name])

    # --- lm-eval (--harness lm_eval): the same items as an lm-eval task, and any --benchmarks ---
    if evaluation.with_lm_eval:
        metrics["lm_eval"] = evaluation.lm_eval([chat_choice_task("nano2_answers", tokenizers["sft"], items)],
                                                {"base": base.model_dir, "sft": checkpoint.model_dir})

    # --- the lesson, the chat beside it, and the answers it changed ---
    num_tokens = nll_by_model["sft"][1]  # the SFT model's tokenizer (stage-0's, unchanged by SFT)
    metrics |= {"num_conversations": len(conversations), "num_completion_tokens": num_tokens}
    # The lesson: per held-out problem, the chance that a sampled answer is right, base -> SFT (paired); its
    # per-problem values too, for bench_sft_length's paired comparison of two SFT lengths.
    metrics["lesson"] = lesson("held-out chance of a right answer per problem (its exact probability), base -> SFT",
                               skill["base"]["p_right"], skill["sft"]["p_right"])
    metrics["lesson_items"] = lesson_items(skill["base"]["p_right"], skill["sft"]["p_right"])
    # The chat beside it: the held-out chats' answer content, every token weighing the same (paired per chat).
    metrics["chat"] = pooled_lesson("held-out chat answers' NLL (nats/token, their content tokens: the "
                                    "end-of-turn marker left out), base -> SFT",
                                    content["base"][0], content["sft"][0], content["sft"][1])
    # The answers it changed: the held-out problems whose chance of a right answer SFT raised (lowered) most.
    metrics["changed_answers"] = changed_chances(skill["base"]["p_right"], skill["sft"]["p_right"], [
        {"question": p["question"], "expected": p["answer"], "before": chances(skill["base"], i, p["near_miss"]),
         "after": chances(skill["sft"], i, p["near_miss"])} for i, p in enumerate(problems)])

    # --- save ---
    samples = [sft | {"base_completion": base["completion"]}
               for base, sft in zip(samples_by_model["base"], samples_by_model["sft"])]
    return evaluation.save(
        SFTResults,
        inputs=[checkpoint, dataset, base],
        samples=samples,
        metrics=metrics,
        base_completion_nll=nll_by_model["base"][0],
        sft_completion_nll=nll_by_model["sft"][0],
        base_answer_accuracy=answers_by_model["base"].accuracy,
        sft_answer_accuracy=answers_by_model["sft"].accuracy,
        base_answer_accuracy_mutual_info=answers_by_model["base"].accuracy_mutual_info,
        sft_answer_accuracy_mutual_info=answers_by_model["sft"].accuracy_mutual_info,
        num_conversations=len(conversations),
        num_completion_tokens=num_tokens,
    )


if __name__ == "__main__":
    run(main)
