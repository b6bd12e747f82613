"""How many torch threads should evaluation use? One thread vs torch's default, on evaluation work.

Times the three kinds of work the nano2 evaluation steps do, with a randomly initialised model of the
given scale (`nemotron.models.nano2`), first with 1 intra-op thread and then with torch's default
(the number of cores), and prints the times and the ratio default/one (> 1.0 means one thread is faster):
- held-out loss on pretraining windows (32 windows of 256 tokens, batch 8);
- chat-length scoring (256 sequences of 20-120 tokens, batch 8, sorted by length as the steps do);
- greedy generation (4 prompts, 48 new tokens, with the Mamba / KV cache).
The load average is printed too: on a machine whose cores are busy with other work, extra threads
wait for descheduled siblings at every op, and the ratio says how much that costs.

    python benchmarks/bench_eval_threads.py [--scale tiny] [--repeats 3]
    python benchmarks/bench_eval_threads.py --quick     # an eighth of the work, timed once
"""

import argparse
import os
import sys
import time

import torch

from nemotron.evaluation.generation import greedy_samples
from nemotron.evaluation.language_modeling import heldout_loss
from nemotron.models.nano2 import VOCAB_SIZES, build_config, build_model


class IdTokenizer:
    """Just enough tokenizer for greedy_samples on token-id prompts."""

    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def workloads(vocab_size: int, share: int = 1):
    """The three kinds of work, divided by `share` (8 in --quick)."""
    g = torch.Generator().manual_seed(0)
    windows = [torch.randint(5, vocab_size, (257,), generator=g) for _ in range(32 // share)]
    lengths = torch.randint(20, 121, (256 // share,), generator=g).tolist()
    chats = [torch.randint(5, vocab_size, (n,), generator=g) for n in lengths]
    prompts = [torch.randint(5, vocab_size, (12,), generator=g).tolist() for _ in range(4)]
    return {
        "held-out windows": lambda m: heldout_loss(m, windows, batch_size=8),
        "chat scoring": lambda m: heldout_loss(m, sorted(chats, key=len), batch_size=8),
        "greedy generation": lambda m: greedy_samples(m, IdTokenizer(), prompts, 48 // share),
    }


def best_time(work, model, repeats: int) -> float:
    work(model)  # warm-up: allocator, lazy kernels
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work(model)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="tiny", choices=["tiny", "small", "medium"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="an eighth of the work, timed once: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1

    default_threads = torch.get_num_threads()
    model = build_model(build_config(args.scale, VOCAB_SIZES[args.scale]), seed=0).eval()
    print(f"scale {args.scale}, torch default {default_threads} threads, cores {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.2f} (before)", file=sys.stderr)
    print(f"{'work':<20} {'1 thread':>10} {f'{default_threads} threads':>11} {'ratio':>7}")
    for name, work in workloads(VOCAB_SIZES[args.scale], 8 if args.quick else 1).items():
        torch.set_num_threads(1)
        one = best_time(work, model, args.repeats)
        torch.set_num_threads(default_threads)
        default = best_time(work, model, args.repeats)
        print(f"{name:<20} {one:>9.2f}s {default:>10.2f}s {default / one:>6.2f}x")
    print(f"load average {os.getloadavg()[0]:.2f} (after)", file=sys.stderr)


if __name__ == "__main__":
    main()
