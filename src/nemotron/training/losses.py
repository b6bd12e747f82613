"""Next-token cross-entropy computed from the last hidden states, a block of tokens at a time.

A causal LM's loss is usually `F.cross_entropy(model(ids).logits, targets)`: the output head writes
the full logits (tokens x vocabulary floats: 8 x 256 x 4,096 = 8.4 M, 32 MB at nano2 tiny), then
log-softmax reads and writes them again, and the backward pass does the same in reverse. On a CPU
those passes over memory cost more than the output head's matmul itself. `linear_cross_entropy`
never materialises them: for each block of `block_size` tokens it computes that block's logits,
its loss and, at once, its gradients with respect to the hidden states and the head's weight (the
loss is the last operation of the step, so its gradient is known in the forward pass; Liger
Kernel's "fused linear cross entropy", Hsu et al., 2024, arXiv:2410.10989, does the same on GPUs).
The backward pass then only scales the stored gradients. The matmul FLOPs are the ones of the plain
loss (one product forward, two backward); the memory is one block of logits.

The result is the same loss as the plain one up to float rounding (the sum over blocks is added in
another order): tests/test_losses.py compares both, values and gradients, on seeded random inputs.

- `linear_cross_entropy(hidden, weight, targets)`: the mean loss over targets != IGNORE_INDEX.
- `CausalLMLoss(model)`: a module whose forward is (input ids, targets) -> that loss, through the
  model's backbone and its output head; wrap it in DDP (or compile it) like the model itself. It equals
  `F.cross_entropy(model(input_ids=x, use_cache=False).logits.flatten(0, 1), y.flatten())`.
"""

from __future__ import annotations

import torch
from torch import nn

IGNORE_INDEX = -100  # the targets nobody predicts (F.cross_entropy's default ignore_index)
# Logits per block: 4 M floats, 16 MB in fp32 (1,024 tokens of nano2 tiny's 4,096 words). A block must stay
# under the 32 MB up to which `memory.keep_freed_memory` lets malloc keep a freed buffer: measured at tiny
# (benchmarks/bench_mfu.py, three runs each), one 32 MB block of 2,048 tokens is mapped fresh from the kernel
# every step and ran ~7% slower than two of 1,024; blocks of 512 were no faster than 1,024.
BLOCK_LOGITS = 1 << 22


def block_tokens(vocab_size: int) -> int:
    """Tokens per block of `linear_cross_entropy`: as many as keep a block's logits within BLOCK_LOGITS."""
    return max(1, BLOCK_LOGITS // vocab_size)


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward: the mean loss, and the gradients of it (stored). Backward: the stored gradients x grad_output."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, block_size: int):
        device_type = hidden.device.type
        # Under autocast the head's matmuls run in the autocast dtype, as `nn.Linear` would; the softmax,
        # the loss and the gradient sums stay in fp32.
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else hidden.dtype
        exact = torch.promote_types(hidden.dtype, torch.float32)  # fp32, or fp64 when given fp64
        with torch.autocast(device_type, enabled=False):
            keep = targets != IGNORE_INDEX
            safe = torch.where(keep, targets, 0)
            scale = 1.0 / keep.sum().clamp(min=1).to(exact)
            weight_c = weight.to(dtype)
            grad_hidden = torch.empty(hidden.shape, dtype=exact, device=hidden.device)
            grad_weight = torch.zeros(weight.shape, dtype=exact, device=weight.device)
            picked = torch.empty(targets.shape, dtype=exact, device=hidden.device)  # p(target) of every row
            for start in range(0, hidden.shape[0], block_size):
                rows = slice(start, start + block_size)
                block, target = hidden[rows].to(dtype), safe[rows]
                row_weight = (keep[rows].to(exact) * scale)[:, None]  # d(loss)/d(this row's loss), 0 if ignored
                # The softmax overwrites the logits (one block of tokens x vocabulary in memory, written once).
                probs = (block @ weight_c.t()).to(exact)
                torch.softmax(probs, dim=-1, out=probs)
                picked[rows] = probs.gather(1, target[:, None]).squeeze(1)
                # d(loss)/d(logits) = (softmax - one_hot(target)) * row_weight. The one-hot and the row
                # weights are applied on the (tokens x hidden) side of the two products, never as passes
                # over the (tokens x vocabulary) probabilities (measured: 7% of the loss's time at nano2 tiny).
                probs = probs.to(dtype)
                grad_hidden[rows] = ((probs @ weight_c).to(exact) - weight_c[target]) * row_weight
                scaled = block.to(exact) * row_weight
                if dtype == exact:
                    grad_weight.addmm_(probs.t(), scaled)
                else:
                    grad_weight += (probs.t() @ scaled.to(dtype)).to(exact)
                grad_weight.index_add_(0, target, scaled, alpha=-1)
            row_loss = torch.where(keep, -picked.log(), 0)
            # -log p(target) is exact while p(target) is a normal float. Below that (a target logit ~87 under
            # the largest in fp32) it loses digits or becomes inf: those rows' loss is taken from their logits.
            # (On a GPU `.any()` waits for the forward pass: one wait a step, as `loss.item()` does anyway.)
            underflow = keep & (picked < torch.finfo(exact).tiny)
            if underflow.any():
                rows = underflow.nonzero().squeeze(1)
                logits = (hidden[rows].to(dtype) @ weight_c.t()).to(exact)
                row_loss[rows] = logits.logsumexp(-1) - logits.gather(1, safe[rows, None]).squeeze(1)
        ctx.save_for_backward(grad_hidden.to(hidden.dtype), grad_weight.to(weight.dtype))
        return row_loss.sum() * scale

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_output, grad_weight * grad_output, None, None


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, block_size: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of `targets` under logits `hidden @ weight.T`, over targets != IGNORE_INDEX.

    `hidden` is (tokens, hidden) or (batch, tokens, hidden), `targets` the matching ids; `weight` is the
    output head's (vocabulary, hidden) matrix. Equals `F.cross_entropy(hidden @ weight.T, targets)` up
    to float rounding, without holding more than `block_size` rows of logits (module docstring; default
    `block_tokens` of the vocabulary).
    """
    block_size = block_size or block_tokens(weight.shape[0])
    return _LinearCrossEntropy.apply(hidden.flatten(0, -2), weight, targets.flatten(), block_size)


class CausalLMLoss(nn.Module):
    """(input ids x, target ids y) -> the mean next-token loss of a Hugging Face causal LM `model`:

        CausalLMLoss(model)(x, y) == F.cross_entropy(model(input_ids=x, use_cache=False).logits.flatten(0, 1),
                                                     y.flatten())

    (the mean over every target != IGNORE_INDEX), equal to float rounding: the same value and gradients,
    summed in another order (tests/test_losses.py). It never holds the full logits: the model's backbone
    (`model.model`) gives the last hidden states, and `linear_cross_entropy` applies the untied output head
    (`model.lm_head`, no bias) a block of tokens at a time. A module, so that DDP (which must see the forward
    pass to average gradients) and torch.compile wrap it like the model.
    """

    def __init__(self, model: nn.Module, block_size: int | None = None) -> None:
        super().__init__()
        self.model, self.block_size = model, block_size

    def forward(self, input_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        hidden = self.model.model(input_ids=input_ids, use_cache=False).last_hidden_state
        return linear_cross_entropy(hidden, self.model.lm_head.weight, targets, self.block_size)
