"""Preference scoring and DPO: completion log-probs, the DPO-family losses, and preference metrics.

What this module does:
- `completion_logprobs(model, prompts_ids, completions_ids)`: log p(completion | prompt) summed over the
  completion tokens only (the prompt is context, never scored). Pairs are batched with right padding;
  the completion-only mask is "the last len(completion) predictions of each row". Gradients flow when
  they are enabled, so DPO training uses the same function for the policy.
- `pair_logprobs(model, prompts, chosen, rejected)`: both sides of every pair, without gradients, in
  eval mode: what evaluation and the frozen reference model need.
- `dpo_loss(...)`: Direct Preference Optimization (Rafailov et al., 2023, "Direct Preference
  Optimization: Your Language Model is Secretly a Reward Model"), its conservative / label-smoothed form
  (cDPO, Mitchell 2023, "A note on DPO with noisy preferences and relationship to IPO") and IPO (Azar et
  al., 2023, "A General Theoretical Paradigm to Understand Learning from Human Preferences").
- `reward_metrics(...)`: DPO's implicit rewards beta * (log pi - log pi_ref) for chosen and rejected,
  how often chosen out-scores rejected (reward accuracy) and by how much (margin), as TRL logs them.
- `preference_accuracy(...)`: a single model's preference: does it give the chosen completion a higher
  per-token log-probability than the rejected one?

All log-probs here are *summed* over completion tokens, as in the DPO paper, unless a function says
otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from nemotron.errors import NemotronError
from nemotron.evaluation.language_modeling import TokenSequence, evaluation_mode, next_token_logprobs

DPOVariant = Literal["sigmoid", "conservative", "ipo"]


def completion_logprobs(
    model: torch.nn.Module,
    prompts_ids: Sequence[TokenSequence],
    completions_ids: Sequence[TokenSequence],
    *,
    batch_size: int = 8,
) -> torch.Tensor:
    """Float32 tensor [N]: sum over completion tokens of log p(token | prompt, earlier completion tokens).

    Differentiable when called with gradients enabled (DPO policy); wrap in `evaluation_mode(model)` or use
    `pair_logprobs` to evaluate.
    """
    if len(prompts_ids) != len(completions_ids):
        raise NemotronError(
            f"got {len(prompts_ids)} prompts and {len(completions_ids)} completions; "
            "pass one completion per prompt"
        )
    if not prompts_ids:
        raise NemotronError("no prompt/completion pairs to score")
    sequences, completion_lengths = [], []
    for i, (prompt, completion) in enumerate(zip(prompts_ids, completions_ids)):
        prompt, completion = list(map(int, prompt)), list(map(int, completion))
        if not prompt or not completion:
            raise NemotronError(
                f"pair {i} has an empty prompt or completion; both need at least one token "
                "(the first completion token is predicted from the prompt)"
            )
        sequences.append(prompt + completion)
        completion_lengths.append(len(completion))
    scored = next_token_logprobs(model, sequences, batch_size=batch_size)
    # Completion-only mask: the last len(completion) predictions of a row are the completion tokens.
    return torch.stack([logprobs[-n:].sum() for logprobs, n in zip(scored, completion_lengths)])


def pair_logprobs(
    model: torch.nn.Module,
    prompts_ids: Sequence[TokenSequence],
    chosen_ids: Sequence[TokenSequence],
    rejected_ids: Sequence[TokenSequence],
    *,
    batch_size: int = 8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen log-probs, rejected log-probs), each [N], summed over completion tokens, no gradients."""
    with evaluation_mode(model):
        chosen = completion_logprobs(model, prompts_ids, chosen_ids, batch_size=batch_size)
        rejected = completion_logprobs(model, prompts_ids, rejected_ids, batch_size=batch_size)
    return chosen, rejected


def implicit_rewards(policy_logps: torch.Tensor, reference_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO's implicit reward r(x, y) = beta * log(pi(y|x) / pi_ref(y|x)) (Rafailov et al., 2023, eq. 5)."""
    check_same_shape(policy_logps=policy_logps, reference_logps=reference_logps)
    return beta * (policy_logps - reference_logps)


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    reference_chosen_logps: torch.Tensor,
    reference_rejected_logps: torch.Tensor,
    beta: float,
    variant: DPOVariant = "sigmoid",
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean loss over the batch, chosen rewards [N], rejected rewards [N]); rewards are detached.

    With h = log(pi(y_w)/pi_ref(y_w)) - log(pi(y_l)/pi_ref(y_l)), the chosen-minus-rejected log-ratio:
    - "sigmoid" (DPO): -log sigmoid(beta * h). The Bradley-Terry likelihood of the preference under the
      implicit reward; it keeps pushing h up, however large it already is.
    - "conservative" (cDPO): assume each label is flipped with probability eps = label_smoothing, so the
      target is a soft label: -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h). Its minimum is
      at a finite h, so noisy pairs cannot drive the policy arbitrarily far. Needs 0 < eps < 0.5.
    - "ipo": (h - 1/(2 beta))^2. A squared loss that regresses h to a fixed margin instead of pushing it
      to infinity, which is Azar et al.'s fix for DPO overfitting deterministic preferences (their tau is
      our beta). TRL feeds IPO per-token *average* log-probs; pass those here if you want its behaviour.
    """
    check_same_shape(
        policy_chosen_logps=policy_chosen_logps,
        policy_rejected_logps=policy_rejected_logps,
        reference_chosen_logps=reference_chosen_logps,
        reference_rejected_logps=reference_rejected_logps,
    )
    if beta <= 0:
        raise NemotronError(
            f"beta={beta} must be > 0 (it scales the implicit reward; 0.1 is the usual start)"
        )
    if variant == "conservative":
        if not 0 < label_smoothing < 0.5:
            raise NemotronError(
                f"label_smoothing={label_smoothing}: the conservative DPO variant needs "
                "0 < label_smoothing < 0.5"
            )
    elif variant in ("sigmoid", "ipo"):
        if label_smoothing != 0:
            raise NemotronError(
                f"label_smoothing={label_smoothing} only applies to variant='conservative', not {variant!r}"
            )
    else:
        raise NemotronError(f"unknown DPO variant {variant!r}; use 'sigmoid', 'conservative' or 'ipo'")

    chosen_log_ratio = policy_chosen_logps - reference_chosen_logps
    rejected_log_ratio = policy_rejected_logps - reference_rejected_logps
    h = chosen_log_ratio - rejected_log_ratio
    if variant == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    else:  # sigmoid is conservative with eps = 0
        eps = label_smoothing
        losses = -(1 - eps) * F.logsigmoid(beta * h) - eps * F.logsigmoid(-beta * h)
    chosen_rewards = (beta * chosen_log_ratio).detach()
    rejected_rewards = (beta * rejected_log_ratio).detach()
    return losses.mean(), chosen_rewards, rejected_rewards


def reward_metrics(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    reference_chosen_logps: torch.Tensor,
    reference_rejected_logps: torch.Tensor,
    beta: float,
) -> dict[str, float]:
    """Implicit-reward summary of a DPO policy against its reference, over a batch of pairs.

    `reward_accuracy`: fraction of pairs whose chosen reward is strictly above the rejected reward (ties
    count as wrong, so an untrained policy equal to its reference scores 0, not 0.5).
    `reward_margin`: mean of chosen reward - rejected reward. Both are what TRL's DPOTrainer logs as
    rewards/accuracies and rewards/margins.
    """
    chosen = implicit_rewards(policy_chosen_logps, reference_chosen_logps, beta).double()
    rejected = implicit_rewards(policy_rejected_logps, reference_rejected_logps, beta).double()
    check_same_shape(chosen_rewards=chosen, rejected_rewards=rejected)
    return {
        "reward_accuracy": float((chosen > rejected).double().mean()),
        "reward_margin": float((chosen - rejected).mean()),
        "chosen_reward": float(chosen.mean()),
        "rejected_reward": float(rejected.mean()),
    }


def preference_accuracy(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    chosen_num_tokens: torch.Tensor | Sequence[int],
    rejected_num_tokens: torch.Tensor | Sequence[int],
    *,
    length_normalized: bool = True,
) -> float:
    """Fraction of pairs where one model prefers chosen: log-prob per token of chosen > that of rejected.

    Why per token by default: a summed log-prob falls with every extra token, so comparing sums mostly
    asks "which completion is shorter?" when chosen and rejected differ in length, as ours do. Dividing by
    the token count compares how likely each completion is token for token; lm-eval's acc_norm and SimPO
    (Meng et al., 2024) normalise for the same reason. DPO's reward accuracy does not need this, because
    subtracting the reference's log-prob of the same completion cancels the length effect.
    Ties count as wrong. `length_normalized=False` compares the sums.
    """
    chosen = torch.as_tensor(chosen_logps, dtype=torch.float64)
    rejected = torch.as_tensor(rejected_logps, dtype=torch.float64)
    if length_normalized:
        chosen_n = torch.as_tensor(chosen_num_tokens, dtype=torch.float64)
        rejected_n = torch.as_tensor(rejected_num_tokens, dtype=torch.float64)
        check_same_shape(chosen_logps=chosen, chosen_num_tokens=chosen_n, rejected_num_tokens=rejected_n)
        if (chosen_n <= 0).any() or (rejected_n <= 0).any():
            raise NemotronError("token counts must be positive to length-normalise log-probs")
        chosen, rejected = chosen / chosen_n, rejected / rejected_n
    check_same_shape(chosen_logps=chosen, rejected_logps=rejected)
    if chosen.numel() == 0:
        raise NemotronError("no preference pairs to score")
    return float((chosen > rejected).double().mean())


def check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise NemotronError(f"log-prob tensors must have one shape per pair, got {shapes}")
