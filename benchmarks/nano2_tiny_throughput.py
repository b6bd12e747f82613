"""Training throughput of the tiny nano2 model on this CPU, against baselines measured in the same run.

One training step = forward + backward + AdamW step on a (batch 8 x 256 tokens) batch, the stage-0
tiny pretraining shape. Printed, for each variant, tokens/s and the ratio to the tiny nano2 model:

    tiny nano2            the SCALES["tiny"] model, called with use_cache=False (how we train)
    use_cache=True        the same model called with the generation default: a wasted cache per step
    chunk_size=32 / 128   the Mamba-2 reference scan with other chunk lengths than tiny's 64
    all-attention         the same widths with every Mamba layer replaced by attention (a Transformer)

Run: python benchmarks/nano2_tiny_throughput.py [--steps 8] [--vocab 4096] [--threads N]
     python benchmarks/nano2_tiny_throughput.py --quick     # 3 steps of batch 1 (one timed)
Timings are medians over the steps after two warm-up steps; run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers.utils import logging as hf_logging

from nemotron.models.nano2 import SCALES, build_config, build_model, count_parameters
from nemotron.training.optim import build_optimizer

BATCH, SEQ_LEN = 8, 256


def tokens_per_second(config, steps: int, use_cache: bool = False, batch_size: int = BATCH) -> float:
    model = build_model(config, seed=0).train()
    optimizer = build_optimizer(model, lr=1e-3)
    shape = (steps, batch_size, SEQ_LEN + 1)
    data = torch.randint(0, config.vocab_size, shape, generator=torch.Generator().manual_seed(0))
    times = []
    for batch in data:
        start = time.perf_counter()
        logits = model(input_ids=batch[:, :-1], use_cache=use_cache).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab_size), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return batch_size * SEQ_LEN / statistics.median(times[2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: all cores)")
    parser.add_argument("--quick", action="store_true", help="3 steps of batch 1 (one timed): checks it runs")
    args = parser.parse_args()
    batch_size = BATCH
    if args.quick:
        args.steps, batch_size = 3, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()  # the "falling back to the PyTorch implementation" notices
    torch.set_flush_denormal(True)

    tiny = build_config("tiny", args.vocab)
    all_attention = SCALES["tiny"]["hybrid_override_pattern"].replace("M", "*")
    variants = [
        ("tiny nano2", tiny, False),
        ("use_cache=True", tiny, True),
        ("chunk_size=32", build_config("tiny", args.vocab, chunk_size=32), False),
        ("chunk_size=128", build_config("tiny", args.vocab, chunk_size=128), False),
        (f"all-attention {all_attention}",
         build_config("tiny", args.vocab, hybrid_override_pattern=all_attention), False),
    ]
    print(f"threads={torch.get_num_threads()} batch={batch_size}x{SEQ_LEN} vocab={args.vocab}", file=sys.stderr)
    baseline = None
    for name, config, use_cache in variants:
        speed = tokens_per_second(config, args.steps, use_cache, batch_size)
        baseline = baseline or speed
        print(
            f"{name:28s} params={count_parameters(config) / 1e6:5.2f}M  tokens/s={speed:8,.0f}  "
            f"ratio={speed / baseline:5.2f}x"
        )


if __name__ == "__main__":
    main()
