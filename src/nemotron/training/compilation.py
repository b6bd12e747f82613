"""Whether a training step compiles its forward pass, and how: `--compile off | on | auto` (torch.compile).

torch.compile (TorchDynamo and inductor) traces the forward pass `TrainingRun.prepare` hands the step (the
model; in pretraining `CausalLMLoss`, the model and its loss as one module) and generates fused kernels for
it and for its backward pass. It costs compile time in the first steps (tens of seconds on a CPU, once per
process; less with a warm cache in TORCHINDUCTOR_CACHE_DIR) and saves time at every step after, so it pays
in a run longer than its break-even:

    break-even steps = (first compiled steps - as many eager steps) / (eager step - compiled step)

- off (the default): eager. Every recipe's golden digests are eager runs (scripts/repro.py).
- on: compiled. On CUDA, a forward whose shapes never change (pretraining's fixed windows), in one process,
  is also captured as CUDA graphs (mode="reduce-overhead": each graph's kernels replayed with one launch,
  what a small, launch-bound model needs). With changing shapes (packed SFT rows, DPO pairs, GRPO groups)
  a graph per shape costs more than it saves, and under DDP the all-reduce hooks run between the graphs:
  the default mode there. On a CPU: the default mode (CUDA graphs are CUDA's).
- auto: on when the run's steps exceed the break-even measured for this device, scale and thread count
  (`BREAK_EVEN`), else off; without a measurement, off. `choose` returns the decision and the reason the
  step's log prints; the artifact's metrics say `compiled`.

auto decides from the config, the scale, the thread count and the run's total steps (not the steps left),
so a CPU run stays deterministic and a resumed run decides as the run it continues did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# `--compile auto`'s break-even: optimizer steps of nano2 stage 0's step (its micro-batch of 8 windows at the
# scale's length, AdamW, clipping) after which the compiled run, compile time included, is ahead; None: the
# compiled step is no faster. Per (device, scale, torch threads); for a thread count not measured, the
# nearest measured one. A cold compile cache (a user's first run). Measured 2026-12-02 (07:05 to 07:17 UTC) on
# this project's 2-core x86-64 machine with nothing else running (load average 1.2-2.1, the benchmark's own
# processes; fp32 matmul 79-81 GFLOP/s on one thread, 148-161 on two), with
#     python benchmarks/bench_compile.py --scales tiny small --threads 1 2
# which prints these rows (the comments are its figures); docs/performance.md has the table. No GPU rows yet:
# CUDA runs stay eager under auto until `bench_compile.py --device cuda` adds them (one of the commands for
# scripts/gpu_check.sh).
BREAK_EVEN: dict[tuple[str, str, int | None], int | None] = {
    ("cpu", "tiny", 1): 1749,  # compile 51 s, 0.278 -> 0.249 s/step, load 2.1
    ("cpu", "tiny", 2): 1665,  # compile 50 s, 0.196 -> 0.166 s/step, load 1.5
    ("cpu", "small", 1): 177,  # compile 119 s, 5.232 -> 4.558 s/step, load 1.2
    ("cpu", "small", 2): 137,  # compile 124 s, 3.423 -> 2.516 s/step, load 1.5
}


@dataclass(frozen=True)
class CompileChoice:
    """Whether to compile, and why (one line for the step's log)."""

    compile: bool
    why: str


def break_even(device_type: str, scale: str, threads: int) -> tuple[int | None, int | None] | None:
    """(break-even steps, the thread count measured) from `BREAK_EVEN`, or None where nothing is measured.
    On CUDA threads do not count (rows have None); on a CPU the nearest measured thread count (ties: fewer)."""
    rows = {t: steps for (device, s, t), steps in BREAK_EVEN.items() if device == device_type and s == scale}
    if not rows:
        return None
    measured = min(rows, key=lambda t: (0, 0) if t is None else (abs(t - threads), t))
    return rows[measured], measured


def choose(setting: bool | str, device_type: str, scale: str, threads: int, steps: int) -> CompileChoice:
    """`--compile` (True, False or "auto") for a run of `steps` optimizer steps at `scale` on this device."""
    if setting != "auto":
        return CompileChoice(bool(setting), "compiled (--compile on)" if setting else "eager")
    found = break_even(device_type, scale, threads)
    if found is None:
        return CompileChoice(False, f"eager (--compile auto: no break-even measured for {scale} on {device_type}; "
                                    "benchmarks/bench_compile.py measures it)")
    needed, measured = found
    where = f"{scale} on {device_type}" + (f" at {measured} threads" if measured is not None else "")
    if needed is None:
        return CompileChoice(False, f"eager (--compile auto: compiling does not pay at {where})")
    if steps > needed:
        return CompileChoice(True, f"compiled (--compile auto: {steps} steps, past the break-even of {needed} "
                                   f"at {where})")
    return CompileChoice(False, f"eager (--compile auto: {steps} steps, within the break-even of {needed} at {where})")


def compile_forward(forward: Any, device_type: str, *, static_shapes: bool, distributed: bool) -> Any:
    """`forward` under torch.compile, in the mode of the module docstring: CUDA graphs on CUDA where the shapes
    are static and one process trains; otherwise the default mode, with dynamic=None where shapes change
    (compiled for the first shapes, then once more with symbolic sizes instead of once per length)."""
    import torch

    if device_type == "cuda" and static_shapes and not distributed:
        return torch.compile(forward, mode="reduce-overhead", dynamic=False)
    return torch.compile(forward, dynamic=False if static_shapes else None)
