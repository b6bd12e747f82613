"""One optimizer step of every training step's maths, on this process's share of a fixed global batch.

    python tests/one_step_across_ranks.py OUT                                  # one process, whole batch
    torchrun --standalone --nproc_per_node 2 tests/one_step_across_ranks.py OUT  # each rank its share

For each training step (nano2 pretraining and SFT; nano3 pretraining, SFT and GRPO) it builds the
step's tiny model from one seed, runs the library function the step's loop calls for its forward and
backward passes (`pretraining_backward`, `sft_backward`, or GRPO's `policy_loss`), then
the step's clip and AdamW step, and rank 0 writes OUT/<name>.pt: the gradients DDP averaged and every
parameter and buffer after the step. tests/test_loss_across_ranks.py compares the two runs. nano2's
pretraining and SFT steps write the same arithmetic out in their own loop (nano3's call these functions),
and nano2's DPO step writes its own (no library function holds it); their torchrun tests
(tests/test_nano2_stage0_training.py, test_nano2_stage1_training.py, test_nano2_stage2_training.py) run
them whole.

The global batch is two SHARES. One process runs both as its micro-batches (gradient accumulation, or
one batch for GRPO, which has none); rank r of two runs share r. Wherever a step's loss is a mean over
tokens, the shares hold different numbers of them, so a per-rank mean cannot give the one-process result.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from nemotron.data_prep.packing import PackedRow
from nemotron.models import nano2, nano3
from nemotron.training.distributed import cleanup, setup_distributed
from nemotron.training.grpo import group_advantages, policy_loss, sampled_logprobs
from nemotron.training.losses import CausalLMLoss
from nemotron.training.moe import ExpertBalance
from nemotron.training.optim import build_optimizer
from nemotron.training.packed_batches import collate_packed, sft_backward
from nemotron.training.windows import pretraining_backward

VOCAB = 96
LR = 1e-3


def mine(shares: list, rank: int, world_size: int) -> list:
    """This process's part of the global batch: every share with one process, share `rank` with two."""
    return shares if world_size == 1 else [shares[rank]]


def nano2_model():
    return nano2.build_model(nano2.build_config("tiny", VOCAB), seed=0)


def nano3_model():
    return nano3.build_model(nano3.build_config("tiny", VOCAB), seed=0)


def balance_of(model) -> ExpertBalance:
    return ExpertBalance(model, model.config.num_experts_per_tok, nano3.AUX_LOSS_COEFF, nano3.BIAS_UPDATE_RATE)


def pretraining(model, forward, ddp, rank, world_size, balance=None) -> None:
    # Every window holds the same number of targets: pretraining's shares cannot differ in tokens.
    windows = torch.randint(0, VOCAB, (2, 2, 33), generator=torch.Generator().manual_seed(1))
    pretraining_backward(forward, ddp, contextlib.nullcontext(), torch.cat(mine(list(windows), rank, world_size)),
                         micro_batch_size=2, device=torch.device("cpu"), balance=balance)


def packed_row(rng: np.random.Generator, lengths: list[int], trained: float) -> PackedRow:
    """Conversations of `lengths` back to back, a `trained` share of positions in the loss (never the
    last position of a conversation, as curation writes them)."""
    mask = (rng.random(sum(lengths)) < trained).astype(np.int8)
    starts = np.cumsum([0, *lengths[:-1]])
    mask[starts + np.asarray(lengths) - 1] = 0
    return PackedRow(input_ids=rng.integers(0, VOCAB, sum(lengths)).astype(np.int32), loss_mask=mask,
                     seq_start_id=starts.astype(np.int32))


def sft(model, forward, ddp, rank, world_size, balance=None) -> None:
    rng = np.random.default_rng(2)
    # Share 0 trains most of its long rows, share 1 a few positions of short ones: ~10x fewer tokens.
    shares = [[[packed_row(rng, [20, 18], 0.8), packed_row(rng, [30], 0.8)],
               [packed_row(rng, [25, 10], 0.7), packed_row(rng, [12], 0.9)]],
              [[packed_row(rng, [9, 7], 0.2), packed_row(rng, [14], 0.2)],
               [packed_row(rng, [6], 0.3), packed_row(rng, [11, 5], 0.2)]]]
    micro_batches = [collate_packed(rows, pad_id=0) for share in mine(shares, rank, world_size) for rows in share]
    sft_backward(forward, ddp, contextlib.nullcontext(), micro_batches, balance)


def grpo(model, forward, ddp, rank, world_size, balance=None) -> None:
    rng = np.random.default_rng(4)
    prompts = [rng.integers(0, VOCAB, 5).tolist() for _ in range(8)]
    # Completion tokens 30 on share 0 and 13 on share 1. Each share has one completion of the longest
    # length, so one batch of both pads as each share does: the MoE balancing loss, which counts
    # padding positions, sees the same positions either way and only the token normaliser is tested.
    lengths = [[9, 7, 8, 6], [9, 1, 2, 1]]
    completions = [rng.integers(0, VOCAB, n).tolist() for share in lengths for n in share]
    rewards = torch.tensor(rng.random(8), dtype=torch.float32)
    advantages = group_advantages(rewards, group_size=2)
    index = [list(range(4)), list(range(4, 8))]
    chosen = [i for share in mine(index, rank, world_size) for i in share]
    prompts, completions = [prompts[i] for i in chosen], [completions[i] for i in chosen]
    advantages = advantages[chosen]
    with torch.no_grad():
        old, mask = sampled_logprobs(model, prompts, completions)
    noise = torch.randn((8, old.shape[1]), generator=torch.Generator().manual_seed(5))  # per completion
    reference = old + 0.05 * noise[chosen]
    with balance.recording() as routings:
        logprobs, _ = sampled_logprobs(forward, prompts, completions)
        parts = policy_loss(logprobs, old, advantages, mask, 0.2, reference, kl_beta=0.05)
        total = parts.loss + balance.loss(routings, len(prompts))
    total.backward()


STEPS = {
    "nano2_pretraining": (nano2_model, pretraining, False),
    "nano3_pretraining": (nano3_model, pretraining, True),
    "nano2_sft": (nano2_model, sft, False),
    "nano3_sft": (nano3_model, sft, True),
    "nano3_grpo": (nano3_model, grpo, True),
}


def main(out: Path) -> None:
    info = setup_distributed()
    torch.set_num_threads(1)
    for name, (build, backward, moe) in STEPS.items():
        torch.manual_seed(0)
        model = build().train()
        module = CausalLMLoss(model) if backward is pretraining else model  # pretraining's forward is its loss
        ddp = DistributedDataParallel(module) if info.is_distributed else None
        balance = balance_of(model) if moe else None
        optimizer = build_optimizer(model, lr=LR, weight_decay=0.1)
        backward(model, ddp or module, ddp, info.rank, info.world_size, balance)
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if balance is not None:
            balance.after_step()
        if info.is_main:
            out.mkdir(parents=True, exist_ok=True)
            torch.save({"grads": grads, "weights": model.state_dict()}, out / f"{name}.pt")
    cleanup()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
