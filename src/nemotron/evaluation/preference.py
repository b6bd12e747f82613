"""Preference metrics: how a model ranks the two answers of preference pairs.

- `reward_metrics(...)` (from `nemotron.training.dpo`, since DPO training logs it every step): DPO's
  implicit-reward accuracy and margin of a policy against its reference.
- `preference_accuracy(...)`: a single model's preference: does it give the chosen completion a higher
  per-token log-probability than the rejected one?

The log-probs come from `nemotron.training.logprobs` (`pair_logprobs`) and the DPO loss itself lives in
`nemotron.training.dpo`: training and evaluation share them, the metrics are evaluation's own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nemotron.errors import NemotronError
from nemotron.training.dpo import check_same_shape


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
