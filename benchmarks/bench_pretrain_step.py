"""What the stage-0 training step costs on top of a bare training loop, measured side by side.

Two ways to train the same model on the same batch shape, interleaved round by round:

    recipe step   the real `stage0_pretrain.training.main` on a real PretrainDataset: seeded windows
                  read from the bin/idx shards, gradient clipping, LR schedule, loss all-reduce,
                  a metrics.jsonl line and a progress-bar update per step
    bare loop     forward + cross-entropy + backward + AdamW step + zero_grad on the same model shape,
                  over batches read into memory beforehand (what a training step cannot do less)

The step reports its own loop time (`seconds_per_step` x steps in the artifact's metrics), which
also holds the validation pass and checkpoint it always makes at its last step. To leave those out,
each round runs the step twice, with N1 and N2 steps, and counts only the difference:
(N2 - N1) steps in (loop time of N2 - loop time of N1). The bare loop times N2 - N1 steps after two
warm-up steps. Printed: tokens/s of both (medians over rounds) and the overhead (target < 10%).

With `--stage`, it also runs `python -m nemotron.recipes.nano2.stage0_pretrain --scale tiny` into a
temp folder and prints each step's `wall_seconds` from its artifact, and the whole command's time.

    python benchmarks/bench_pretrain_step.py                       # reduced blend, tiny shape
    python benchmarks/bench_pretrain_step.py --dataset-path runs/nano2/stage0_pretrain/data_curation
    python benchmarks/bench_pretrain_step.py --stage
    python benchmarks/bench_pretrain_step.py --quick               # one play, 1 and 3 steps of 2 x 64, 1 round

Timings are noisy on a shared machine: run on an otherwise idle one, and compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from transformers.utils import logging as hf_logging

from nemotron.data_prep.sources import read_shakespeare
from nemotron.models.nano2 import build_config, build_model
from nemotron.recipes.nano2.stage0_pretrain import data_curation, training
from nemotron.training.windows import TokenWindows

PLAYS = {"hamlet", "macbeth", "tempest", "othello"}


def reduced_dataset(root: Path, plays: set[str] = PLAYS) -> Path:
    """The real stage-0 data curation over four plays, at the tiny default vocabulary (4096)."""
    scenes = [d for d in read_shakespeare().documents if d.meta.get("play") in plays]
    (root / "scenes.jsonl").write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in scenes))
    (root / "blend.json").write_text(json.dumps({"sources": [{"path": "scenes.jsonl"}], "split": [0.9, 0.1, 0]}))
    config = data_curation.Config(blend_path=root / "blend.json", workers=1, output_dir=root / "data")
    return data_curation.main(config).path


def recipe_loop_seconds(dataset_path: Path, out: Path, steps: int, args) -> float:
    """Loop time of the real step for `steps` steps (from its own metrics), in a fresh folder."""
    config = training.Config(dataset_path=dataset_path, output_dir=out, steps=steps, seq_len=args.seq_len,
                             micro_batch_size=args.micro_batch_size, num_threads=args.threads,
                             eval_every=10**9, checkpoint_every=10**9)  # only the last step evaluates and saves
    metrics = training.main(config).metrics
    return metrics["seconds_per_step"] * steps


def bare_loop_seconds(dataset_path: Path, steps: int, args) -> float:
    """Seconds for `steps` bare training steps (after two warm-up steps) on the step's model and batches."""
    dataset = training.PretrainDataset.from_path(dataset_path)
    torch.set_num_threads(args.threads)
    model = build_model(build_config("tiny", dataset.vocab_size), seed=0).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    windows = TokenWindows(dataset.train_prefixes, args.seq_len, args.micro_batch_size, seed=0)
    batches = [windows.next_batch() for _ in range(steps + 2)]
    for index, batch in enumerate(batches):
        if index == 2:
            started = time.perf_counter()
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def stage_wall_times(root: Path) -> None:
    """Run stage 0 at tiny as one command and print each step's wall_seconds from its artifact."""
    out = root / "stage0"
    command = [sys.executable, "-m", "nemotron.recipes.nano2.stage0_pretrain", "--scale", "tiny",
               "--output-dir", str(out)]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    total = time.perf_counter() - started
    print("stage 0 at tiny (wall_seconds from each artifact):")
    for step in ("data_curation", "training", "evaluation"):
        saved = json.loads((out / step / "metadata.json").read_text())
        metrics = saved["metrics"]
        extra = ""
        if step == "training":
            extra = f"  ({saved['steps']} steps, {metrics['tokens_per_second']:,.0f} tokens/s)"
        print(f"  {step:14s} {metrics['wall_seconds']:7.1f} s{extra}")
    print(f"  {'whole command':14s} {total:7.1f} s  (including Python and library start-up)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset-path", type=Path, default=None, help="a PretrainDataset (default: build one)")
    parser.add_argument("--short", type=int, default=4, help="N1: steps of the short recipe run")
    parser.add_argument("--long", type=int, default=24, help="N2: steps of the long recipe run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seq-len", type=int, default=training.SEQ_LEN["tiny"])
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the step's default at tiny is 1)")
    parser.add_argument("--stage", action="store_true", help="also time `python -m ...stage0_pretrain --scale tiny`")
    parser.add_argument("--quick", action="store_true", help="one play, 1 and 3 steps of 2 x 64: checks it runs")
    args = parser.parse_args()
    plays = PLAYS
    if args.quick:
        args.short, args.long, args.rounds, args.seq_len, args.micro_batch_size = 1, 3, 1, 64, 2
        plays = {"macbeth"}
    hf_logging.set_verbosity_error()  # the "falling back to the PyTorch implementation" notices

    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        dataset_path = args.dataset_path or reduced_dataset(root, plays)
        timed_steps = args.long - args.short
        tokens = timed_steps * args.micro_batch_size * args.seq_len
        recipe, bare = [], []
        for round_ in range(args.rounds):
            bare.append(tokens / bare_loop_seconds(dataset_path, timed_steps, args))
            short = recipe_loop_seconds(dataset_path, root / f"short_{round_}", args.short, args)
            long = recipe_loop_seconds(dataset_path, root / f"long_{round_}", args.long, args)
            recipe.append(tokens / (long - short))
            print(f"round {round_ + 1}: recipe {recipe[-1]:,.0f} tokens/s, bare {bare[-1]:,.0f} tokens/s",
                  file=sys.stderr)

        recipe_speed, bare_speed = statistics.median(recipe), statistics.median(bare)
        print(f"batch {args.micro_batch_size}x{args.seq_len}, threads={args.threads}, {timed_steps} timed steps, "
              f"median of {args.rounds} rounds")
        print(f"bare loop    tokens/s={bare_speed:8,.0f}")
        print(f"recipe step  tokens/s={recipe_speed:8,.0f}")
        print(f"overhead     {bare_speed / recipe_speed - 1:+.1%} time per step (target < 10%)")
        if args.stage:
            stage_wall_times(root)


if __name__ == "__main__":
    main()
