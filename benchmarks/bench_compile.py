"""Does `--compile` (torch.compile) pay for itself? Compile time, steady-state speed-up, break-even step.

Times the stage-0 training step of a nano2 model (forward, cross-entropy, backward, AdamW step) on
fixed windows of random token ids, eager and compiled, in one process with the same thread count:

- eager: mean seconds per step over `--steps` steps, after 3 warm-up steps;
- compiled: the first step (which compiles), then the mean over `--steps` steps;
- break-even: compile overhead (first compiled step minus an eager step) divided by the time saved per
  step; `--compile` pays for itself in a run longer than that many steps.

    python benchmarks/bench_compile.py                      # tiny, micro-batch 8 x 256 tokens
    python benchmarks/bench_compile.py --scale small --steps 10
    python benchmarks/bench_compile.py --quick              # one MLP layer, 2 steps of batch 1

The default is off: a tiny stage-0 run is 300 steps; turn it on where the break-even is well below
the run's steps. A warm compile cache (TORCHINDUCTOR_CACHE_DIR, kept between runs) shortens the first
step of later runs; the script prints a second compiled run in a fresh process for that case.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SEQ = {"tiny": 256, "small": 512}


def time_steps(scale: str, compiled: bool, steps: int, batch: int, pattern: str | None = None) -> dict:
    # imported here, in the child that measures: the parent only launches children and skips their import time
    import torch
    import torch.nn.functional as F

    from nemotron.cpu import torch_threads
    from nemotron.models.nano2 import build_config, build_model
    from nemotron.training.optim import build_optimizer
    from nemotron.training.run import seed_everything

    seed_everything(0)
    torch.set_num_threads(torch_threads())
    overrides = {"hybrid_override_pattern": pattern} if pattern else {}
    model = build_model(build_config(scale, 4096, **overrides), seed=0).train()
    optimizer = build_optimizer(model, lr=1e-3)
    forward = torch.compile(model) if compiled else model
    windows = torch.randint(5, 4096, (batch, SEQ[scale] + 1))

    def step() -> float:
        started = time.perf_counter()
        logits = forward(input_ids=windows[:, :-1], use_cache=False).logits
        F.cross_entropy(logits.float().flatten(0, 1), windows[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    first = step()
    for _ in range(2):
        step()
    times = [step() for _ in range(steps)]
    return {"first": first, "per_step": sum(times) / len(times), "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="tiny", choices=sorted(SEQ))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--one", choices=["eager", "compiled"], help=argparse.SUPPRESS)
    parser.add_argument("--pattern", help="layer pattern instead of the scale's (e.g. '-': one MLP layer)")
    parser.add_argument("--quick", action="store_true",
                        help="one MLP layer, 2 steps of batch 1, no warm-cache run: checks it runs")
    args = parser.parse_args()
    if args.quick:  # compiling the Mamba scan alone takes minutes of CPU
        args.steps, args.batch, args.pattern = 2, 1, "-"
    if args.one:  # a child process: one measurement, as JSON
        print(json.dumps(time_steps(args.scale, args.one == "compiled", args.steps, args.batch, args.pattern)))
        return

    cache = tempfile.mkdtemp(prefix="inductor-cache-")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}

    def child(kind: str) -> dict:
        command = [sys.executable, __file__, "--scale", args.scale, "--steps", str(args.steps),
                   "--batch", str(args.batch), "--one", kind, *(["--pattern", args.pattern] if args.pattern else [])]
        return json.loads(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout)

    eager, cold = child("eager"), child("compiled")
    warm = None if args.quick else child("compiled")
    tokens = args.batch * SEQ[args.scale]
    saved = eager["per_step"] - cold["per_step"]
    print(f"nano2 {args.scale}{f' (layers {args.pattern})' if args.pattern else ''}, {tokens} tokens per step, "
          f"{eager['threads']} threads")
    print(f"eager:     {eager['per_step'] * 1e3:8.1f} ms/step  {tokens / eager['per_step']:9,.0f} tokens/s")
    print(f"compiled:  {cold['per_step'] * 1e3:8.1f} ms/step  {tokens / cold['per_step']:9,.0f} tokens/s  "
          f"speed-up {eager['per_step'] / cold['per_step']:.2f}x")
    for name, run in (("cold cache", cold), ("warm cache", warm)):
        if run is None:
            continue
        overhead = run["first"] - eager["per_step"]
        breakeven = f"{overhead / saved:,.0f} steps" if saved > 0 else "never (no speed-up)"
        print(f"compile ({name}): first step {run['first']:6.1f} s; pays for itself after {breakeven}")


if __name__ == "__main__":
    main()
