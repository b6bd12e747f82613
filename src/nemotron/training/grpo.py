"""The maths of GRPO (Group Relative Policy Optimization; Shao et al., 2024, DeepSeekMath, arXiv:2402.03300),
as NeMo-RL runs it for Nemotron 3 Nano's RL stage.

For each prompt the policy samples a *group* of G completions; a checker scores each one. No value
network: a completion's advantage is its reward measured against its own group,

    A_i = (r_i - mean(r_group)) / (std(r_group) + eps)                                    (group_advantages)

so a prompt where every completion scores the same teaches nothing (all A_i = 0), and a prompt where
one of eight is right pushes that one up hard. Every token of completion i shares A_i. The update is
PPO's clipped surrogate (Schulman et al., 2017) per token, with the ratio to the policy that sampled:

    ratio_t = exp(logp_t - logp_old_t)
    loss    = - mean over completion tokens of min(ratio_t A, clip(ratio_t, 1 - eps, 1 + eps) A)
              + beta x KL(policy || reference)                                            (policy_loss)

The KL term keeps the policy near the SFT model; it uses the k3 estimator (Schulman, 2020,
"Approximating KL divergence"): exp(ref - logp) - (ref - logp) - 1, non-negative and unbiased.
Tokens are averaged over the whole batch (every completion token weighs the same, DAPO, arXiv:2503.14476),
not per completion first, so long wrong answers are not under-penalised; and over the whole batch of
every rank together: the sum is divided by the completion tokens of all ranks (`distributed.sum_over_ranks`),
so two processes update the policy as one process does with the same completions (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nemotron.errors import NemotronError
from nemotron.training.distributed import sum_over_ranks, world_size


def check_group_size(batch_size: int, group_size: int, flag: str = "--completions-per-step") -> None:
    """A batch of completions is whole groups: refuse sizes that do not divide, in one line."""
    if group_size < 2:
        raise NemotronError(f"--group-size {group_size}: a group needs at least 2 completions to compare; "
                            "use 2 or more")
    if batch_size % group_size:
        raise NemotronError(f"a batch of {batch_size} completions is not whole groups of --group-size {group_size}; "
                            f"make {flag} a multiple of the group size")


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """(batch,) rewards, groups consecutive -> (batch,) advantages normalised within each group."""
    check_group_size(rewards.numel(), group_size, flag="the number of rewards")
    groups = rewards.float().view(-1, group_size)
    mean = groups.mean(dim=1, keepdim=True)
    std = groups.std(dim=1, keepdim=True, unbiased=False)  # the population std of the group
    return ((groups - mean) / (std + eps)).view(-1)


@dataclass
class PolicyLossParts:
    loss: torch.Tensor  # what to call backward() on
    policy: float  # the clipped surrogate part
    kl: float  # mean k3 KL to the reference (0.0 without one)
    clipped: float  # share of completion tokens whose ratio was clipped


def policy_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    clip_eps: float = 0.2, ref_logprobs: torch.Tensor | None = None, kl_beta: float = 0.0,
) -> PolicyLossParts:
    """GRPO's loss. logprobs / old / ref: (batch, tokens) log-probabilities of the sampled tokens;
    advantages: (batch,); mask: (batch, tokens), 1 on completion tokens (never on the prompt or padding).

    Under torchrun every rank calls it once per step (it sums the token count over the ranks): `loss` is
    this rank's share, W x its sum / the tokens of all ranks, so DDP's average of gradients is the mean
    over every completion token of the step; `policy`, `kl` and `clipped` are the means over all ranks."""
    mask = mask.to(logprobs.dtype)
    tokens_per_rank = max(sum_over_ranks(float(mask.sum())), 1.0) / world_size()
    ratio = torch.exp(logprobs - old_logprobs)
    advantage = advantages[:, None].to(logprobs.dtype)
    surrogate = torch.minimum(ratio * advantage, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantage)
    policy = -(surrogate * mask).sum() / tokens_per_rank
    kl = torch.zeros(())
    if ref_logprobs is not None and kl_beta:
        delta = ref_logprobs - logprobs
        kl = ((torch.exp(delta) - delta - 1) * mask).sum() / tokens_per_rank
    clipped = (clipped_tokens(logprobs, old_logprobs, clip_eps).to(mask.dtype) * mask).sum() / tokens_per_rank
    parts = torch.stack([policy.detach(), kl.detach(), clipped.detach()]).cpu()
    means = (sum_over_ranks(parts) / world_size()).tolist()
    return PolicyLossParts(policy + kl_beta * kl, *means)


def clipped_tokens(logprobs: torch.Tensor, old_logprobs: torch.Tensor, clip_eps: float) -> torch.Tensor:
    """(batch, tokens) bool: where the ratio pi / pi_old left [1 - eps, 1 + eps], so PPO's clip acted."""
    ratio = torch.exp(logprobs.detach() - old_logprobs.detach())
    return (ratio < 1 - clip_eps) | (ratio > 1 + clip_eps)


# ---------------------------------------------------------------------------------------------------
# The two passes around the maths: sampling a group per prompt, scoring the sampled tokens
# ---------------------------------------------------------------------------------------------------


@torch.no_grad()
def sample_groups(
    model, prompts: list[list[int]], group_size: int, max_new_tokens: int, temperature: float, stop_id: int,
    pad_id: int, seed: int,
) -> list[list[int]]:
    """`group_size` sampled completions per prompt (token ids, cut after the stop token, which is kept:
    the policy is trained to stop), groups consecutive. Seeded: the same seed gives the same samples,
    so a resumed run samples what the uninterrupted one did."""
    from nemotron.training.logprobs import left_pad

    repeated = [ids for ids in prompts for _ in range(group_size)]
    input_ids, attention_mask = left_pad(repeated, pad_id)
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        output = model.generate(
            input_ids=input_ids, attention_mask=attention_mask, do_sample=True, temperature=temperature, top_k=0,
            top_p=1.0, max_new_tokens=max_new_tokens, min_new_tokens=1, repetition_penalty=1.0,
            eos_token_id=stop_id, pad_token_id=pad_id,
        )
    model.train(was_training)
    completions = []
    for row in output[:, input_ids.shape[1] :].tolist():
        end = row.index(stop_id) + 1 if stop_id in row else len(row)
        completions.append(row[:end])
    return completions


def sampled_logprobs(
    forward, prompts: list[list[int]], completions: list[list[int]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, mask), both (batch, longest - 1): log p(token t+1 | tokens <= t) of each prompt +
    completion under `forward` (with gradient if enabled), and 1 where token t+1 is a completion token."""
    from nemotron.training.logprobs import right_pad

    sequences = [torch.tensor(p + c, dtype=torch.long) for p, c in zip(prompts, completions)]
    input_ids, attention_mask = right_pad(sequences)
    logits = forward(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    targets = input_ids[:, 1:]
    logprobs = -torch.nn.functional.cross_entropy(logits[:, :-1].float().transpose(1, 2), targets, reduction="none")
    mask = torch.zeros_like(targets, dtype=torch.float32)
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        mask[row, len(prompt) - 1 : len(prompt) + len(completion) - 1] = 1.0
    return logprobs, mask
