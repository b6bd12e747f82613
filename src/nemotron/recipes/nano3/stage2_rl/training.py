"""Stage 2, step 1: reinforcement learning from verifiable rewards with GRPO, from the SFT model.

Nemotron 3 Nano's RL stage (NeMo-RL's GRPO) on a task a program can check. Each step, visibly below:
1. generation: `--completions-per-step` / `--group-size` training questions (a seeded, resumable order),
   each sampled `--group-size` times from the current policy with reasoning on (temperature 1);
2. reward: the checker scores every completion (`--reward-function`, default
   `nemotron.data_prep.verifiable:reward`: 1 for the right sum after `</think>`, +0.1 if well formed);
3. advantages: each reward against its own group's mean and std (`nemotron.training.grpo`);
4. log-probs: of the sampled tokens under the frozen SFT model when `--kl-beta` > 0 (the reference);
5. update: the clipped per-token surrogate (+ beta x KL, + the MoE balancing loss), backward, clip, AdamW.
   One update per batch, so the ratio to the sampling ("old") policy is 1 and PPO's clip never acts: the
   old log-probs are the update pass's own, detached, not a second pass (the loop says why).

Input: a `Nano3SFTCheckpoint` (`--checkpoint-path`, or stdin); the prompts from the `Nano3RLDataset` of
stage-2 data curation (`--dataset-path`, as the recipe runs it), else its SFT dataset's training problems
(recorded lineage). Output: a `Nano3RLCheckpoint`; the log has per step the mean reward, the share
correct, the share of groups whose rewards differ (`informative_groups`: the others have zero
advantages and teach nothing), the KL, the clipped share and the generation / update seconds.

    python -m nemotron.recipes.nano3.stage2_rl.training --checkpoint-path runs/nano3/stage1_sft/training

Supports: resume after a kill (sampling is seeded per step, so a resumed run samples what the
uninterrupted one did), DDP under torchrun (each rank samples its share of the prompts), `--kl-beta`.
Refuses, in one line each: a batch that is not whole groups (`--completions-per-step` not a multiple of
`--group-size`, or groups that do not split over the processes), a reward function that cannot be
imported or that raises or returns a non-number, a checkpoint that is not a nano3 SFT model.
"""

from __future__ import annotations

import importlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

from nemotron.artifact.fields import bookkeeping
from nemotron.artifact.upstream import load_upstream
from nemotron.cli import per_scale, run
from nemotron.errors import NemotronError
from nemotron.recipes.nano3.artifacts import Nano3RLCheckpoint, Nano3RLDataset, Nano3SFTCheckpoint, Nano3SFTDataset
from nemotron.training.settings import OptimizerSettings, TrainingSettings

# Optimizer steps per scale. Tiny: 40 steps of 4 questions x 8 samples (generation dominates a GRPO step, see
# benchmarks/bench_grpo_step.py); 160 of the 800 training questions. Measured from an SFT model that imitated its
# teacher's dropped carries (200 held-out sums, sampled reward, paired): 20 steps at lr 2e-5 +0.019 ± 0.011; 40 at
# 5e-5 +0.066 ± 0.014; 60 at 3e-5 +0.059 ± 0.015; 40 at 1e-4 +0.046 ± 0.021 (its greedy answers no better).
STEPS = {"tiny": 40, "small": 300, "medium": 1000, "full": 5000}


@dataclass
class Config(TrainingSettings, OptimizerSettings):
    """GRPO on the verifiable addition task, starting from the nano3 SFT model."""

    checkpoint_path: Path | None = None
    """The Nano3SFTCheckpoint to start from; default: read it from stdin."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference such as `nano3sftcheckpoint:latest`."""
    steps: per_scale("Optimizer steps", STEPS) = None
    completions_per_step: int = 32
    """Completions sampled per step, all processes together: whole groups (a multiple of --group-size)."""
    group_size: int = 8
    """Completions sampled per question; advantages are normalised within each group. Chosen over seeds: with
    groups of 4 (16 completions a step) RL's held-out gain was 0.4 standard errors in one seed of six (seed 3;
    neither a KL pull of 0.05 nor a rate of 3e-5 rescued it); groups of 8 gave that seed 4.3 and seeds 0-4
    4.3 to 7.5, for about twice the step's time. Larger groups hold reward variance more often (the
    `informative_groups` log): from an SFT model right on 3% of its samples, 18% of groups of 4 did, 55% of 16."""
    max_new_tokens: int = 96
    """Tokens sampled per completion (a worked two-digit sum with its answer is 60-100 tokens)."""
    temperature: float = 1.0
    """Sampling temperature."""
    # A constant rate (no warmup, no decay); STEPS has the measurements that chose it: 1e-4 moves the policy
    # away from what SFT got right faster than the sparse reward teaches it.
    lr: float = 5e-5
    min_lr_ratio: float = 1.0
    warmup_steps: int | None = 0
    weight_decay: float = 0.0  # RL nudges a fine-tuned model: nothing to regularise towards zero (not measured)
    clip_eps: float = 0.2
    """PPO clip range of the probability ratio (with one update per batch the ratio is 1: never clipped)."""
    kl_beta: float = 0.0
    """Weight of the KL to the SFT model (0: no reference model is kept)."""
    reward_function: str = "nemotron.data_prep.verifiable:reward"
    """module:function(completion, answer) -> float."""
    dataset_path: Path | None = None
    """The Nano3RLDataset (stage-2 data_curation) whose prompts GRPO samples; default: the SFT dataset's
    training problems, the same prompts in the same order."""
    watch_every: int = bookkeeping(1)
    """Every this many steps and at the last, keep in watch.jsonl each group this process sampled (rank 0's: all of
    them on one process): the prompt; per sample its text, tokens, reward, verdict and advantage; per token its
    log-prob under the policy (and the reference with --kl-beta) and whether its ratio was clipped. A kept step
    holds at most --completions-per-step x --max-new-tokens tokens (32 x 96 by default)."""
    eval_every: int = bookkeeping(10)
    """Unused by this step (the held-out numbers are stage-2 evaluation's); kept for the shared settings."""
    checkpoint_every: int = bookkeeping(10)
    """Checkpoint every this many steps (and at the last)."""
    output_dir: Path = Path("runs/nano3/stage2_rl/training")
    """The run folder: checkpoints, metrics.jsonl, the final model/ and the artifact."""
    seed: int = 0
    """Seeds the order of the questions and every step's sampling."""


def main(config: Config) -> Nano3RLCheckpoint:
    import torch

    from nemotron.data_prep.chat.nano3 import tokenize_nano3_prompt
    from nemotron.data_prep.tokenizer import IM_END_ID, load_tokenizer
    from nemotron.data_prep.verifiable import check_reward_function, read_problems, score
    from nemotron.models import nano3
    from nemotron.models.loading import load_model
    from nemotron.models.mamba2 import use_training_scan
    from nemotron.training.distributed import all_reduce_mean, sum_over_ranks
    from nemotron.training.grpo import (
        check_group_size,
        clipped_tokens,
        group_advantages,
        policy_loss,
        sample_groups,
        sampled_logprobs,
    )
    from nemotron.training.moe import ExpertBalance
    from nemotron.training.optim import adamw_with_schedule
    from nemotron.training.run import TrainingRun
    from nemotron.training.samplers import EpochSampler
    from nemotron.training.watch import grpo_groups

    # --- inputs and refusals, before any work ---
    if config.hands_off:
        raise NemotronError("--scale full: RL at scale is NeMo-RL's GRPO (not installable here); "
                            "use --scale tiny|small")
    reward_fn = import_reward(config.reward_function)
    check_reward_function(reward_fn)
    check_group_size(config.completions_per_step, config.group_size, flag="--completions-per-step")
    sft = Nano3SFTCheckpoint.load_input(config, "checkpoint")
    dataset = load_upstream(Nano3SFTDataset, path=None, tracked_artifact=None, scale=config.scale, made_from=[sft],
                            stdin=False, flag="--checkpoint-path")
    prompts_dataset = (Nano3RLDataset.load(path=config.dataset_path, scale=config.scale, flag="--dataset-path")
                       if config.dataset_path is not None else None)
    steps = config.steps or STEPS[config.scale]
    training = TrainingRun(config, inputs=[sft, dataset, *([prompts_dataset] if prompts_dataset else [])], steps=steps,
                           name="grpo")
    world_size = training.info.world_size
    prompts_per_step = config.completions_per_step // config.group_size
    if prompts_per_step % world_size:
        raise NemotronError(f"--completions-per-step {config.completions_per_step} makes {prompts_per_step} groups, "
                            f"which do not split over {world_size} processes; use a multiple of {world_size} groups")
    problems = (read_problems(dataset.train_problems) if prompts_dataset is None
                else [p for path in prompts_dataset.prompt_files for p in read_problems(path)])
    tokenizer = load_tokenizer(sft.model_dir)

    # --- the policy (trained), the reference (frozen SFT model, only with a KL term) ---
    policy = use_training_scan(training.load_model(sft.model_dir))  # CPU: Mamba-2's chunked scan (models/mamba2.py)
    forward, ddp, autocast = training.prepare(policy)
    reference = load_model(sft.model_dir)[0] if config.kl_beta else None
    # The balancing loss stays on; the expert bias is frozen (the policy should not re-route during RL).
    balance = ExpertBalance(policy, policy.config.num_experts_per_tok, nano3.AUX_LOSS_COEFF, 0.0)
    optimizer, scheduler = adamw_with_schedule(policy, config, steps)
    questions = EpochSampler(problems, prompts_per_step // world_size, 1, config.seed, training.info.rank, world_size)

    # --- training loop ---
    state = training.resume(policy, optimizer, scheduler, questions, tokenizer)
    # Wall time of the two halves of a step, summed over this process's steps: reported with the run's metrics,
    # not per step in metrics.jsonl, whose bytes the digest covers (a timing there made every run's digest new).
    seconds = {"generation_seconds": 0.0, "update_seconds": 0.0}
    for step in range(state.step + 1, steps + 1):
        # 1. generation: a group of completions per question, sampled with a per-step seed
        started = time.perf_counter()
        batch = questions.next_step()[0]
        prompts = [tokenize_nano3_prompt(tokenizer, [{"role": "user", "content": p["question"]}]) for p in batch]
        completions = sample_groups(policy, prompts, config.group_size, config.max_new_tokens, config.temperature,
                                    IM_END_ID, tokenizer.pad_token_id, seed=config.seed * 1_000_003 + step * 101 +
                                    training.info.rank)
        generated = time.perf_counter()
        seconds["generation_seconds"] += generated - started
        # 2. reward from the checker; 3. advantages within each group
        texts = [tokenizer.decode([t for t in c if t != IM_END_ID]) for c in completions]
        answers = [p["answer"] for p in batch for _ in range(config.group_size)]
        rewards = torch.tensor(score(reward_fn, texts, answers))
        advantages = group_advantages(rewards, config.group_size)
        # 4. log-probs of the sampled tokens under the frozen SFT model, when --kl-beta > 0 (the reference)
        repeated = [p for p in prompts for _ in range(config.group_size)]
        with torch.no_grad():
            ref = sampled_logprobs(reference, repeated, completions)[0] if reference is not None else None
        # 5. update: clipped surrogate (+ KL, + the experts' balancing loss). One update per batch: the policy
        # being updated is the one that sampled, so pi_old is pi, the ratio pi / pi_old is exactly 1 and the clip
        # never acts (PPO's clip matters from a batch's second update on). So "old" is this pass's own
        # log-probs, detached: the ratio's value is 1 and its gradient the policy gradient. A separate no-grad
        # pass for it gave the same numbers bit for bit and cost a share of every step (docs/performance.md).
        with autocast, balance.recording() as routings:
            logprobs, mask = sampled_logprobs(forward, repeated, completions)
            old = logprobs.detach()
            parts = policy_loss(logprobs, old, advantages, mask, config.clip_eps, ref, config.kl_beta)
            total = parts.loss + balance.loss(routings, len(repeated))
        total.backward()
        # AdamW at this step's rate after clipping the gradient's global norm (the norm before clipping is
        # logged), the schedule's next rate, the gradients cleared (the expert bias is frozen: a no-op here).
        lr = scheduler.get_last_lr()[0]
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip or math.inf).item()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        balance.after_step()

        correct = (rewards >= 1.0).float().mean()
        # DAPO's point: a group whose rewards are all equal has zero advantages and teaches nothing
        informative = (rewards.view(-1, config.group_size).std(dim=1) > 0).float().mean()
        training.record(step, loss=all_reduce_mean(parts.loss.detach()).item(), lr=lr, grad_norm=grad_norm,
                        tokens=round(sum_over_ranks(float(mask.sum()))), reward=all_reduce_mean(rewards.mean()).item(),
                        correct=all_reduce_mean(correct).item(),
                        informative_groups=all_reduce_mean(informative).item(), kl=parts.kl, clipped=parts.clipped,
                        **balance.log())
        seconds["update_seconds"] += time.perf_counter() - generated
        if training.is_main and training.is_due(step, config.watch_every):  # what it sampled and scored (browser)
            training.keep(step, "grpo", groups=grpo_groups(
                tokenizer, [p["question"] for p in batch], [str(p["answer"]) for p in batch], completions, rewards,
                advantages, logprobs, clipped_tokens(logprobs, old, config.clip_eps), ref, [len(p) for p in repeated]))
        training.checkpoint_if_due(step)

    return training.finish(Nano3RLCheckpoint, metrics={"group_size": config.group_size, **seconds})


def import_reward(spec: str):
    """`module:function` -> the function; anything else is one line naming the flag."""
    module_name, _, name = spec.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise NemotronError(f"--reward-function {spec!r} cannot be imported ({type(error).__name__}: {error}); "
                            "give module:function, e.g. nemotron.data_prep.verifiable:reward") from None
    if not callable(function):
        raise NemotronError(f"--reward-function {spec!r} is not a function")
    return function


if __name__ == "__main__":
    run(main)
