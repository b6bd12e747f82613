"""How close the recipe's training step comes to this machine's limit: model FLOPs utilisation (MFU).

On whatever device it runs (CPU threads, or one CUDA GPU):

1. the peak: the best of several large square matmuls in the training dtype (fp32 on a CPU with the
   step's thread count, bf16 on a GPU), 2 n^3 FLOPs each. Measured here, never a table value: it is
   the number every utilisation below is divided by.
2. the recipe's train step (nano2 stage 0 at `--scale`, default tiny on a CPU, small on a GPU): the
   model of `nemotron.models.nano2` with our chunked Mamba-2 scan on a CPU (`nemotron.models.mamba2`, as
   the step switches it on where it builds the model), the loss of `nemotron.training.losses.CausalLMLoss` (the output
   head and cross-entropy a block of tokens at a time), the step's AdamW and schedule
   (`nemotron.training.optim.adamw_with_schedule`, stage 0's defaults), gradient clipping; bf16
   autocast on a GPU; the process's malloc policy (`nemotron.training.memory.keep_freed_memory`,
   process-wide, so the baseline runs under it too; `--malloc default` leaves glibc's defaults).
   `--compile on`: the model and loss compiled as the step's `--compile on` compiles them
   (`nemotron.training.compilation.compile_forward`: CUDA graphs on a GPU), warmed up before timing.
3. the baseline, timed in the same run, round by round in turn with the recipe: the model as
   transformers builds it (`NemotronHForCausalLM(config)`), torch's default `torch.optim.AdamW`, the
   plain loss over full logits (`F.cross_entropy(model(ids).logits, targets)`), in fp32.

Each side runs in a process of its own, started once and then told to time one round after another in
turn with the other side, as a training run has its process to itself. In one process each side's
speed depended on what the other had left in malloc's heap: on an idle 2-core machine a change to the
recipe's loss alone moved the baseline's figure from ~14,500 to ~13,400 tokens/s (medians of seven
runs each).

FLOPs per token are counted by `nemotron.models.flops.training_flops` (6 x matmul weights, embeddings
out, the output head in; attention on full-attention layers; the Mamba-2 scan's own term; its
docstring has the formulas). Printed: tokens/s of both, the achieved FLOP/s, MFU = achieved / peak,
the speed-up = recipe tokens/s / baseline tokens/s, the load average while it ran (other work on a
shared machine slows both sides alike, and the speed-up is a ratio within one run), and one JSON line
with every figure (keys `mfu` and `speedup` among them) last.

    python benchmarks/bench_mfu.py                     # tiny on the CPU, 2 threads on a 2-core machine
    python benchmarks/bench_mfu.py --device cuda       # small on one GPU, bf16 autocast
    python benchmarks/bench_mfu.py --device cuda --scale medium --compile on   # compiled, CUDA graphs
    python benchmarks/bench_mfu.py --quick             # seconds: tiny shapes, the same code path
    python benchmarks/bench_mfu.py --before ff9e04b    # the recipe's own step, before a change and after

`--before REV` times, instead, the recipe's own step: nano2 stage 0's `training.py`, the command a user
runs, `--steps` steps at the scale, from REV's `src/` (`git archive`) and from this tree's, one fresh
process after the other in turns, each on stage-0 data its own tree curated. Printed: the step's own
seconds per step (its artifact's `seconds_per_step`: the loop from the first step to the last, with the
final validation and checkpoint), the medians, and after / before as the median of the rounds' ratios.
What it answers: did a change to the step's code (a loop moved onto the page, a layer swap made visible)
cost step time.

Batches are seeded random token ids over the vocabulary (`--dataset-path` reads a PretrainDataset's
train windows instead): a step costs the same whatever the tokens are.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from transformers import NemotronHForCausalLM
from transformers.utils import logging as hf_logging

from nemotron.cpu import torch_threads
from nemotron.models.device import pick_device
from nemotron.models.flops import matmul_peak, training_flops
from nemotron.models.mamba2 import use_training_scan
from nemotron.models.nano2 import build_config, build_model
from nemotron.recipes.nano2.stage0_pretrain import training
from nemotron.training.compilation import compile_forward
from nemotron.training.losses import CausalLMLoss
from nemotron.training.memory import keep_freed_memory
from nemotron.training.optim import adamw_with_schedule
from nemotron.training.run import seed_everything

VOCAB = {"tiny": 4096, "small": 8192, "medium": 32768}
MATMUL_SIZE = {"cpu": 2048, "cuda": 8192}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def recipe_step(config, device: torch.device, steps: int, compiled: bool = False):
    """One training step as stage 0 takes it (see the module docstring, 2.); `compiled`: with `--compile on`."""
    settings = training.Config()
    model = use_training_scan(build_model(config, seed=0)).to(device).train()
    loss_of = CausalLMLoss(model)
    if compiled:  # as TrainingRun.prepare compiles stage 0's loss module: fixed windows, one process
        loss_of = compile_forward(loss_of, device.type, static_shapes=True, distributed=False)
    optimizer, scheduler = adamw_with_schedule(model, settings, steps)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step(windows: torch.Tensor) -> float:
        with autocast:
            loss = loss_of(windows[:, :-1], windows[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def baseline_step(config, device: torch.device, steps: int):
    """The plain step (module docstring, 3.); `steps` is unused (torch's AdamW has no schedule)."""
    torch.manual_seed(0)
    model = NemotronHForCausalLM(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters())

    def step(windows: torch.Tensor) -> float:
        logits = model(input_ids=windows[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


SIDES = {"recipe": recipe_step, "baseline": baseline_step}


def batches(args, vocab: int, count: int, device: torch.device) -> list[torch.Tensor]:
    if args.dataset_path is not None:
        from nemotron.training.windows import TokenWindows

        dataset = training.PretrainDataset.from_path(args.dataset_path)
        windows = TokenWindows(dataset.train_prefixes, args.seq_len, args.batch, seed=0)
        found = [windows.next_batch() for _ in range(count)]
    else:
        generator = torch.Generator().manual_seed(0)
        found = [torch.randint(0, vocab, (args.batch, args.seq_len + 1), generator=generator) for _ in range(count)]
    return [batch.to(device) for batch in found]


def tokens_per_second(step, data: list[torch.Tensor], device: torch.device) -> float:
    synchronize(device)
    started = time.perf_counter()
    for windows in data:
        step(windows)
    synchronize(device)
    return sum(windows[:, 1:].numel() for windows in data) / (time.perf_counter() - started)


def profile_table(step, data: list[torch.Tensor], rows: int) -> str:
    """torch.profiler's operators by self time over `data`'s steps: where a step's time goes."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])]
    with profile(activities=activities) as p:
        for windows in data:
            step(windows)
    return p.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=40)


def setup(args) -> tuple[torch.device, str]:
    """This process's device, thread count and malloc policy; returns the device and the policy taken."""
    device = pick_device(args.device)
    seed_everything(0)
    if device.type == "cpu":
        torch.set_num_threads(torch_threads(args.threads))
    return device, "keep" if args.malloc == "keep" and keep_freed_memory() else "default"


def side(name: str, args, connection) -> None:
    """One side's process: build its step and warm it up, then time round r's steps whenever sent r."""
    hf_logging.set_verbosity_error()  # the "falling back to the PyTorch implementation" notes
    try:
        device, _ = setup(args)
        warmup = 3 if name == "recipe" and args.compile == "on" else 2  # compiling, recording CUDA graphs
        total = warmup + args.rounds * args.steps
        config = build_config(args.scale, VOCAB[args.scale])
        step = recipe_step(config, device, total, args.compile == "on") if name == "recipe" else \
            baseline_step(config, device, total)
        data = batches(args, VOCAB[args.scale], total, device)
        for windows in data[:warmup]:  # warm-up: first-call allocations, lazy initialisation
            step(windows)
        data = data[warmup:]  # the timed rounds'
    except Exception as error:  # e.g. a --dataset-path that is not a dataset: the parent says it in one line
        connection.send(str(error))
        return
    connection.send(None)  # built and warmed up
    while (round_ := connection.recv()) is not None:
        connection.send(tokens_per_second(step, data[round_ * args.steps: (round_ + 1) * args.steps], device))
    connection.send(profile_table(step, data[:args.steps], args.profile) if args.profile else "")


def step_seconds(tree: Path, command: list[str], out: Path) -> float:
    """Run one of stage 0's steps (`python -m nemotron.recipes.nano2.stage0_pretrain.<command>`) with `tree`'s
    src/ first on the path; the seconds per step its artifact in `out` records (curation: 0)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", f"nemotron.recipes.nano2.stage0_pretrain.{command[0]}",
                           *command[1:], "--output-dir", str(out)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        sys.exit(f"error: {command[0]} from {tree} exited {done.returncode}: {last}")
    return json.loads((out / "metadata.json").read_text())["metrics"].get("seconds_per_step") or 0.0


def before_and_after(args) -> None:
    """--before REV: the real stage-0 step from REV's tree and from this one, in turns (module docstring)."""
    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", args.before, "src"],
                             capture_output=True)
    if archive.returncode != 0:
        sys.exit(f"error: --before {args.before}: git archive failed ({archive.stderr.decode().strip()}); "
                 "give a commit of this repository")
    steps = 4 if args.quick else args.steps
    rounds = 1 if args.quick else args.rounds
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": Path(tmp) / "before", "after": repo}
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(trees["before"], filter="data")
        data = {}
        for name, tree in trees.items():  # each tree curates with its own code: its artifact's schema
            data[name] = Path(tmp) / f"{name}-data"
            step_seconds(tree, ["data_curation", "--scale", args.scale], data[name])
        seconds: dict[str, list[float]] = {name: [] for name in trees}
        for round_ in range(rounds):
            for name, tree in trees.items():
                out = Path(tmp) / f"{name}-run{round_}"
                seconds[name].append(step_seconds(tree, [
                    "training", "--scale", args.scale, "--dataset-path", str(data[name]), "--steps", str(steps),
                    "--eval-every", str(steps), "--checkpoint-every", str(steps)], out))
            print(f"round {round_ + 1}: before {seconds['before'][-1]:.3f} s/step, after {seconds['after'][-1]:.3f}",
                  file=sys.stderr)
    before, after = statistics.median(seconds["before"]), statistics.median(seconds["after"])
    # Paired by round: the two runs of a round are back to back, so a slow spell of the machine (a run's
    # seconds per step moved 0.13-0.34 between rounds on an idle 2-core VM) slows both alike.
    paired = statistics.median(a / b for a, b in zip(seconds["after"], seconds["before"], strict=True))
    load = (load_before + os.getloadavg()[0]) / 2
    print(f"nano2 stage 0 training.py at {args.scale}, {steps} steps a run, {rounds} runs a side in turns, "
          f"load average ~{load:.1f} on {os.cpu_count()} cores")
    print(f"before ({args.before}) {before:.3f} s/step, after (this tree) {after:.3f} s/step (medians)")
    print(f"after / before {paired:.3f} (the median of the {rounds} rounds' ratios)")
    print(json.dumps({"before": args.before, "scale": args.scale, "steps": steps, "rounds": rounds,
                      "before_seconds_per_step": seconds["before"], "after_seconds_per_step": seconds["after"],
                      "load_average": round(load, 2), "after_over_before": paired}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--scale", default=None, choices=sorted(VOCAB), help="default: tiny on a CPU, small on a GPU")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: the step's policy)")
    parser.add_argument("--compile", default="off", choices=["off", "on"],
                        help="on: the recipe's model and loss compiled as --compile on trains them (baseline: eager)")
    parser.add_argument("--batch", type=int, default=8, help="windows per step (stage 0's micro-batch)")
    parser.add_argument("--seq-len", type=int, default=None, help="default: stage 0's at the scale")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps per round and side (default 6; with --before, 60 a run)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, recipe and baseline in turn; medians")
    parser.add_argument("--matmul-size", type=int, default=None, help="n of the peak's n x n products")
    parser.add_argument("--dataset-path", type=Path, default=None, help="train on a PretrainDataset's windows")
    parser.add_argument("--malloc", default="keep", choices=["keep", "default"],
                        help="keep: the training steps' malloc policy (keep_freed_memory); default: glibc's")
    parser.add_argument("--profile", type=int, default=0, metavar="ROWS", help="print the top ROWS operators of each")
    parser.add_argument("--quick", action="store_true", help="seconds: 2 x 64 tokens, 2 steps, 1 round, n=256")
    parser.add_argument("--before", metavar="REV", default=None,
                        help="time the recipe's own stage-0 step from REV's tree and this one, in turns (docstring)")
    args = parser.parse_args()
    if args.before is not None:
        args.scale, args.steps = args.scale or "tiny", args.steps or 60
        return before_and_after(args)
    args.steps = args.steps or 6

    device, malloc = setup(args)
    args.device = device.type  # the sides' processes take this device
    scale = args.scale = args.scale or ("tiny" if device.type == "cpu" else "small")
    args.seq_len = args.seq_len or training.SEQ_LEN[scale]
    if args.quick:
        args.batch, args.seq_len, args.steps, args.rounds, args.matmul_size = 2, 64, 2, 1, 256
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    load_before = os.getloadavg()[0]

    peak = matmul_peak(device, dtype, args.matmul_size or MATMUL_SIZE[device.type], repeats=5)
    flops = training_flops(build_config(scale, VOCAB[scale]), args.seq_len)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter and heap per side; safe with CUDA
    connections = {}
    for name in SIDES:
        connections[name], theirs = context.Pipe()
        context.Process(target=side, args=(name, args, theirs), daemon=True).start()
    failed = {name: connection.recv() for name, connection in connections.items()}  # None: ready
    for name, error in failed.items():
        if error is not None:
            sys.exit(f"error: the {name} side: {error}")
    speed: dict[str, list[float]] = {name: [] for name in SIDES}
    for round_ in range(args.rounds):
        for name, connection in connections.items():
            connection.send(round_)
            speed[name].append(connection.recv())
        done = ", ".join(f"{name} {values[-1]:,.0f} tokens/s" for name, values in speed.items())
        print(f"round {round_ + 1}: {done}", file=sys.stderr)
    for name, connection in connections.items():
        connection.send(None)
        if table := connection.recv():
            print(f"--- {name}: torch.profiler, {args.steps} steps, top {args.profile} rows by self time ---")
            print(table)

    recipe, baseline = statistics.median(speed["recipe"]), statistics.median(speed["baseline"])
    achieved = recipe * flops.per_token
    load = (load_before + os.getloadavg()[0]) / 2
    where = f"{torch.get_num_threads()} threads" if device.type == "cpu" else torch.cuda.get_device_name(device)
    print(f"device {device.type} ({where}), nano2 {scale}, batch {args.batch} x {args.seq_len}, "
          f"recipe {'compiled' if args.compile == 'on' else 'eager'}, a process per side, "
          f"load average ~{load:.1f} on {os.cpu_count()} cores, malloc {malloc}")
    print(f"peak    {peak / 1e9:10,.1f} GFLOP/s  ({str(dtype).removeprefix('torch.')} matmul, measured here)")
    print(f"FLOPs   {flops.per_token / 1e6:10,.2f} M per token  (6 x {flops.matmul_weights / 1e6:.3f} M matmul "
          f"weights {flops.matmul / 1e6:.2f} M + attention {flops.attention / 1e6:.2f} M "
          f"+ Mamba scan {flops.mamba_scan / 1e6:.2f} M)")
    print(f"recipe  {recipe:10,.0f} tokens/s  {achieved / 1e9:,.1f} GFLOP/s  MFU {achieved / peak:.1%}")
    print(f"baseline{baseline:10,.0f} tokens/s  {baseline * flops.per_token / 1e9:,.1f} GFLOP/s  "
          f"MFU {baseline * flops.per_token / peak:.1%}")
    print(f"speed-up {recipe / baseline:.2f}x  (recipe step over the baseline, medians of {args.rounds} rounds)")
    print(json.dumps({
        "device": device.type, "device_name": where, "scale": scale, "batch": args.batch, "seq_len": args.seq_len,
        "threads": torch.get_num_threads(), "malloc": malloc, "load_average": round(load, 2), "peak_flops": peak,
        "flops_per_token": flops.per_token, "matmul_weights": flops.matmul_weights,
        "attention_flops_per_token": flops.attention, "mamba_scan_flops_per_token": flops.mamba_scan,
        "recipe_tokens_per_second": recipe, "baseline_tokens_per_second": baseline, "achieved_flops": achieved,
        "mfu": achieved / peak, "baseline_mfu": baseline * flops.per_token / peak, "speedup": recipe / baseline,
        "rounds": args.rounds, "steps_per_round": args.steps, "quick": args.quick, "compile": args.compile,
    }))


if __name__ == "__main__":
    main()
