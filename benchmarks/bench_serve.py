"""Static against continuous batching in `python -m nemotron.serve`: 8 streaming clients and the head-of-line case.

Starts the server (one torch thread) on a free loopback port, then sends the same streamed chat request
from `--clients` threads through the official `openai` client, first one after another (the baseline,
measured in the same run), then all at once. Per client: time to first token (request sent -> first
text delta), completion tokens (the server's `usage`, from `stream_options.include_usage`) and tokens/s
over the whole request; and whether the stream ended properly (a finish_reason, then `[DONE]`). Then the
head-of-line case: a 2-token completion alone, and sent 2 s after a 200-token one started (target: within
twice its alone time or 1 s, whichever is larger). All of it twice, one server each: `--batching static`
(the old scheduling, the baseline) and `--batching continuous`; the ratios printed last compare them.

    python benchmarks/bench_serve.py                     # SmolLM2-135M-Instruct, 8 clients, 48 tokens each
    python benchmarks/bench_serve.py --model runs/nano2/stage2_alignment/training
    python benchmarks/bench_serve.py --quick             # a fresh tiny nano2 chat model, 8 tokens, a 40-token long one

The summary goes to stderr; stdout carries one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from nemotron.models.reference import random_chat_model


def start_server(model: str, clients: int, batching: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "nemotron.serve", model, "--port", str(port), "--num-threads", "1",
                               "--max-batch-size", str(clients), "--batching", batching],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server, port
        except httpx.TransportError:
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("the server did not start")
            time.sleep(1)


def one_client(client, model: str, max_tokens: int) -> dict:
    """One streamed chat request: when its first text arrived, how many tokens, whether it completed."""
    started = time.perf_counter()
    first = finish = usage = None
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Describe the sea in a few sentences."}],
        max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True})
    for chunk in stream:  # the openai client stops at data: [DONE]
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            if first is None and (choice.delta.content or extra.get("reasoning_content")):
                first = time.perf_counter()
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    ended = time.perf_counter()
    tokens = usage.completion_tokens if usage else 0
    return {"ttft_s": (first or ended) - started, "seconds": ended - started, "tokens": tokens,
            "tokens_per_s": tokens / (ended - started), "complete": finish is not None and usage is not None}


def run_clients(client, model: str, clients: int, max_tokens: int, concurrent: bool) -> dict:
    results: list[dict] = [{}] * clients
    started = time.perf_counter()
    if concurrent:
        def work(i: int) -> None:
            results[i] = one_client(client, model, max_tokens)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        results = [one_client(client, model, max_tokens) for _ in range(clients)]
    wall = time.perf_counter() - started
    return {"clients": results, "wall_s": wall, "complete": sum(r["complete"] for r in results),
            "aggregate_tokens_per_s": sum(r["tokens"] for r in results) / wall,
            "median_ttft_s": statistics.median(r["ttft_s"] for r in results),
            "median_client_tokens_per_s": statistics.median(r["tokens_per_s"] for r in results)}


def head_of_line(client, model: str, long_tokens: int, delay: float) -> dict:
    """A 2-token completion alone, then the same sent `delay` s after a `long_tokens` one started."""
    def short() -> float:
        started = time.perf_counter()
        client.completions.create(model=model, prompt="The sea is", max_tokens=2, temperature=0)
        return time.perf_counter() - started

    alone = short()
    long = threading.Thread(target=client.completions.create, kwargs=dict(
        model=model, prompt="Once upon a time", max_tokens=long_tokens, temperature=0))
    long.start()
    time.sleep(delay)
    beside = short()
    long.join()
    return {"alone_s": alone, "beside_long_s": beside, "target_s": max(2 * alone, 1.0)}


def measure(model: str, clients: int, max_tokens: int, batching: str, long_tokens: int, delay: float) -> dict:
    import openai

    server, port = start_server(model, clients, batching)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=900)
        name = client.models.list().data[0].id
        one_client(client, name, 2)  # warm-up: first-call costs are not part of either figure
        sequential = run_clients(client, name, clients, max_tokens, concurrent=False)
        concurrent = run_clients(client, name, clients, max_tokens, concurrent=True)
        blocked = head_of_line(client, name, long_tokens, delay)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    return {"model": name, "sequential": sequential, "concurrent": concurrent, "head_of_line": blocked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="what to serve: smollm2, a checkpoint or an HF folder")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--quick", action="store_true", help="a fresh tiny nano2 model and 8 tokens: seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model, max_tokens, long_tokens, delay = args.model, args.max_tokens, 200, 2.0
        if args.quick:
            model, max_tokens, long_tokens, delay = str(random_chat_model(Path(tmp) / "tiny")), 8, 40, 0.3
        runs = {b: measure(model, args.clients, max_tokens, b, long_tokens, delay) for b in ("static", "continuous")}
    for batching, run in runs.items():
        for label, r in (("sequential", run["sequential"]), (f"{args.clients} concurrent", run["concurrent"])):
            print(f"{batching:<10} {label:<14} {r['complete']}/{args.clients} complete  time to first token: median "
                  f"{r['median_ttft_s']:.2f}s (max {max(c['ttft_s'] for c in r['clients']):.2f}s)  per client "
                  f"{r['median_client_tokens_per_s']:.1f} tok/s  all clients {r['aggregate_tokens_per_s']:.1f} tok/s"
                  f"  ({r['wall_s']:.1f}s)", file=sys.stderr)
        h = run["head_of_line"]
        print(f"{batching:<10} head of line: 2-token completion alone {h['alone_s']:.2f}s, sent {delay:g}s after a "
              f"{long_tokens}-token one {h['beside_long_s']:.2f}s (target {h['target_s']:.2f}s)", file=sys.stderr)
    static, cont = runs["static"], runs["continuous"]
    ratios = {"head_of_line_static_over_continuous": static["head_of_line"]["beside_long_s"]
              / cont["head_of_line"]["beside_long_s"],
              "concurrent_tokens_per_s_continuous_over_static": cont["concurrent"]["aggregate_tokens_per_s"]
              / static["concurrent"]["aggregate_tokens_per_s"],
              "median_ttft_static_over_continuous": static["concurrent"]["median_ttft_s"]
              / cont["concurrent"]["median_ttft_s"]}
    print(json.dumps({"max_tokens": max_tokens, "long_tokens": long_tokens, "delay_s": delay, **runs, **ratios}))
    for key, value in ratios.items():
        print(f"{key}: {value:.2f}x", file=sys.stderr)


if __name__ == "__main__":
    main()
