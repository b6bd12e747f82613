"""Stage-0 data curation wall time split by phase: a cold run, then a re-run into the same folder.

Runs `nemotron.recipes.nano2.stage0_pretrain.data_curation.main` twice at the given scale (default
tiny: all of Shakespeare) into one temporary folder. The first run does everything; the second finds
the receipts of the split files, the tokenizer and every shard, and skips that work. Prints each
phase's seconds and share of the cold run, the re-run's seconds, and the ratio re-run / cold (lower
is better), and checks the two artifacts have the same digest. The phases come from the artifact's
`seconds_by_phase` metric.

    python benchmarks/bench_curation.py [--scale tiny] [--workers N]
    python benchmarks/bench_curation.py --quick     # one play (Macbeth), a 1,024-token vocabulary
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nemotron.recipes.nano2.stage0_pretrain.data_curation import Config, main


def one_play_blend(folder: Path) -> Path:
    """A blend of Macbeth's scenes alone: the same pipeline on a 50th of the corpus."""
    from nemotron.data_prep.sources import read_shakespeare

    scenes = [d for d in read_shakespeare().documents if d.meta.get("play") == "macbeth"]
    (folder / "scenes.jsonl").write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in scenes))
    (folder / "blend.json").write_text(json.dumps({"sources": [{"path": "scenes.jsonl"}], "split": [0.9, 0.1, 0]}))
    return folder / "blend.json"


def timed_run(config: Config):
    start = time.perf_counter()
    artifact = main(config)
    return artifact, time.perf_counter() - start


if __name__ == "__main__":  # the shard pool spawns processes that re-import this file
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--workers", type=int, default=None, help="default: the step's (1 at tiny)")
    parser.add_argument("--quick", action="store_true", help="one play, 1,024-token vocabulary: checks it runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        quick = {"blend_path": one_play_blend(Path(folder)), "vocab_size": 1024} if args.quick else {}
        config = Config(scale=args.scale, workers=args.workers, output_dir=Path(folder) / "data", **quick)
        cold, cold_seconds = timed_run(config)
        warm, warm_seconds = timed_run(config)
    if cold.digest != warm.digest:
        sys.exit(f"digests differ: {cold.digest} vs {warm.digest}")
    cold_phases, warm_phases = cold.metrics["seconds_by_phase"], warm.metrics["seconds_by_phase"]
    print(f"scale={args.scale} workers={args.workers} cpus={os.cpu_count()} documents={cold.num_documents} "
          f"train_tokens={cold.num_train_tokens} digest={cold.digest[:16]}")
    print(f"{'phase':<18}{'cold s':>9}{'share':>8}{'re-run s':>10}")
    for phase, seconds in cold_phases.items():
        rerun = f"{warm_phases[phase]:>10.2f}" if phase in warm_phases else f"{'skipped':>10}"
        print(f"{phase:<18}{seconds:>9.2f}{seconds / cold_seconds:>8.0%}{rerun}")
    print(f"{'total (main)':<18}{cold_seconds:>9.2f}{'':>8}{warm_seconds:>10.2f}")
    print(f"re-run / cold = {warm_seconds / cold_seconds:.2f}")
