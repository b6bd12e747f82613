"""Stage 2, step 2: did RL help? Held-out reward and exact match, SFT vs RL, with the noise next to them.

Both models answer every held-out question (never trained on, by question; not used by RL either)
greedily with reasoning on; the checker scores each completion exactly as RL was rewarded. Reported:
mean reward and exact match of each model, and the RL - SFT difference of the mean reward with its
standard error from the per-question differences (a paired comparison: the same questions), and
whether that difference exceeds two standard errors.

Input: a `Nano3RLCheckpoint` (`--checkpoint-path`, or stdin); the SFT model and the problems through
the recorded lineage. Output: a `Nano3RLResults`.

    python -m nemotron.recipes.nano3.stage2_rl.evaluation --checkpoint-path runs/nano3/stage2_rl/training
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nemotron import atomic
from nemotron.artifact import apply_scale, mark_unfinished
from nemotron.artifact.upstream import load_upstream
from nemotron.cli import run
from nemotron.data_prep.verifiable import final_answer, reward
from nemotron.recipes.nano3.artifacts import Nano3RLCheckpoint, Nano3RLResults, Nano3SFTCheckpoint, Nano3SFTDataset

FULL_PROBLEMS = 10_000  # held-out problems at full scale; apply_scale gives tiny 100


@dataclass
class Config:
    """Held-out reward and exact match, SFT vs RL."""

    checkpoint_path: Path | None = None
    """The Nano3RLCheckpoint folder; default: read it from stdin."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference such as `nano3rlcheckpoint:latest`."""
    max_problems: int | None = None
    """Held-out problems to score; default per scale (tiny 100)."""
    max_new_tokens: int = 112
    """Tokens generated per answer (reasoning on; a worked sum with its answer is 60-100 tokens)."""
    batch_size: int = 16
    """Prompts per generate call."""
    num_threads: int | None = None
    """torch threads; default: the cores this process may use."""
    output_dir: Path = Path("runs/nano3/stage2_rl/evaluation")
    """Where the results and samples.json are written."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes how many problems are scored."""
    seed: int = 0
    """Unused (greedy decoding); recorded for lineage."""


def main(config: Config) -> Nano3RLResults:
    from nemotron.data_prep.nano3_chat import tokenize_nano3_prompt
    from nemotron.data_prep.tokenizer import IM_END_ID
    from nemotron.evaluation.generation import greedy_samples
    from nemotron.models.loading import load_model
    from nemotron.training.compute import evaluation_threads

    rl = Nano3RLCheckpoint.load_input(config, "checkpoint")
    started = time.perf_counter()
    sft = load_upstream(Nano3SFTCheckpoint, path=None, reference=None, scale=config.scale, made_from=[rl],
                        stdin=False, flag="--checkpoint-path")
    dataset = load_upstream(Nano3SFTDataset, path=None, reference=None, scale=config.scale, made_from=[rl],
                            stdin=False, flag="--checkpoint-path")
    problems = [json.loads(line) for line in dataset.test_problems.read_text().splitlines()]
    problems = problems[: config.max_problems or apply_scale(FULL_PROBLEMS, config.scale)]

    rewards, exact, samples = {}, {}, []
    with evaluation_threads(config.num_threads):
        for name, checkpoint in (("sft", sft), ("rl", rl)):
            model, tokenizer = load_model(checkpoint.model_dir)
            prompts = [tokenize_nano3_prompt(tokenizer, [{"role": "user", "content": p["question"]}]) for p in problems]
            completions = greedy_samples(model, tokenizer, prompts, config.max_new_tokens, [IM_END_ID],
                                         batch_size=config.batch_size)
            rewards[name] = [reward(c, p["answer"]) for c, p in zip(completions, problems)]
            exact[name] = [float(final_answer(c) == p["answer"]) for c, p in zip(completions, problems)]
            samples += [{"model": name, "question": p["question"], "answer": p["answer"], "completion": c}
                        for p, c in zip(problems[:5], completions)]

    out = mark_unfinished(config.output_dir)
    atomic.write_text(out / "samples.json", json.dumps(samples, indent=2, ensure_ascii=False) + "\n")
    n = len(problems)
    mean = {name: sum(values) / n for name, values in rewards.items()}
    match = {name: sum(values) / n for name, values in exact.items()}
    differences = [r - s for r, s in zip(rewards["rl"], rewards["sft"])]
    gain = sum(differences) / n
    spread = math.sqrt(sum((d - gain) ** 2 for d in differences) / max(n - 1, 1))
    gain_stderr = spread / math.sqrt(n)
    metrics = {
        "sft_reward": mean["sft"], "rl_reward": mean["rl"],
        "sft_exact_match": match["sft"], "rl_exact_match": match["rl"],
        **{f"{k}_exact_match_stderr": math.sqrt(v * (1 - v) / n) for k, v in match.items()},
        "reward_gain": gain, "reward_gain_stderr": gain_stderr,
        "gain_above_two_stderr": bool(gain > 2 * gain_stderr and gain > 0),
        "num_problems": n, "wall_seconds": time.perf_counter() - started,
    }
    return Nano3RLResults(
        path=out, config=asdict(config), scale=config.scale, seed=config.seed, inputs=[rl, sft, dataset],
        samples_path=out / "samples.json", sft_reward=mean["sft"], rl_reward=mean["rl"], sft_exact_match=match["sft"],
        rl_exact_match=match["rl"], num_problems=n, metrics=metrics,
    ).save()


if __name__ == "__main__":
    run(main)
