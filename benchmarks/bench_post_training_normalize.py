"""Post-training normalize throughput: 2 worker processes vs 1, same inputs, one run.

Builds an input from the shipped demo records (every family), repeated with a numbered user turn so the
copies are not duplicates, then runs the normalize pipeline (plan -> its stages on the data-prep stage
runner, receipted per work item -> finalize) into
two folders with workers=1 and workers=2, checks the outputs are byte-identical, and prints records/s
and the speed-up (1-worker time / 2-worker time). The 2-worker time includes starting the spawn pool.

    python benchmarks/bench_post_training_normalize.py [--copies 400]
    python benchmarks/bench_post_training_normalize.py --quick     # 5 copies
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from nemotron.data_prep.post_training.normalize_run import Source, finalize_normalize, plan_normalize
from nemotron.data_prep.stages import run_stages
from nemotron.recipes.post_training_data.normalize import DEMO_DIR


def write_inputs(folder: Path, copies: int) -> list[str]:
    specs = []
    for path in sorted(DEMO_DIR.glob("*/*.jsonl")):
        lines = []
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            for copy in range(copies):
                for message in record.get("messages") or []:
                    if message.get("role") == "user" and isinstance(message.get("content"), str):
                        message["content"] = message["content"].split(" (variant")[0] + f" (variant {copy})"
                lines.append(json.dumps(record))
        target = folder / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n")
        specs.append(f"{path.parent.name}={target}")
    return specs


def folder_hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "work" not in p.parts}


def timed_run(specs: list[str], out: Path, workers: int) -> tuple[float, int]:
    start = time.perf_counter()
    plan = plan_normalize([Source.parse(s) for s in specs], out, units_per_source=8)
    run_stages(plan.stages, workers=workers, progress=False)
    result = finalize_normalize(plan, out, records_per_file=10_000)
    return time.perf_counter() - start, result.read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=400, help="numbered copies of each demo record")
    parser.add_argument("--quick", action="store_true", help="5 copies: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.copies = 5
    print(f"load average before the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        specs = write_inputs(tmp / "inputs", args.copies)
        one, records = timed_run(specs, tmp / "one", 1)
        two, _ = timed_run(specs, tmp / "two", 2)
        assert folder_hashes(tmp / "one") == folder_hashes(tmp / "two"), "outputs differ between 1 and 2 workers"
    print(f"records: {records}")
    print(f"1 worker : {one:6.2f} s  {records / one:8.0f} records/s")
    print(f"2 workers: {two:6.2f} s  {records / two:8.0f} records/s")
    print(f"speed-up (2 workers vs 1): {one / two:.2f}x  (outputs byte-identical)")


if __name__ == "__main__":
    main()
