"""Which processes x threads layout trains fastest here? The measurements behind `torch_threads`.

Runs the real stage-0 training step (`nemotron.recipes.nano2.stage0_pretrain.training`) for a few
steps on a small curated dataset, for every layout that fits this machine's cores (1 process x 1
thread, 1 x N threads, N processes x 1 thread under torchrun, ...), on the tiny and the small model,
and prints tokens/s side by side with the ratio to 1 x 1 measured in the same run. The default rule
(`nemotron.cpu.torch_threads`: one process using every allowed core) was chosen from this
table; re-run it to re-derive the rule on another machine.

    python benchmarks/bench_compute_policy.py                 # tiny and small, 20 steps each
    python benchmarks/bench_compute_policy.py --scales tiny --steps 40
    python benchmarks/bench_compute_policy.py --quick         # one play, tiny, 2 steps, 1 x 1 and N x 1 only

Run it on an idle machine: other busy processes make extra threads spin-wait and skew the ratios
(the load average is printed first).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from nemotron.cpu import allowed_cores

STAGE = "nemotron.recipes.nano2.stage0_pretrain"


def curate(root: Path, scale: str, plays: set[str]) -> Path:
    """A small stage-0 dataset of `plays` (three by default) made by the real data-curation step, at `scale`."""
    from nemotron.data_prep.sources import read_shakespeare

    scenes = [d for d in read_shakespeare().documents if d.meta.get("play") in plays]
    (root / "scenes.jsonl").write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in scenes))
    (root / "blend.json").write_text(json.dumps({"sources": [{"path": "scenes.jsonl"}], "split": [0.9, 0.1, 0.0]}))
    subprocess.run([sys.executable, "-m", f"{STAGE}.data_curation", "--blend-path", "blend.json", "--vocab-size",
                    "1024", "--scale", scale, "--output-dir", f"data_{scale}"],
                   cwd=root, check=True, capture_output=True)
    return root / f"data_{scale}"


def tokens_per_second(dataset: Path, out: Path, scale: str, processes: int, threads: int, steps: int) -> float:
    launcher = [sys.executable, "-m"] if processes == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes), "-m"]
    micro = 8 // processes  # the same global batch of 8 windows in every layout
    command = [*launcher, f"{STAGE}.training", "--dataset-path", str(dataset), "--output-dir", str(out),
               "--scale", scale, "--steps", str(steps), "--micro-batch-size", str(micro), "--num-threads",
               str(threads), "--eval-every", str(steps), "--checkpoint-every", str(steps)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout)["pretraincheckpoint"]["metrics"]["tokens_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", nargs="+", default=["tiny", "small"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true",
                        help="tiny only, one play, 2 steps, single-thread layouts only: checks it runs")
    args = parser.parse_args()
    plays = {"hamlet", "macbeth", "othello"}
    if args.quick:
        args.scales, args.steps, plays = ["tiny"], 2, {"macbeth"}
    cores = allowed_cores()
    layouts = sorted({(1, 1), (1, cores), (cores, 1)} | {(p, cores // p) for p in (2, 4) if cores % p == 0})
    if args.quick:  # the plain and the torchrun launch; more threads per process is the same code path
        layouts = [(processes, threads) for processes, threads in layouts if threads == 1]
    print(f"allowed cores: {cores}; load average: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        for scale in args.scales:
            dataset = curate(Path(tmp), scale, plays)
            print(f"\nnano2 {scale}, global batch 8 windows, {args.steps} steps")
            print(f"{'processes x threads':<22} {'tokens/s':>10} {'vs 1x1':>8}")
            baseline = None
            for processes, threads in layouts:
                speed = tokens_per_second(dataset, Path(tmp) / f"{scale}_{processes}x{threads}", scale,
                                          processes, threads, args.steps)
                baseline = baseline or speed
                print(f"{processes} x {threads:<18} {speed:>10,.0f} {speed / baseline:>8.2f}")


if __name__ == "__main__":
    main()
