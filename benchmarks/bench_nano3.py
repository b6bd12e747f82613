"""nano3: the MoE model's training throughput against its dense counterpart with the same active parameters.

Both are built from `nemotron.models.nano3` at `--scale` (the dense one by `dense_counterpart`: every MoE
layer an MLP as wide as the experts a token visits plus the shared expert), and trained on the same
random token batches (8 x 256 at tiny) with AdamW, the MoE one with its load-balancing loss and
expert-bias update exactly as stage-0 training runs them (`nemotron.training.moe.ExpertBalance`). The
two are timed alternately, `--rounds` times `--steps` steps each after a warm-up, so a busy machine
slows both alike; their Mamba-2 layers use the recipe's training scan (`use_training_scan`, as stage-0
training builds them). The script prints tokens/s of each and the MoE / dense seconds per step: the
`MOE_STEP_TIME_RATIO` stage-0 training uses for the dense run of the MoE run's time (`--dense --equal-time`).

Why the MoE step is slower at all with the same active parameters: transformers' `NemotronHExperts` runs
the chosen experts one after another (a Python loop over experts with index_select / index_add), where a
dense MLP is two matrix multiplications; Megatron's grouped GEMM removes that gap on a GPU.

    python benchmarks/bench_nano3.py                   # tiny, 2 rounds of 10 steps
    python benchmarks/bench_nano3.py --scale small --steps 5
    python benchmarks/bench_nano3.py --quick           # 1 round of 1 step on 2 x 64 tokens
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from nemotron.cpu import torch_threads
from nemotron.models import nano3
from nemotron.models.loading import quiet_cuda_kernel_notes
from nemotron.models.mamba2 import use_training_scan
from nemotron.training.moe import ExpertBalance
from nemotron.training.optim import build_optimizer


def timed_steps(model, batch: torch.Tensor, steps: int, balance: ExpertBalance, optimizer) -> float:
    """Seconds for `steps` training steps (forward, losses, backward, AdamW, bias update) on `batch`."""
    started = time.perf_counter()
    for _ in range(steps):
        with balance.recording() as routings:
            logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()) + balance.loss(routings, len(batch))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        balance.after_step()
        balance.log()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--num-threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="1 step of 2 x 64 tokens: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds, args.batch, args.seq_len = 1, 1, 2, 64
    quiet_cuda_kernel_notes()
    torch.set_num_threads(torch_threads(args.num_threads))

    moe_config = nano3.build_config(args.scale, nano3.VOCAB_SIZES[args.scale])
    models = {"moe": use_training_scan(nano3.build_model(moe_config, seed=0)),
              "dense": use_training_scan(nano3.build_model(nano3.dense_counterpart(moe_config), seed=0))}
    parts = {name: (ExpertBalance(model, moe_config.num_experts_per_tok, nano3.AUX_LOSS_COEFF, nano3.BIAS_UPDATE_RATE),
                    build_optimizer(model, lr=1e-3)) for name, model in models.items()}
    batch = torch.randint(0, moe_config.vocab_size, (args.batch, args.seq_len + 1),
                          generator=torch.Generator().manual_seed(0))
    seconds = dict.fromkeys(models, 0.0)
    for name, model in models.items():
        timed_steps(model, batch, 2, *parts[name])  # warm-up: allocator, first-call costs
    for _ in range(args.rounds):
        for name, model in models.items():
            seconds[name] += timed_steps(model, batch, args.steps, *parts[name])

    tokens = args.batch * args.seq_len * args.steps * args.rounds
    dense = nano3.dense_counterpart(moe_config)
    print(f"nano3 {args.scale}: {nano3.count_parameters(moe_config) / 1e6:.2f}M parameters, "
          f"{nano3.active_parameters(moe_config) / 1e6:.2f}M active; dense counterpart "
          f"{nano3.count_parameters(dense) / 1e6:.2f}M; threads {torch.get_num_threads()}")
    print("| model | s/step | tokens/s |\n|---|---|---|")
    for name in models:
        per_step = seconds[name] / (args.steps * args.rounds)
        print(f"| {name} | {per_step:.3f} | {tokens / seconds[name]:,.0f} |")
    print(f"MoE / dense seconds per step: {seconds['moe'] / seconds['dense']:.2f}x "
          "(stage-0 training's MOE_STEP_TIME_RATIO)")


if __name__ == "__main__":
    main()
