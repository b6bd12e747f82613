"""Load balancing in a training loop: what every step that trains a mixture-of-experts model adds.

    balance = ExpertBalance(model, top_k, aux_loss_coeff, bias_update_rate)
    for step ...:
        for micro-batch ...:
            with balance.recording() as routings:
                logits = forward(...)
            loss = task_loss + balance.loss(routings, num_sequences)      # the auxiliary term
            loss.backward()
        optimizer.step()
        balance.after_step()            # routed slots summed over passes and ranks; expert bias update
        training.record(..., **balance.log())  # aux_loss, max_load, expert_load (per layer and expert)

The maths lives in `nemotron.models.nano3` (routing recorder, seq_aux_loss, bias update); this object
only accumulates it over the micro-batches of a step and logs it, so the step file shows the loss it
adds and nothing else. For a model without MoE layers everything is a no-op (and `log()` is empty).
"""

from __future__ import annotations

import torch
from torch import nn

from nemotron.models import nano3
from nemotron.training.distributed import all_reduce_mean, sum_over_ranks


class ExpertBalance:
    def __init__(self, model: nn.Module, top_k: int, aux_loss_coeff: float, bias_update_rate: float) -> None:
        self.recorder = nano3.RoutingRecorder(model)
        self.layers = len(self.recorder.routers)
        self.experts = self.recorder.routers[0].num_experts if self.layers else 0
        self.top_k, self.coeff, self.rate = top_k, aux_loss_coeff, bias_update_rate
        self._reset()

    def _reset(self) -> None:
        self.counts = torch.zeros(self.layers, self.experts, dtype=torch.float64)  # routed slots this step
        self.loads = torch.zeros(self.layers, self.experts)
        self.aux = torch.zeros(())
        self.passes = 0

    def recording(self):
        """Context manager: the routers' choices during the forward passes inside it."""
        return self.recorder.recording()

    def loss(self, routings: list[nano3.Routing], num_sequences: int) -> torch.Tensor:
        """aux_loss_coeff x the load-balancing loss of one forward pass (0 without MoE layers); also
        accumulates the pass's expert loads for the log and the bias update."""
        if not routings:
            return torch.zeros(())
        aux = nano3.load_balancing_loss(routings, num_sequences, self.top_k)
        self.aux += aux.detach().cpu() / self.layers
        self.counts += nano3.expert_counts(routings, self.layers).cpu()
        self.passes += 1
        return self.coeff * aux

    def after_step(self) -> None:
        """After optimizer.step(): sum this step's routed slots over passes and ranks, move the expert bias.

        Counts, not per-pass shares: a pass (or a rank) that routes more tokens weighs more, so the update
        does not depend on how the step's batch was split, and integer counts tie exactly (sign 0), as in
        Megatron-Core's `get_updated_expert_bias` (an all-reduce SUM of `tokens_per_expert`)."""
        if self.layers:
            counts = sum_over_ranks(self.counts)
            self.loads = (counts / counts.sum(-1, keepdim=True).clamp(min=1)).float()
            self.aux = all_reduce_mean(self.aux / max(self.passes, 1))
            if self.rate:
                # float32 counts (exact below 2^24): the bias steps in the buffer's own precision
                nano3.update_expert_bias(self.recorder, counts.float(), self.rate)

    def log(self) -> dict:
        """This step's routing numbers for `TrainingRun.record`, then reset for the next step."""
        if not self.layers:
            return {}
        numbers = {
            "aux_loss": self.aux.item(),  # per MoE layer, before the coefficient: 1.0 is perfectly even
            "max_load": (self.loads.max(-1).values * self.experts).mean().item(),  # busiest / even share
            "expert_load": [[round(share, 5) for share in layer] for layer in self.loads.tolist()],
        }
        self._reset()
        return numbers
