"""Where a GRPO step's time goes, against an SFT step on the same number of tokens.

One GRPO step of stage 2 (`recipes/nano3/stage2_rl/training.py`), on the nano3 `--scale` MoE model
with a tokenizer trained here on the addition task, broken into its phases:
  generation   sampling `--group-size` completions for each of `--prompts` questions (KV / Mamba cache)
  reward       decoding the completions and scoring them with the checker
  update       the policy forward with gradient, the clipped loss, backward and AdamW
  watch        what the step keeps of it in watch.jsonl at every kept step (`watch.grpo_groups`, as JSON)
and, apart, what the step no longer does: a separate no-grad pass for the old policy's log-probs. With one
update per batch the old policy is the policy, so the step takes the update pass's own log-probs, detached;
this times the pass it saves and checks that it gives the same numbers bit for bit
and an SFT step (forward, masked loss, backward, AdamW) on a batch of the same prompt + completion
sequences, i.e. the same tokens. The ratio shows what RL pays for sampling: generation is sequential,
one token at a time, while SFT sees every token in one pass. Each is timed `--repeats` times, median.

    python benchmarks/bench_grpo_step.py                 # tiny: 4 prompts x 8 completions of 48 tokens
    python benchmarks/bench_grpo_step.py --quick         # 2 prompts x 2 completions of 8 tokens, once
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from nemotron.cpu import torch_threads
from nemotron.data_prep.chat.nano3 import render_nano3, tokenize_nano3_prompt
from nemotron.data_prep.tokenizer import IM_END_ID, load_tokenizer, train_tokenizer
from nemotron.data_prep.verifiable import addition_problems, reward, score
from nemotron.models import nano3
from nemotron.models.loading import quiet_cuda_kernel_notes
from nemotron.training.grpo import clipped_tokens, group_advantages, policy_loss, sample_groups, sampled_logprobs
from nemotron.training.optim import build_optimizer
from nemotron.training.watch import grpo_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="2 x 2 completions of 8 tokens, once: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.group_size, args.max_new_tokens, args.repeats = 2, 2, 8, 1
    quiet_cuda_kernel_notes()
    torch.set_num_threads(torch_threads(args.num_threads))

    problems = addition_problems(200, seed=0)
    folder = Path(tempfile.mkdtemp()) / "tokenizer"
    train_tokenizer([render_nano3(p.messages()) for p in problems], 1024, folder)
    tokenizer = load_tokenizer(folder)
    model = nano3.build_model(nano3.build_config(args.scale, len(tokenizer)), seed=0)
    optimizer = build_optimizer(model, lr=1e-4)
    batch = problems[: args.prompts]
    prompts = [tokenize_nano3_prompt(tokenizer, [{"role": "user", "content": p.question}]) for p in batch]
    repeated = [p for p in prompts for _ in range(args.group_size)]

    phases: dict[str, list[float]] = {name: [] for name in ("generation", "reward", "logprobs", "update", "watch",
                                                                   "sft")}
    identical = True  # the old log-probs pass against the update pass's own, every round
    for repeat in range(args.repeats + 1):  # the first round warms up and is not counted
        clock = time.perf_counter()
        completions = sample_groups(model, prompts, args.group_size, args.max_new_tokens, 1.0, IM_END_ID,
                                    tokenizer.pad_token_id, seed=repeat)
        marks = [time.perf_counter()]
        texts = [tokenizer.decode(c) for c in completions]
        rewards = torch.tensor(score(reward, texts, [p.answer for p in batch for _ in range(args.group_size)]))
        advantages = group_advantages(rewards + torch.rand(len(rewards)), args.group_size)  # non-zero: a real update
        marks.append(time.perf_counter())
        with torch.no_grad():
            old, _ = sampled_logprobs(model, repeated, completions)
        marks.append(time.perf_counter())
        logprobs, mask = sampled_logprobs(model, repeated, completions)
        identical = identical and torch.equal(old, logprobs.detach())
        policy_loss(logprobs, logprobs.detach(), advantages, mask).loss.backward()  # as the step: ratio 1
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
        json.dumps(grpo_groups(tokenizer, [p.question for p in batch], [str(p.answer) for p in batch], completions,
                               rewards, advantages, logprobs, clipped_tokens(logprobs, logprobs, 0.2), None,
                               [len(p) for p in repeated]))
        marks.append(time.perf_counter())
        # SFT on the same sequences: next-token loss on the completion tokens, one pass with gradient
        logprobs, mask = sampled_logprobs(model, repeated, completions)
        (-(logprobs * mask).sum() / mask.sum()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
        if repeat:
            for name, start, end in zip(phases, [clock, *marks[:-1]], marks):
                phases[name].append(end - start)

    median = {name: statistics.median(values) for name, values in phases.items()}
    grpo = sum(median[name] for name in ("generation", "reward", "update"))  # the step without keeping it
    tokens = int(mask.sum().item())
    print(f"nano3 {args.scale} MoE, {args.prompts} prompts x {args.group_size} completions, {tokens} completion tokens "
          f"({len(repeated)} sequences), threads {torch.get_num_threads()}")
    print("| phase | seconds | share of the GRPO step |\n|---|---|---|")
    for name in ("generation", "reward", "update"):
        print(f"| {name} | {median[name]:.3f} | {median[name] / grpo:.0%} |")
    print(f"| GRPO step | {grpo:.3f} | |\n| SFT step, same sequences | {median['sft']:.3f} | |")
    print(f"| a separate old log-probs pass (the step skips it) | {median['logprobs']:.3f} | "
          f"{median['logprobs'] / (grpo + median['logprobs']):.0%} of a step that takes it |")
    print(f"| keeping the step in watch.jsonl (every --watch-every steps) | {median['watch']:.3f} | "
          f"{median['watch'] / grpo:.1%} of the step |")
    print(f"its log-probs equal the update pass's bit for bit, every round: {identical}")
    print(f"GRPO step / SFT step on the same tokens: {grpo / median['sft']:.1f}x")


if __name__ == "__main__":
    main()
