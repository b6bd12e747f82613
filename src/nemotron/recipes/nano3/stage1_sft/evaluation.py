"""Stage 1, step 3: exact match on held-out problems, base vs SFT, with reasoning on and with it off.

Each held-out question (never trained on: curation split the problems by question) is put to a model
through the nano3 generation prompt, greedy, in both modes of the switch:
- reasoning on: the prompt ends `<|im_start|>assistant\\n<think>\\n`; the model should write its worked
  steps, close `</think>` and give the sum;
- reasoning off: the prompt ends `<think></think>`; the model should answer at once.
A completion scores 1 when the single integer after `</think>` is the sum (`verifiable.final_answer`),
the same checker RL rewards. Reported with the standard error sqrt(p(1-p)/n), so a difference can be
read against the noise.

Beside the greedy answers, two exact chances per question, no sampling (`working_chances`): that the model
writes the teacher's right working word for word, and that it writes one with a dropped carry (the teacher's
mistake, imitated). Greedy exact match jumps when the likeliest digit of one column flips; these move
smoothly, so a curve over SFT's length (benchmarks/bench_sft_length.py) shows what the model is still
learning where exact match only jumps.

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
from nemotron.data_prep.verifiable import Addition, final_answer, read_problems
from nemotron.errors import NemotronError
from nemotron.evaluation.benchmarks import mean_and_stderr
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
    from nemotron.evaluation.lessons import changed_answers, lesson, lesson_items

    # --- inputs: the SFT model, its dataset (the held-out problems) and its base ---
    evaluation = EvaluationRun(config, Nano3SFTCheckpoint)
    sft = evaluation.checkpoint
    dataset = load_upstream(Nano3SFTDataset, path=None, tracked_artifact=None, scale=config.scale, made_from=[sft],
                            stdin=config.piped, flag="--dataset-path")
    base = load_upstream(Nano3PretrainCheckpoint, path=None, tracked_artifact=None, scale=config.scale, made_from=[sft],
                         stdin=False, flag="--checkpoint-path")
    problems = read_problems(dataset.test_problems, config.max_problems or apply_scale(FULL_PROBLEMS, config.scale))

    # --- generate, both models, both modes ---
    scores, samples, per_problem, chances = {}, [], {}, {}
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
        chances[name] = working_chances(model, tokenizer, problems, config.batch_size)

    # --- the noise, the lesson and the answers it changed ---
    n = len(problems)
    errors = {f"{key}_stderr": math.sqrt(value * (1 - value) / n) for key, value in scores.items()}
    chance_metrics = {}  # the mean chance per question, with its standard error over the questions
    for name, per_kind in chances.items():
        for kind, values in per_kind.items():
            chance_metrics[f"{name}_p_{kind}"], chance_metrics[f"{name}_p_{kind}_stderr"] = mean_and_stderr(values)
    # The lesson: exact match per held-out question with reasoning on, base -> SFT (paired); and the
    # questions SFT taught the model to answer, or made it get wrong.
    (base_correct, base_answers), (sft_correct, sft_answers) = per_problem["base", "on"], per_problem["sft", "on"]
    lessons = {
        "lesson": lesson("held-out exact match per question (greedy, reasoning on), base -> SFT",
                         base_correct, sft_correct),
        "lesson_items": lesson_items(base_correct, sft_correct),  # per question: bench_sft_length compares runs
        "changed_answers": changed_answers(base_correct, sft_correct, [
            {"question": p["question"], "expected": p["answer"], "before": before, "after": after}
            for p, before, after in zip(problems, base_answers, sft_answers)]),
    }

    # --- save ---
    return evaluation.save(
        Nano3SFTResults, inputs=[sft, dataset, base], samples=samples,
        metrics={**scores, **errors, **chance_metrics, "num_problems": n, **lessons}, num_problems=n, **scores,
    )


def working_chances(model, tokenizer, problems: list[dict], batch_size: int) -> dict[str, list[float]]:
    """Per problem, exact chances under `model` after the reasoning-on prompt: "right_working", of writing the
    teacher's right working (`Addition.worked`), its answer and `<|im_end|>`, token for token; "dropped_carry",
    of writing one of the teacher's mistaken workings (one carry dropped, summed over which)."""
    import torch

    from nemotron.training.logprobs import completion_logprobs, evaluation_mode

    pairs = [(i, kind, prompt, completion) for i, p in enumerate(problems)
             for kind, prompt, completion in workings(tokenizer, p)]
    with evaluation_mode(model), torch.no_grad():
        logps = completion_logprobs(model, [pair[2] for pair in pairs], [pair[3] for pair in pairs],
                                    batch_size=batch_size).double()
    out = {"right_working": [0.0] * len(problems), "dropped_carry": [0.0] * len(problems)}
    for (i, kind, _, _), chance in zip(pairs, logps.exp().tolist()):
        out[kind][i] += chance
    return out


def workings(tokenizer, problem: dict) -> list[tuple[str, list[int], list[int]]]:
    """(kind, prompt ids, completion ids) of a held-out addition problem's right working ("right_working") and
    of each working with one carry dropped ("dropped_carry"): the prompt with reasoning on, the completion the
    assistant turn the nano3 template renders after it, up to and with `<|im_end|>`."""
    from nemotron.data_prep.chat.nano3 import nano3_pieces, tokenize_nano3_prompt
    from nemotron.data_prep.chat.pieces import encode_pieces
    from nemotron.data_prep.tokenizer import IM_END_ID

    question = [{"role": "user", "content": problem["question"]}]
    prompt = tokenize_nano3_prompt(tokenizer, question, enable_thinking=True)
    addition = Addition(int(problem["a"]), int(problem["b"]))
    out = []
    for drop in range(addition.carries + 1):
        reasoning, answer = addition.worked(drop)
        turn = {"role": "assistant", "content": answer, "reasoning_content": reasoning}
        ids, _ = encode_pieces(tokenizer, nano3_pieces([*question, turn]), {})
        if ids[: len(prompt)] != prompt:
            raise NemotronError(f"held-out question {problem['question']!r}: the rendered conversation does not start "
                                "with the generation prompt; the tokenizer's chat template is not nano3's")
        rest = ids[len(prompt):]
        out.append(("dropped_carry" if drop else "right_working", prompt, rest[: rest.index(IM_END_ID) + 1]))
    return out


if __name__ == "__main__":
    run(main)
