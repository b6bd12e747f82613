"""The optimizer and learning-rate schedule every nano2 training stage uses.

- `build_optimizer(model, lr, weight_decay)`: AdamW (Loshchilov & Hutter, 2019, "Decoupled Weight
  Decay Regularization") over two parameter groups, with and without weight decay.
- `lr_schedule(optimizer, warmup_steps, total_steps, min_lr_ratio, decay_fraction=None)`: linear warmup,
  then a cosine decay to `min_lr_ratio * lr` (Loshchilov & Hutter, 2017, SGDR; the schedule GPT-3 and the
  Nemotron-H / Nano 2 reports use for pretraining), as a plain `torch.optim.lr_scheduler.LambdaLR`.
- `WarmupStableDecay`: linear warmup, a long constant stage at the peak rate, then a short decay to
  `min_lr_ratio * lr` over the last `decay_fraction` of the steps (warmup-stable-decay, Hu et al.,
  2024, "MiniCPM"; the schedule of the Nemotron 3 Nano run). `--schedule wsd` (or `lr_schedule(...,
  decay_fraction=...)`) selects it.

Which parameters are not decayed, and why. Weight decay pulls every weight towards zero a little each
step. That is a useful prior for the big projection matrices, but wrong for:
- norm gains and biases (1-D tensors): they set the scale and offset of activations; decaying them
  does not simplify the function, it only fights the norm (GPT-2 / minGPT, Megatron-LM's
  `no_weight_decay_cond`);
- Mamba-2's `A_log`, `D` and `dt_bias` (1-D as well): they parameterise the state-space dynamics and
  are initialised to a deliberate range; mamba_ssm marks them `_no_weight_decay` (Gu & Dao, 2024);
- token embeddings: a row only gets a gradient when its token occurs, but decay shrinks every row on
  every step, so rare tokens' embeddings would be driven to zero (minGPT's `no_decay` on
  `nn.Embedding`). The untied output head is a Linear layer and is decayed like the others.
So: a tensor with fewer than two dimensions, or an `nn.Embedding` weight, goes to the no-decay group.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from nemotron.errors import NemotronError

# (0.9, 0.95) is the GPT-3 / Megatron pretraining choice: beta2 below 0.999 makes Adam react faster
# to a sudden gradient-scale change, which keeps small-batch language-model training stable.
DEFAULT_BETAS = (0.9, 0.95)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Split the trainable parameters into a decayed and a non-decayed group (see module docstring).

    Each group also carries the parameter `names` so a reader (or a test) can see who went where.
    """
    embedding_weights = {id(module.weight) for module in model.modules() if isinstance(module, nn.Embedding)}
    decay: list[tuple[str, nn.Parameter]] = []
    no_decay: list[tuple[str, nn.Parameter]] = []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if parameter.ndim < 2 or id(parameter) in embedding_weights:
            no_decay.append((name, parameter))
        else:
            decay.append((name, parameter))
    return [
        {"params": [p for _, p in decay], "names": [n for n, _ in decay], "weight_decay": weight_decay},
        {"params": [p for _, p in no_decay], "names": [n for n, _ in no_decay], "weight_decay": 0.0},
    ]


def build_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = DEFAULT_BETAS,
    eps: float = 1e-8,
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (see the module docstring for which tensors); torch's fused
    kernel where it runs (`fused_supported`), so build it after the model is on its device."""
    if lr <= 0:
        raise NemotronError(f"learning rate must be positive, got lr={lr}; pass e.g. --lr 3e-3")
    if weight_decay < 0:
        raise NemotronError(f"weight_decay must be >= 0, got {weight_decay}; pass e.g. --weight-decay 0.1")
    groups = parameter_groups(model, weight_decay)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused_supported(model) or None)


def fused_supported(model: nn.Module) -> bool:
    """True when torch's fused AdamW kernel can update every parameter (float tensors on a CPU or a GPU).

    The fused kernel updates all tensors in one pass over memory instead of ~10 elementwise passes per
    tensor (torch's default on a CPU is that per-tensor loop). Measured on the tiny model's 1.47 M
    parameters, 2 threads on a loaded 2-core machine: 103 ms per `step()` fused, 503 ms foreach, 1,074 ms
    the default loop (benchmarks/bench_mfu.py times the whole step). Same maths; the float
    rounding differs from the loop's in the last bits, and it is deterministic run to run.
    """
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in model.parameters())


class WarmupCosine:
    """The LR multiplier at a step: linear warmup to 1, cosine down to `min_lr_ratio`, then flat.

    A callable object rather than a lambda so `LambdaLR.state_dict()` saves its settings with the
    checkpoint (LambdaLR only stores objects, not functions); `anneal` is saved the same way.
    """

    def __init__(self, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> None:
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.min_lr_ratio = min_lr_ratio
        self.anneal_from: int | None = None  # set by `anneal`
        self.anneal_to: int | None = None

    def anneal(self, start: int, end: int) -> None:
        """From the step after `start`, decay linearly from this schedule's multiplier at `start` to
        `min_lr_ratio` at `end` (the run's new last step): what `--patience` does when the validation loss
        stops improving, so a run it shortens still ends at a low rate, as a planned one does."""
        self.anneal_from, self.anneal_to = start, end

    def __call__(self, step: int) -> float:
        """The multiplier of the step after `step` optimizer steps (LambdaLR counts from 0)."""
        if self.anneal_from is None or step <= self.anneal_from:
            return self.planned(step)
        start_ratio = self.planned(self.anneal_from)
        progress = min(1.0, (step - self.anneal_from) / max(1, self.anneal_to - 1 - self.anneal_from))
        return start_ratio + (self.min_lr_ratio - start_ratio) * progress

    def planned(self, step: int) -> float:
        if step < self.warmup_steps:
            # (step + 1) / (warmup + 1): the first step already learns a little (nanoGPT's choice),
            # instead of a wasted step at lr = 0.
            return (step + 1) / (self.warmup_steps + 1)
        if step >= self.total_steps:
            return self.min_lr_ratio
        progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine


class WarmupStableDecay(WarmupCosine):
    """Warmup as `WarmupCosine`, then the peak rate until the last `decay_fraction` of the steps, then a
    linear decay to `min_lr_ratio` (the "1-sqrt" and linear decays of the WSD papers behave alike at
    this length; linear is the simplest to read)."""

    def __init__(self, warmup_steps: int, total_steps: int, min_lr_ratio: float, decay_fraction: float) -> None:
        super().__init__(warmup_steps, total_steps, min_lr_ratio)
        self.decay_steps = wsd_decay_steps(decay_fraction, total_steps)

    def planned(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / (self.warmup_steps + 1)
        decay_start = self.total_steps - self.decay_steps
        if step < decay_start:
            return 1.0
        progress = min(1.0, (step - decay_start) / self.decay_steps)
        return 1.0 - (1.0 - self.min_lr_ratio) * progress


def wsd_decay_steps(decay_fraction: float, total_steps: int) -> int:
    """How many of the last steps a warmup-stable-decay run anneals over: `decay_fraction` of them, at
    least one (our loop's `WarmupStableDecay`, and Megatron's `lr_wsd_decay_iters` at scale)."""
    if not 0.0 < decay_fraction <= 1.0:
        raise NemotronError(f"--decay-fraction {decay_fraction} must be in (0, 1]; 0.2 decays over the last 20%")
    return max(1, round(decay_fraction * total_steps))


def anneal(scheduler: LambdaLR, start: int, end: int) -> None:
    """Every schedule of `scheduler` decays from its rate at `start` to its floor at `end`, the run's new last
    step (`WarmupCosine.anneal`): what a step's loop does when `--patience` ends its run early."""
    for schedule in scheduler.lr_lambdas:
        schedule.anneal(start, end)


def lr_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1,
    decay_fraction: float | None = None,
) -> LambdaLR:
    """A LambdaLR that follows `WarmupCosine`, or `WarmupStableDecay` when `decay_fraction` is given;
    call `scheduler.step()` once after each optimizer step."""
    if total_steps <= 0:
        raise NemotronError(f"total_steps must be positive, got {total_steps}; pass e.g. --steps 300")
    if not 0 <= warmup_steps <= total_steps:
        raise NemotronError(
            f"warmup_steps={warmup_steps} must be between 0 and total_steps={total_steps}; "
            "lower --warmup-steps"
        )
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise NemotronError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}; pass e.g. 0.1")
    if decay_fraction is None:
        return LambdaLR(optimizer, WarmupCosine(warmup_steps, total_steps, min_lr_ratio))
    return LambdaLR(optimizer, WarmupStableDecay(warmup_steps, total_steps, min_lr_ratio, decay_fraction))


def adamw_with_schedule(model: nn.Module, config, steps: int) -> tuple[torch.optim.AdamW, LambdaLR]:
    """AdamW and its schedule from a step's Config (`lr`, `weight_decay`, `warmup_steps` (default 10% of
    `steps`), `min_lr_ratio`, `schedule` cosine|wsd and `decay_fraction`): what every training step uses."""
    warmup = steps // 10 if config.warmup_steps is None else config.warmup_steps
    optimizer = build_optimizer(model, lr=config.lr, weight_decay=config.weight_decay)
    decay_fraction = config.decay_fraction if config.schedule == "wsd" else None
    return optimizer, lr_schedule(optimizer, warmup, steps, config.min_lr_ratio, decay_fraction)



def optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: LambdaLR, grad_clip: float,
                   ) -> tuple[float, float]:
    """The end of every training step: clip the global gradient norm to `grad_clip` (0: no clipping),
    step the optimizer and the schedule, clear the gradients. Returns (the norm before clipping, the
    learning rate this step used), what the step logs."""
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip or math.inf)
    lr = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm.item(), lr
