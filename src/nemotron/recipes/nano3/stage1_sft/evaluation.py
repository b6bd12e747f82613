"""Stage 1, step 3: exact match on held-out problems, base vs SFT, with reasoning on and with it off.

Each held-out question (never trained on: curation split the problems by question) is put to a model
through the nano3 generation prompt, greedy, in both modes of the switch:
- reasoning on: the prompt ends `<|im_start|>assistant\\n<think>\\n`; the model should write its worked
  steps, close `</think>` and give the sum;
- reasoning off: the prompt ends `<think></think>`; the model should answer at once.
A completion scores 1 when the single integer after `</think>` is the sum (`verifiable.final_answer`),
the same checker RL rewards. Reported with the standard error sqrt(p(1-p)/n), so a difference can be
read against the noise.

Inputs: a `Nano3SFTCheckpoint` (`--checkpoint-path`, or stdin); its dataset and base model are found
through the recorded lineage. Output: a `Nano3SFTResults` (samples.json holds every completion).

    python -m nemotron.recipes.nano3.stage1_sft.evaluation --checkpoint-path runs/nano3/stage1_sft/training
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from nemotron.artifact import apply_scale
from nemotron.artifact.upstream import load_upstream
from nemotron.cli import run
from nemotron.data_prep.verifiable import final_answer, read_problems
from nemotron.evaluation.run import EvaluationRun
from nemotron.evaluation.settings import EvaluationSettings
from nemotron.recipes.nano3.artifacts import (
    Nano3PretrainCheckpoint,
    Nano3SFTCheckpoint,
    Nano3SFTDataset,
    Nano3SFTResults,
)

FULL_PROBLEMS = 10_000  # held-out problems scored at full scale; apply_scale gives tiny 100
MAX_NEW_TOKENS = {"on": 112, "off": 8}  # a worked sum with its answer: 60-100 tokens; an answer alone: 1-3


@dataclass
class Config(EvaluationSettings):
    """Held-out exact match, base vs SFT, reasoning on and off."""

    max_problems: int | None = None
    """Held-out problems to score; default per scale (tiny 100)."""
    max_new_tokens: int | None = None
    """Tokens generated per answer; default 112 with reasoning on (a worked sum is 60-100 tokens), 8 off."""
    batch_size: int = 16
    """Prompts per generate call."""
    output_dir: Path = Path("runs/nano3/stage1_sft/evaluation")


def main(config: Config) -> Nano3SFTResults:
    from nemotron.data_prep.chat.nano3 import tokenize_nano3_prompt
    from nemotron.data_prep.tokenizer import IM_END_ID
    from nemotron.evaluation.generation import greedy_samples
    from nemotron.evaluation.lessons import changed_answers, lesson

    # --- inputs: the SFT model, its dataset (the held-out problems) and its base ---
    evaluation = EvaluationRun(config, Nano3SFTCheckpoint)
    sft = evaluation.checkpoint
    dataset = load_upstream(Nano3SFTDataset, path=None, tracked_artifact=None, scale=config.scale, made_from=[sft],
                            stdin=config.piped, flag="--dataset-path")
    base = load_upstream(Nano3PretrainCheckpoint, path=None, tracked_artifact=None, scale=config.scale, made_from=[sft],
                         stdin=False, flag="--checkpoint-path")
    problems = read_problems(dataset.test_problems, config.max_problems or apply_scale(FULL_PROBLEMS, config.scale))

    # --- generate, both models, both modes ---
    scores, samples, per_problem = {}, [], {}
    for name, model, tokenizer in evaluation.models(base=base, sft=sft):
        for mode, thinking in (("on", True), ("off", False)):
            messages = [[{"role": "user", "content": p["question"]}] for p in problems]
            prompts = [tokenize_nano3_prompt(tokenizer, m, enable_thinking=thinking) for m in messages]
            limit = config.max_new_tokens or MAX_NEW_TOKENS[mode]
            completions = greedy_samples(model, tokenizer, prompts, limit, [IM_END_ID], batch_size=config.batch_size)
            # With reasoning off the prompt already closed the thoughts: the completion is the answer.
            answers = [final_answer(c if thinking else "</think>" + c) for c in completions]
            correct = [given == p["answer"] for given, p in zip(answers, problems)]
            scores[f"{name}_exact_match_reasoning_{mode}"] = sum(correct) / len(correct)
            per_problem[name, mode] = (correct, answers)
            samples += [{"model": name, "reasoning": mode, "question": p["question"], "answer": p["answer"],
                         "completion": c, "correct": ok} for p, c, ok in zip(problems[:5], completions, correct)]

    # --- the noise, the lesson and the answers it changed ---
    n = len(problems)
    errors = {f"{key}_stderr": math.sqrt(value * (1 - value) / n) for key, value in scores.items()}
    # The lesson: exact match per held-out question with reasoning on, base -> SFT (paired); and the
    # questions SFT taught the model to answer, or made it get wrong.
    (base_correct, base_answers), (sft_correct, sft_answers) = per_problem["base", "on"], per_problem["sft", "on"]
    lessons = {
        "lesson": lesson("held-out exact match per question (greedy, reasoning on), base -> SFT",
                         base_correct, sft_correct),
        "changed_answers": changed_answers(base_correct, sft_correct, [
            {"question": p["question"], "expected": p["answer"], "before": before, "after": after}
            for p, before, after in zip(problems, base_answers, sft_answers)]),
    }

    # --- save ---
    return evaluation.save(
        Nano3SFTResults, inputs=[sft, dataset, base], samples=samples,
        metrics={**scores, **errors, "num_problems": n, **lessons}, num_problems=n, **scores,
    )


if __name__ == "__main__":
    run(main)
