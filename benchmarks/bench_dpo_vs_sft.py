"""What one DPO step costs next to one SFT step, and what precomputing the reference log-probs saves.

All three steps train the tiny nano2 model on the same shapes: `--batch` examples whose prompt and
answer are `--prompt-len` and `--answer-len` tokens (random ids; the cost does not depend on them).

    sft                   forward + backward + AdamW over B sequences, loss on the answer tokens
    dpo (precomputed ref) forward + backward + AdamW over 2B sequences (chosen and rejected answer of
                          each pair, one concatenated batch), reference log-probs read from a tensor:
                          what nemotron.recipes.nano2.stage2_alignment.training does
    dpo (ref each step)   the same plus a no-grad forward of a frozen reference model over the 2B
                          sequences at every step: the textbook loop, three model passes per step

DPO has two answers per example, so the expected cost is about 2x SFT, not the ~2.7x of the textbook
loop (a forward is roughly a third of forward + backward). The three steps run round-robin, so a busy
machine slows all three alike; the median of each is printed with the ratios, and the load average.

    python benchmarks/bench_dpo_vs_sft.py [--steps 12] [--batch 8] [--prompt-len 32] [--answer-len 32] [--threads 1]
    python benchmarks/bench_dpo_vs_sft.py --quick     # 1 timed step of 2 examples x 8 + 8 tokens
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from transformers.utils import logging as hf_logging

from nemotron.models.nano2 import VOCAB_SIZES, build_config, build_model
from nemotron.training.dpo import dpo_loss
from nemotron.training.logprobs import completion_logprobs, pair_logprobs
from nemotron.training.optim import build_optimizer

BETA = 0.1


def sft_step(model, optimizer, prompts: torch.Tensor, answers: torch.Tensor) -> None:
    """Completion-only cross-entropy on B sequences: the stage-1 training step."""
    sequences = torch.cat([prompts, answers], dim=1)
    logits = model(input_ids=sequences[:, :-1], use_cache=False).logits
    labels = sequences[:, 1:].clone()
    labels[:, : prompts.shape[1] - 1] = -100  # only the answer tokens are targets (the usual ignore_index)
    loss = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def dpo_step(model, optimizer, prompts, chosen, rejected, reference: tuple | torch.nn.Module) -> None:
    """One DPO step; `reference` is either precomputed (chosen, rejected) log-probs or a frozen model."""
    batch = len(prompts)
    prompts, chosen, rejected = prompts.tolist(), chosen.tolist(), rejected.tolist()
    if isinstance(reference, torch.nn.Module):
        reference = pair_logprobs(reference, prompts, chosen, rejected, batch_size=2 * batch)
    policy = completion_logprobs(model, [*prompts, *prompts], [*chosen, *rejected], batch_size=2 * batch)
    loss, _, _ = dpo_loss(policy[:batch], policy[batch:], *reference, beta=BETA)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="timed steps of each kind (after 2 warm-up)")
    parser.add_argument("--batch", type=int, default=8, help="examples (SFT) or pairs (DPO) per step")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--answer-len", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1, as the tiny recipe trains)")
    parser.add_argument("--quick", action="store_true", help="1 step, tiny shapes: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.batch, args.prompt_len, args.answer_len = 1, 2, 8, 8
    hf_logging.set_verbosity_error()  # the "falling back to the PyTorch implementation" notices
    torch.set_flush_denormal(True)
    torch.set_num_threads(args.threads)

    config = build_config("tiny", VOCAB_SIZES["tiny"])
    g = torch.Generator().manual_seed(0)
    prompts, chosen, rejected = (
        torch.randint(5, config.vocab_size, (args.batch, length), generator=g)
        for length in (args.prompt_len, args.answer_len, args.answer_len)
    )

    # Three identical models (same seed) with their own optimizers, so no step sees another's updates.
    models = {name: build_model(config, seed=0).train() for name in ("sft", "dpo", "dpo_ref_each_step")}
    optimizers = {name: build_optimizer(model, lr=1e-5) for name, model in models.items()}
    reference_model = copy.deepcopy(models["dpo"]).eval().requires_grad_(False)
    precomputed = pair_logprobs(reference_model, prompts.tolist(), chosen.tolist(), rejected.tolist())
    steps = {
        "sft": lambda: sft_step(models["sft"], optimizers["sft"], prompts, chosen),
        "dpo": lambda: dpo_step(models["dpo"], optimizers["dpo"], prompts, chosen, rejected, precomputed),
        "dpo_ref_each_step": lambda: dpo_step(
            models["dpo_ref_each_step"], optimizers["dpo_ref_each_step"], prompts, chosen, rejected, reference_model
        ),
    }

    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(2 + args.steps):  # round-robin: machine load hits every kind of step alike
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values[2:]) for name, values in times.items()}

    print(
        f"tiny nano2, {args.batch} examples x ({args.prompt_len} prompt + {args.answer_len} answer) tokens, "
        f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}, median of {args.steps} steps"
    )
    print(f"  SFT step                          {median['sft'] * 1e3:8.1f} ms")
    for name, label in (("dpo", "precomputed reference"), ("dpo_ref_each_step", "reference each step  ")):
        print(f"  DPO step, {label}    {median[name] * 1e3:8.1f} ms   {median[name] / median['sft']:.2f}x SFT")
    print(f"  precomputing saves {1 - median['dpo'] / median['dpo_ref_each_step']:.0%} of each DPO step")


if __name__ == "__main__":
    main()
