"""The DPO-family losses: what aligns a policy with preference pairs against a frozen reference.

- `dpo_loss(...)`: Direct Preference Optimization (Rafailov et al., 2023, "Direct Preference
  Optimization: Your Language Model is Secretly a Reward Model"), its conservative / label-smoothed form
  (cDPO, Mitchell 2023, "A note on DPO with noisy preferences and relationship to IPO") and IPO (Azar et
  al., 2023, "A General Theoretical Paradigm to Understand Learning from Human Preferences").
- `check_dpo_settings(beta, variant, label_smoothing)`: refuse settings DPO does not define; a training
  step calls it before any work.
- `implicit_rewards(...)`, `reward_metrics(...)`: DPO's implicit reward beta * log(pi / pi_ref), and
  how often chosen out-scores rejected by it (reward accuracy) and by how much (margin), as TRL's
  DPOTrainer logs them during training.

- `preference_losses(h, ...)`: each pair's loss from its log-ratio h, for every variant; `scored_reference`:
  a micro-batch's reference log-probs. The DPO training step writes its forward, loss and backward out
  with these (nano2's stage2_alignment/training.py).
- `dpo_step_metrics(...)`, `dpo_validation(...)`: what a DPO training step logs, averaged over ranks,
  and the same numbers on held-out pairs.
- `reference_pass(...)`: the frozen reference's log-probs of the pairs a run trains on, in one pass;
  `save_reference_logps` / `load_reference_logps` store them beside the run's checkpoints, keyed by
  the run's identity (a resumed run reads them).

Log-probs are *summed* over completion tokens (`nemotron.training.logprobs`), as in the DPO paper.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from nemotron import atomic
from nemotron.errors import NemotronError
from nemotron.training.distributed import all_reduce_mean
from nemotron.training.logprobs import pair_logprobs

Logps = tuple[torch.Tensor, torch.Tensor]  # (chosen, rejected), one entry per pair
STEP_METRICS = ("loss", "reward_accuracy", "reward_margin", "logps_chosen", "logps_rejected")

DPOVariant = Literal["sigmoid", "conservative", "ipo"]


def implicit_rewards(policy_logps: torch.Tensor, reference_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO's implicit reward r(x, y) = beta * log(pi(y|x) / pi_ref(y|x)) (Rafailov et al., 2023, eq. 5)."""
    check_same_shape(policy_logps=policy_logps, reference_logps=reference_logps)
    return beta * (policy_logps - reference_logps)


def check_dpo_settings(beta: float, variant: str, label_smoothing: float) -> None:
    """Refuse loss settings DPO does not define, with the flag to fix."""
    if beta <= 0:
        raise NemotronError(
            f"--beta {beta} must be > 0 (it scales the implicit reward; 0.1 is the usual start)"
        )
    if variant == "conservative":
        if not 0 < label_smoothing < 0.5:
            raise NemotronError(
                f"--label-smoothing {label_smoothing}: the conservative DPO variant needs "
                "0 < label_smoothing < 0.5"
            )
    elif variant in ("sigmoid", "ipo"):
        if label_smoothing != 0:
            raise NemotronError(
                f"--label-smoothing {label_smoothing} only applies to --loss-variant 'conservative', not {variant!r}"
            )
    else:
        raise NemotronError(f"unknown DPO --loss-variant {variant!r}; use 'sigmoid', 'conservative' or 'ipo'")


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
    check_dpo_settings(beta, variant, label_smoothing)
    check_scored(reference_chosen_logps, reference_rejected_logps)
    chosen_log_ratio = policy_chosen_logps - reference_chosen_logps
    rejected_log_ratio = policy_rejected_logps - reference_rejected_logps
    losses = preference_losses(chosen_log_ratio - rejected_log_ratio, beta, variant, label_smoothing)
    chosen_rewards = (beta * chosen_log_ratio).detach()
    rejected_rewards = (beta * rejected_log_ratio).detach()
    return losses.mean(), chosen_rewards, rejected_rewards


def preference_losses(h: torch.Tensor, beta: float, variant: DPOVariant, label_smoothing: float) -> torch.Tensor:
    """Each pair's loss from its chosen-minus-rejected log-ratio `h` (`dpo_loss` says what each variant is)."""
    if variant == "ipo":
        return (h - 1 / (2 * beta)) ** 2
    eps = label_smoothing  # sigmoid is conservative with eps = 0
    return -(1 - eps) * F.logsigmoid(beta * h) - eps * F.logsigmoid(-beta * h)


def scored_reference(reference: Logps, ids: list[int], device: torch.device) -> Logps:
    """The reference log-probs (chosen, rejected) of pairs `ids`, on `device`; refuses a pair the reference
    pass did not score (NaN), which would otherwise turn the loss into NaN. They are kept on the CPU
    (computed once, saved for resume); on a GPU a micro-batch's slice travels to the policy's device."""
    chosen, rejected = (logps[ids].to(device) for logps in reference)
    check_scored(chosen, rejected)
    return chosen, rejected


def check_scored(reference_chosen: torch.Tensor, reference_rejected: torch.Tensor) -> None:
    if reference_chosen.isnan().any() or reference_rejected.isnan().any():
        raise NemotronError(
            "a pair in this batch has no reference log-probs (NaN: the reference pass did not score it); "
            "delete reference_logps.pt from the run folder and re-run"
        )


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


def dpo_step_metrics(loss: torch.Tensor, policy_logps: list, reference: Logps, beta: float) -> dict[str, float]:
    """The step's loss, reward accuracy and margin, and mean policy log-probs, averaged over all ranks.

    `policy_logps` holds `(pair ids, chosen log-probs, rejected log-probs)` per micro-batch of this rank.
    """
    ids = [i for micro in policy_logps for i in micro[0]]
    chosen = torch.cat([micro[1] for micro in policy_logps]).float().cpu()  # beside the reference's
    rejected = torch.cat([micro[2] for micro in policy_logps]).float().cpu()
    rewards = reward_metrics(chosen, rejected, reference[0][ids], reference[1][ids], beta)
    numbers = [loss.item(), rewards["reward_accuracy"], rewards["reward_margin"], chosen.mean(), rejected.mean()]
    local = torch.tensor([float(number) for number in numbers], dtype=torch.float64)
    return dict(zip(STEP_METRICS, all_reduce_mean(local).tolist()))


def dpo_validation(
    model, pairs: tuple, reference: Logps, beta: float, variant: DPOVariant, label_smoothing: float, batch_size: int
) -> dict[str, float]:
    """DPO loss, reward accuracy and margin of `model` on held-out tokenized pairs (eval mode, no grad)."""
    policy = [side.cpu() for side in pair_logprobs(model, *pairs, batch_size=batch_size)]  # beside the reference's
    loss, _, _ = dpo_loss(*policy, *reference, beta, variant, label_smoothing)
    rewards = reward_metrics(*policy, *reference, beta)
    return {
        "val_loss": loss.item(),
        "val_reward_accuracy": rewards["reward_accuracy"],
        "val_reward_margin": rewards["reward_margin"],
    }


def reference_pass(model, pairs: tuple, indices: list[int], batch_size: int) -> Logps:
    """The frozen reference's summed log-probs of the pairs at `indices` (tokenized `(prompts, chosen,
    rejected)`), as tensors over ALL pairs with NaN where a pair was not scored.

    A run scores only the pairs its steps will visit (`EpochSampler.items_of_first_steps`): at tiny,
    60 steps of 8 pairs visit 480 of ~1,600, so the pass costs a third of scoring them all. A NaN
    can never reach the loss unnoticed: `dpo_loss` refuses it.
    """
    scored = pair_logprobs(model, *([side[i] for i in indices] for side in pairs), batch_size=batch_size)
    full = []
    for values in scored:
        side = torch.full((len(pairs[0]),), float("nan"), dtype=values.dtype)
        side[indices] = values.cpu()  # kept on the CPU whatever device scored them
        full.append(side)
    return full[0], full[1]


def save_reference_logps(path: Path, run_identity: dict, logps: dict[str, Logps]) -> None:
    """Store the reference log-probs of each split (`{"train": (chosen, rejected), ...}`) atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.output_path(path) as temp:
        torch.save({"run": run_identity, "logps": {split: list(pair) for split, pair in logps.items()}}, temp)


def load_reference_logps(path: Path, run_identity: dict) -> dict[str, Logps] | None:
    """The reference log-probs stored for this very run, or None (absent, or another run's)."""
    if not path.is_file():
        return None
    stored = torch.load(path, map_location="cpu", weights_only=True)
    if stored["run"] != run_identity:
        return None
    return {split: tuple(pair) for split, pair in stored["logps"].items()}


def check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise NemotronError(f"log-prob tensors must have one shape per pair, got {shapes}")
