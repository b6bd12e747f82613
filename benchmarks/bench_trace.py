"""What tracing costs: index build time and memory per billion tokens, and a lookup against a linear scan.

    python benchmarks/bench_trace.py runs/nano2/stage2_alignment/training      # a checkpoint of a recipe run
    python benchmarks/bench_trace.py --quick     # seconds: the suffix array on 200,000 seeded random tokens

For each training dataset in the checkpoint's lineage, builds its index in a fresh temporary folder
(so the build is timed even when the run already has one) and prints the receipt's numbers: tokens,
build seconds, peak memory (tracemalloc: numpy's buffers), and both per billion tokens (a linear
extrapolation: the build is O(n log n) per round, so the true cost per token grows slowly with n).
Then times `find_spans` on texts taken from the pretraining data (a hit) and on one absent text
(a miss), and, as the baseline measured in the same run, a linear numpy scan of the same dataset for
the same longest matches; prints the ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import numpy as np

from nemotron.trace import DEFAULT_MIN_TOKENS, Tracer
from nemotron.trace.suffix_array import longest_match, suffix_array


def linear_longest(tokens: np.ndarray, query: np.ndarray) -> int:
    """The longest prefix of `query` in `tokens` by scanning: candidates narrowed one token at a time."""
    candidates = np.flatnonzero(tokens == query[0])
    length = 0
    while len(candidates):
        length += 1
        if length == len(query):
            break
        candidates = candidates[candidates + length < len(tokens)]
        candidates = candidates[tokens[candidates + length] == query[length]]
    return length


def quick(lookups: int) -> int:
    """The index's own code on seeded random tokens (no recipe run needed): build, then lookups vs a scan."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 512, 200_000).astype(np.int64)
    started = time.perf_counter()
    sa = suffix_array(tokens)
    build = time.perf_counter() - started
    queries = [tokens[s:s + 40] for s in rng.integers(0, len(tokens) - 40, lookups)]
    started = time.perf_counter()
    found = [longest_match(tokens, sa, q)[0] for q in queries]
    lookup = (time.perf_counter() - started) / lookups
    started = time.perf_counter()
    scanned = [linear_longest(tokens, q) for q in queries]
    scan = (time.perf_counter() - started) / lookups
    assert found == scanned, "the suffix array and the scan disagree"
    print(f"{len(tokens):,} tokens: build {build:.2f} s; lookup {lookup * 1000:.2f} ms, scan {scan * 1000:.2f} ms",
          file=sys.stderr)
    print(f"lookup speed-up over a linear scan: {scan / lookup:.1f}x")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?")
    parser.add_argument("--lookups", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="seeded random tokens instead of a checkpoint's data")
    args = parser.parse_args()
    if args.quick:
        return quick(args.lookups)
    if args.checkpoint is None:
        parser.error("give a checkpoint folder, or --quick")
    with tempfile.TemporaryDirectory() as index_dir:
        tracer = Tracer(args.checkpoint, index_dir)
        for index in tracer.indexes:
            r = index.receipt
            print(f"{r['type']}: {r['num_tokens']:,} tokens, {r['num_documents']:,} documents; build "
                  f"{r['build_seconds']:.2f} s, peak {r['peak_memory_bytes'] / 2**20:.0f} MiB -> per billion tokens "
                  f"{r['seconds_per_billion_tokens'] / 3600:.1f} h, {r['peak_memory_gib_per_billion_tokens']:.0f} GiB; "
                  f"on disk {r['disk_bytes'] / r['num_tokens']:.0f} bytes/token", file=sys.stderr)
        largest = max(tracer.indexes, key=lambda index: len(index.tokens))
        rng = np.random.default_rng(0)
        starts = rng.integers(0, len(largest.tokens) - 64, args.lookups)
        texts = [tracer.tokenizer.decode([t for t in largest.tokens[s:s + 40].tolist() if t >= 0]) for s in starts]
        texts.append("The zebra's quantum xylophone hums marmalade sonatas to seventeen sleepy lighthouses at dawn.")
        tracer.find_spans(texts[0])  # page the memory maps in
        started = time.perf_counter()
        found = [tracer.find_spans(text) for text in texts]
        lookup = (time.perf_counter() - started) / len(texts)
        started = time.perf_counter()
        tokens = np.asarray(largest.tokens)
        for text in texts:
            ids, i = tracer.tokenize(text)[0], 0
            while i < len(ids):  # the same greedy walk as find_spans
                length = linear_longest(tokens, ids[i:])
                i += length if length >= DEFAULT_MIN_TOKENS else 1
        scan = (time.perf_counter() - started) / len(texts)
    hits = sum(bool(spans) for spans in found)
    print(f"lookup of a ~40-token text ({hits}/{len(texts)} found): suffix array {lookup * 1000:.1f} ms, linear scan "
          f"of {len(tokens):,} tokens {scan * 1000:.1f} ms", file=sys.stderr)
    print(f"lookup speed-up over a linear scan: {scan / lookup:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
