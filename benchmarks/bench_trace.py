"""What tracing costs: index build time and memory per billion tokens, and a lookup against a linear scan.

    python benchmarks/bench_trace.py runs/nano2/stage2_alignment/training      # a checkpoint of a recipe run

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--lookups", type=int, default=20)
    args = parser.parse_args()
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
          f"of {len(tokens):,} tokens {scan * 1000:.1f} ms: {scan / lookup:.0f}x", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
