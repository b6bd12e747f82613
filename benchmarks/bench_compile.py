"""Does `--compile` pay for itself, and after how many steps? Both sides, per scale and thread count.

For each scale (`--scales`) and thread count (`--threads`) on the CPU, or per scale on one GPU
(`--device cuda`), two fresh processes time nano2 stage 0's training step as the recipe takes it
(bench_mfu.py's `recipe_step`: our Mamba-2 scan, the blocked loss, AdamW, clipping; 8 windows of the
scale's length, random token ids), the compiled one with an empty compile cache (a user's first run):

- eager: seconds per step, the mean of `--steps` steps after 3 warm-up steps;
- compiled (as `--compile on` trains: `nemotron.training.compilation.compile_forward`, CUDA graphs on a
  GPU): the first 3 steps (compiling the forward and backward passes; recording the graphs) and the mean
  of `--steps` steps after them;
- compile seconds = the first 3 compiled steps - 3 eager steps; break-even = compile seconds / (eager -
  compiled seconds per step): a run with more steps than that finishes sooner compiled, compile included.

Printed: one line per scale and thread count with both sides, the recipe's stage-0 steps at that scale and
what `--compile auto` decides for them (with the table in the code, and with this run's figure); then the
rows of `nemotron.training.compilation.BREAK_EVEN` as measured here, to paste there and into
docs/performance.md, with the fp32 matmul peak and the load average beside them (a shared machine slows
both sides, and compiling most); last, one JSON line with every figure.

    python benchmarks/bench_compile.py                        # tiny and small, 1 and 2 threads (~15 min idle)
    python benchmarks/bench_compile.py --scales tiny --threads 2 --steps 30
    python benchmarks/bench_compile.py --warm                 # also a compiled run with the cache left warm
    python benchmarks/bench_compile.py --device cuda --scales small medium    # one GPU, bf16 autocast
    python benchmarks/bench_compile.py --quick                # one MLP layer, 2 x 64 tokens: checks it runs

A warm cache (TORCHINDUCTOR_CACHE_DIR kept between runs; by default a folder under /tmp) shortens the
compile of later runs of the same shapes; `--warm` prints that case. `--compile auto` uses the cold figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

WARMUP = 3  # the first compiled steps: forward and backward compiled, CUDA graphs warmed up and recorded


def measure(kind: str, scale: str, threads: int, steps: int, device_name: str, quick: bool) -> dict:
    """In a child process: time `WARMUP` + `steps` steps of the recipe's stage-0 step, eager or compiled."""
    # imported here: the parent only starts children, and skips the seconds of importing torch
    import torch
    from bench_mfu import MATMUL_SIZE, VOCAB, recipe_step, synchronize

    from nemotron.models.device import pick_device
    from nemotron.models.flops import matmul_peak
    from nemotron.models.nano2 import build_config
    from nemotron.recipes.nano2.stage0_pretrain.training import SEQ_LEN
    from nemotron.training.run import seed_everything

    device = pick_device(device_name)
    seed_everything(0)
    if device.type == "cpu":
        torch.set_num_threads(threads)
    overrides = {"hybrid_override_pattern": "-"} if quick else {}  # --quick: one MLP layer compiles in seconds
    batch, seq_len = (2, 64) if quick else (8, SEQ_LEN[scale])
    step = recipe_step(build_config(scale, VOCAB[scale], **overrides), device, WARMUP + steps, kind == "compiled")
    generator = torch.Generator().manual_seed(0)
    data = [torch.randint(0, VOCAB[scale], (batch, seq_len + 1), generator=generator).to(device)
            for _ in range(WARMUP + steps)]

    def timed(windows: torch.Tensor) -> float:
        synchronize(device)
        started = time.perf_counter()
        step(windows)
        synchronize(device)
        return time.perf_counter() - started

    first = sum(timed(windows) for windows in data[:WARMUP])
    per_step = sum(timed(windows) for windows in data[WARMUP:]) / steps
    peak = None
    if kind == "eager":  # the machine's matmul speed at this thread count, for the table's comment
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        peak = matmul_peak(device, dtype, 256 if quick else MATMUL_SIZE[device.type], repeats=3)
    return {"first": first, "per_step": per_step, "threads": torch.get_num_threads(), "peak_flops": peak,
            "tokens": batch * seq_len}


def child(args, kind: str, scale: str, threads: int, cache: str) -> dict:
    """Run `measure` in a fresh interpreter with `threads` threads and compile cache `cache`; with its load."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": str(threads),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [sys.executable, __file__, "--one", kind, "--scales", scale, "--threads", str(threads),
               "--steps", str(args.steps), "--device", args.device, *(["--quick"] if args.quick else [])]
    load = os.getloadavg()[0]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no error output"]
        sys.exit(f"error: the {kind} run of {scale} at {threads} threads exited {done.returncode}: {tail[0]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load": (load + os.getloadavg()[0]) / 2}


def break_even_steps(eager: dict, compiled: dict) -> tuple[float, int | None]:
    """(compile seconds, break-even steps or None when the compiled step is not faster)."""
    compile_seconds = compiled["first"] - WARMUP * eager["per_step"]
    saved = eager["per_step"] - compiled["per_step"]
    return compile_seconds, (max(1, round(compile_seconds / saved)) if saved > 0 else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--scales", nargs="+", default=["tiny", "small"], choices=["tiny", "small", "medium"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2], help="CPU threads (ignored on cuda)")
    parser.add_argument("--steps", type=int, default=15, help="timed steps after the 3 first ones, per run")
    parser.add_argument("--warm", action="store_true", help="also time a compiled run with the cache left warm")
    parser.add_argument("--one", choices=["eager", "compiled"], help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="one MLP layer, 2 x 64 tokens, 2 steps, 1 thread")
    args = parser.parse_args()
    if args.quick:
        args.scales, args.threads, args.steps = ["tiny"], [1], 2
    if args.device == "cuda":
        args.threads = [1]  # one row per scale: the GPU does the work
    if args.one:  # a child process: one measurement, as a JSON line
        print(json.dumps(measure(args.one, args.scales[0], args.threads[0], args.steps, args.device, args.quick)))
        return

    from nemotron.recipes.nano2.stage0_pretrain.training import STEPS
    from nemotron.training.compilation import choose

    rows = []
    for scale in args.scales:
        for threads in args.threads:
            cache = tempfile.mkdtemp(prefix="inductor-cache-")  # empty: the compiled run compiles from scratch
            try:
                eager = child(args, "eager", scale, threads, cache)
                cold = child(args, "compiled", scale, threads, cache)
                warm = child(args, "compiled", scale, threads, cache) if args.warm else None
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            compile_seconds, needed = break_even_steps(eager, cold)
            row = {"device": args.device, "scale": scale, "threads": threads if args.device == "cpu" else None,
                   "tokens_per_step": eager["tokens"], "eager_seconds_per_step": eager["per_step"],
                   "compiled_seconds_per_step": cold["per_step"], "speedup": eager["per_step"] / cold["per_step"],
                   "compile_seconds": compile_seconds, "break_even_steps": needed, "recipe_steps": STEPS[scale],
                   "auto_compiles": choose("auto", args.device, scale, threads, STEPS[scale]).compile,
                   "peak_flops": eager["peak_flops"], "load_average": (eager["load"] + cold["load"]) / 2}
            if warm is not None:
                row["warm_compile_seconds"], row["warm_break_even_steps"] = break_even_steps(eager, warm)
            rows.append(row)
            where = f"{scale}{' (one MLP layer)' if args.quick else ''}, " + \
                    (f"{threads} thread{'s' * (threads > 1)}" if args.device == "cpu" else "cuda")
            pays = f"{needed:,} steps" if needed is not None else "never (no faster)"
            measured_auto = needed is not None and STEPS[scale] > needed
            print(f"{where}: eager {eager['per_step']:.3f} s/step | compiled {cold['per_step']:.3f} s/step "
                  f"({row['speedup']:.2f}x) after compiling {compile_seconds:.1f} s | break-even {pays} | "
                  f"stage 0 runs {STEPS[scale]:,}: auto {'compiles' if row['auto_compiles'] else 'eager'} "
                  f"(this figure: {'compiles' if measured_auto else 'eager'}) | load {row['load_average']:.1f}")
            if warm is not None:
                warm_pays = f"{row['warm_break_even_steps']:,} steps" if row["warm_break_even_steps"] else "never"
                print(f"{where}, warm cache: compiling {row['warm_compile_seconds']:.1f} s, break-even {warm_pays}")

    print(f"\nnemotron.training.compilation.BREAK_EVEN rows ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} now; cold cache):")
    for row in rows:
        peak = f", {row['peak_flops'] / 1e9:,.0f} GFLOP/s matmul" if row["peak_flops"] else ""
        print(f"    ({row['device']!r}, {row['scale']!r}, {row['threads']}): {row['break_even_steps']},  "
              f"# compile {row['compile_seconds']:.0f} s, {row['eager_seconds_per_step']:.3f} -> "
              f"{row['compiled_seconds_per_step']:.3f} s/step{peak}, load {row['load_average']:.1f}")
    print(json.dumps({"speedup": rows[-1]["speedup"], "quick": args.quick, "steps": args.steps, "rows": rows}))


if __name__ == "__main__":
    main()
