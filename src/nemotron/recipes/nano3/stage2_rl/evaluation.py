"""Stage 2, step 2: did RL help? Held-out reward and exact match, SFT vs RL, with the noise next to them.

Both models answer every held-out question (never trained on, by question; not used by RL either) with
reasoning on, two ways, and the checker scores each completion exactly as RL was rewarded:

- held-out reward: `--samples-per-problem` completions per question sampled at `--temperature` (RL's
  sampling temperature), the mean reward per question: the policy's expected reward, the quantity
  GRPO maximises. The RL - SFT gain and its standard error come from the per-question differences (a
  paired comparison: the same questions), and the verdict is whether the gain exceeds two of them.
- exact match: one greedy answer per question (what a user of the model gets), with its standard
  error, and the greedy reward's paired gain beside it.
- the mistakes: the share of sampled answers that drop a carry (the teacher's mistake, which SFT
  imitates), that add a carry that is not there (86 + 90 -> 186: what RL was seen to teach) and that are
  wrong otherwise, per model (`Addition.mistake`), so a mistake RL teaches is counted, not only one it
  unlearns.

Input: a `Nano3RLCheckpoint` (`--checkpoint-path`, or stdin); the SFT model and the problems through
the recorded lineage. Output: a `Nano3RLResults`.

    python -m nemotron.recipes.nano3.stage2_rl.evaluation --checkpoint-path runs/nano3/stage2_rl/training
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from nemotron.artifact import apply_scale
from nemotron.artifact.upstream import load_upstream
from nemotron.cli import run
from nemotron.data_prep.verifiable import ADDITION_MISTAKES, Addition, final_answer, read_problems, reward
from nemotron.errors import NemotronError
from nemotron.evaluation.run import EvaluationRun
from nemotron.evaluation.settings import EvaluationSettings
from nemotron.recipes.nano3.artifacts import Nano3RLCheckpoint, Nano3RLResults, Nano3SFTCheckpoint, Nano3SFTDataset

FULL_PROBLEMS = 20_000  # held-out problems at full scale; apply_scale gives tiny 200 (all of tiny's)


@dataclass
class Config(EvaluationSettings):
    """Held-out reward and exact match, SFT vs RL."""

    max_problems: int | None = None
    """Held-out problems to score; default per scale (tiny 200). Measured at tiny from the 400-step SFT
    model after 20 GRPO steps (the default then), 200 problems: the sampled reward's gain +0.060 had a standard
    error of 0.028 with 1 sample per question and 0.017 with 4; the greedy one, +0.074 ± 0.031."""
    samples_per_problem: int = 4
    """Completions sampled per question for the held-out reward (more: a smaller standard error)."""
    temperature: float = 1.0
    """Sampling temperature of the held-out reward: GRPO's (training.py --temperature)."""
    max_new_tokens: int = 112
    """Tokens generated per answer (reasoning on; a worked sum with its answer is 60-100 tokens)."""
    batch_size: int = 64
    """Prompts per generate call (x --samples-per-problem rows when sampling)."""
    output_dir: Path = Path("runs/nano3/stage2_rl/evaluation")


def main(config: Config) -> Nano3RLResults:
    from nemotron.data_prep.chat.nano3 import tokenize_nano3_prompt
    from nemotron.data_prep.tokenizer import IM_END_ID
    from nemotron.evaluation.generation import greedy_samples
    from nemotron.evaluation.lessons import changed_answers, lesson
    from nemotron.training.grpo import sample_groups

    # --- inputs: the RL model, the SFT model it started from, and the held-out problems ---
    if config.samples_per_problem < 1 or not config.temperature > 0:
        raise NemotronError(f"--samples-per-problem {config.samples_per_problem} / --temperature {config.temperature}: "
                            "need at least 1 sample per question and a temperature above 0")
    evaluation = EvaluationRun(config, Nano3RLCheckpoint)
    rl = evaluation.checkpoint
    sft = load_upstream(Nano3SFTCheckpoint, path=None, tracked_artifact=None, scale=config.scale, made_from=[rl],
                        stdin=False, flag="--checkpoint-path")
    dataset = load_upstream(Nano3SFTDataset, path=None, tracked_artifact=None, scale=config.scale, made_from=[rl],
                            stdin=False, flag="--checkpoint-path")
    problems = read_problems(dataset.test_problems, config.max_problems or apply_scale(FULL_PROBLEMS, config.scale))

    # --- per model: the greedy answers, and the sampled ones ---
    greedy, sampled, exact, samples, given = {}, {}, {}, [], {}
    additions = [Addition(p["a"], p["b"]) for p in problems]
    # sampled answers per model and kind of mistake: the teacher's (a dropped carry), the one RL was seen to
    # teach (a carry that is not there), any other wrong answer
    mistakes = {name: dict.fromkeys(ADDITION_MISTAKES, 0) for name in ("sft", "rl")}
    for name, model, tokenizer in evaluation.models(sft=sft, rl=rl):
        prompts = [tokenize_nano3_prompt(tokenizer, [{"role": "user", "content": p["question"]}]) for p in problems]
        # greedy: one answer per question
        completions = greedy_samples(model, tokenizer, prompts, config.max_new_tokens, [IM_END_ID],
                                     batch_size=config.batch_size)
        greedy[name] = [reward(c, p["answer"]) for c, p in zip(completions, problems)]
        given[name] = [final_answer(c) for c in completions]
        exact[name] = [float(a == p["answer"]) for a, p in zip(given[name], problems)]
        samples += [{"model": name, "question": p["question"], "answer": p["answer"], "completion": c}
                    for p, c in zip(problems[:5], completions)]
        # sampled: the mean reward of `samples_per_problem` completions per question
        sampled[name] = []
        k = config.samples_per_problem
        for start in range(0, len(prompts), config.batch_size):
            batch = problems[start : start + config.batch_size]
            ids = sample_groups(model, prompts[start : start + config.batch_size], k, config.max_new_tokens,
                                config.temperature, IM_END_ID, tokenizer.pad_token_id, seed=config.seed + start)
            texts = [tokenizer.decode([t for t in c if t != IM_END_ID]) for c in ids]
            scores = [reward(t, batch[i // k]["answer"]) for i, t in enumerate(texts)]
            sampled[name] += [sum(scores[i * k : (i + 1) * k]) / k for i in range(len(batch))]
            for i, text in enumerate(texts):
                if (kind := additions[start + i // k].mistake(final_answer(text))) is not None:
                    mistakes[name][kind] += 1

    # --- the gains with their noise, the lesson and the answers it changed ---
    n = len(problems)
    mean = {name: sum(values) / n for name, values in sampled.items()}
    match = {name: sum(values) / n for name, values in exact.items()}
    gain, gain_stderr = paired_gain(sampled["rl"], sampled["sft"])
    greedy_gain, greedy_gain_stderr = paired_gain(greedy["rl"], greedy["sft"])
    metrics = {
        "sft_reward": mean["sft"], "rl_reward": mean["rl"],
        "reward_gain": gain, "reward_gain_stderr": gain_stderr,
        "gain_above_two_stderr": bool(gain > 2 * gain_stderr and gain > 0),
        "samples_per_problem": config.samples_per_problem, "temperature": config.temperature,
        "sft_exact_match": match["sft"], "rl_exact_match": match["rl"],
        **{f"{k}_exact_match_stderr": math.sqrt(v * (1 - v) / n) for k, v in match.items()},
        "sft_greedy_reward": sum(greedy["sft"]) / n, "rl_greedy_reward": sum(greedy["rl"]) / n,
        "greedy_reward_gain": greedy_gain, "greedy_reward_gain_stderr": greedy_gain_stderr,
        "num_problems": n,
        # the share of sampled answers of each kind of mistake, per model: sft_dropped_carry_share, ...
        **{f"{name}_{kind}_share": count / (n * config.samples_per_problem)
           for name, kinds in mistakes.items() for kind, count in kinds.items()},
        # The lesson (the reward GRPO maximised, per held-out question, SFT -> RL, paired), and the
        # questions whose greedy answer RL fixed or broke.
        "lesson": lesson(f"held-out reward per question (mean of {config.samples_per_problem} samples at "
                         f"temperature {config.temperature:g}), SFT -> RL", sampled["sft"], sampled["rl"]),
        "changed_answers": changed_answers(exact["sft"], exact["rl"], [
            {"question": p["question"], "expected": p["answer"], "before": before, "after": after}
            for p, before, after in zip(problems, given["sft"], given["rl"])]),
    }

    # --- save ---
    return evaluation.save(
        Nano3RLResults, inputs=[rl, sft, dataset], samples=samples, metrics=metrics,
        sft_reward=mean["sft"], rl_reward=mean["rl"], sft_exact_match=match["sft"], rl_exact_match=match["rl"],
        num_problems=n,
    )


def paired_gain(after: list[float], before: list[float]) -> tuple[float, float]:
    """Mean of the per-question differences and its standard error (same questions, so paired)."""
    from nemotron.evaluation.lessons import lesson

    record = lesson("paired gain", before, after)
    return record["gain"], record["standard_error"]


if __name__ == "__main__":
    run(main)
