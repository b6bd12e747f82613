"""Does batching concurrent requests pay? Requests/s and tokens/s of the local SDG server, 8 at once vs one by one.

Starts `python -m nemotron.serve` (SmolLM2-135M-Instruct, CPU) on a free loopback port, then sends
the same chat request `--requests` times, first sequentially, then `--concurrency` at a time, through
the SDG client (`nemotron.sdg.client.measure_throughput`), and prints both and their ratio. Token
counts come from the server's `usage`. The server decodes concurrent requests as one batch
(`nemotron.serve.engine`): a decode step reads every weight once, so B rows cost little more than one.

    python benchmarks/bench_sdg_server.py                      # 8 requests, 8 concurrent, 32 tokens each
    python benchmarks/bench_sdg_server.py --max-tokens 64 --num-threads 2
    python benchmarks/bench_sdg_server.py --quick              # a tiny model, 2 requests, 2 concurrent, 4 tokens

`--quick` serves a fresh, untrained tiny nano2 chat model instead of SmolLM2, whose GGUF takes most of a
minute to load on a small CPU: the same server and client path in seconds, meaningless figures.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from nemotron.models.reference import random_chat_model
from nemotron.sdg.client import Client, Endpoint, measure_throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--num-threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a tiny model, 2 requests of 4 tokens: checks it runs")
    args = parser.parse_args()
    endpoint_model, served = Endpoint.model, []  # the server's default: SmolLM2
    tmp = tempfile.TemporaryDirectory()
    if args.quick:
        args.requests, args.concurrency, args.max_tokens = 2, 2, 4
        endpoint_model = "tiny"
        served = [str(random_chat_model(Path(tmp.name) / "tiny")), "--served-model-name", endpoint_model]

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "nemotron.serve", *served, "--port", str(port),
                               "--num-threads", str(args.num_threads), "--max-batch-size", str(args.concurrency)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit("the server did not start")
                time.sleep(1)
        client = Client(Endpoint(url=f"http://127.0.0.1:{port}/v1", model=endpoint_model, max_tokens=args.max_tokens,
                                 max_parallel_requests=args.concurrency, timeout=600))
        client.check()
        messages = [{"role": "user", "content": "Describe the sea in a few sentences."}]
        sequential = measure_throughput(client, messages, requests=args.requests, concurrency=1,
                                        max_tokens=args.max_tokens)
        concurrent = measure_throughput(client, messages, requests=args.requests, concurrency=args.concurrency,
                                        max_tokens=args.max_tokens)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        tmp.cleanup()
    for name, r in (("sequential", sequential), (f"{args.concurrency} concurrent", concurrent)):
        print(f"{name:<14} {r['requests_per_second']:6.3f} requests/s  "
              f"{r['decode_tokens_per_second']:7.2f} decode tok/s  "
              f"{r['total_tokens_per_second']:7.2f} total tok/s  ({r['seconds']:.1f} s)", file=sys.stderr)
    ratio = concurrent["requests_per_second"] / sequential["requests_per_second"]
    print(json.dumps({"sequential": sequential, "concurrent": concurrent, "speedup": ratio}))
    print(f"concurrent / sequential: {ratio:.2f}x requests/s")


if __name__ == "__main__":
    main()
