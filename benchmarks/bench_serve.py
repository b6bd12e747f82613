"""Concurrent streaming clients against the same requests one after another, in `python -m nemotron.serve`.

For each model, starts the server (one torch thread, `--max-batch-size 16`) on a free loopback port and sends
streamed chat requests through the official `openai` client: first 16 one after another (the baseline,
measured in the same run: the first n of them are "the same n requests one after another"), then 1, 4, 8 and 16
clients at once. Per level: aggregate tokens/s (the server's `usage`, from `stream_options.include_usage`) over
the wall time, its ratio to the sequential baseline's, the median time to first token (request sent -> first
text delta), whether every stream ended properly (a finish_reason, then `[DONE]`), and the server's CPU time
per token one after another over its CPU time per token at that level (from Linux's /proc: about the ratio an
idle machine would show, where wall time on a shared machine measures the neighbours too). Then the head-of-line
case: a 2-token completion alone, and sent while a 200-token one decodes (target: within twice its alone time
or 1 s, whichever is larger). Goals on the 2-core machine (issue 61, `GOALS`): 8 clients >= 3.5x sequential, 16 >= 5x.
The load average is printed beside the figures: on a shared machine they measure the neighbours too.

    python benchmarks/bench_serve.py                     # SmolLM2-135M-Instruct and a tiny nano2, 48 tokens each
    python benchmarks/bench_serve.py --model runs/nano2/stage2_alignment/training
    python benchmarks/bench_serve.py --quick             # the tiny nano2 only, 8 tokens, 1 and 4 clients

The summary goes to stderr; stdout carries one JSON line with every figure (first: the first model's ratio to
one after another at 8 clients, 4 with --quick). `--json FILE` writes the same figures with the date, the commit,
the machine's CPU model and the command, the data of README.md's serving block:

    python benchmarks/bench_serve.py --json serving.json && python scripts/readme_results.py top serving serving.json
"""

from __future__ import annotations

import argparse
import json
import os
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

from nemotron.artifact.provenance import git_revision
from nemotron.models.reference import random_chat_model

REPO = Path(__file__).resolve().parents[1]

GOALS = {8: 3.5, 16: 5.0}  # clients -> tokens/s at once over one after another, aimed at on the 2-core machine
QUESTIONS = ["Describe the sea in a few sentences.", "What is a good breakfast?", "Tell me about the moon.",
             "How do birds fly so far without getting lost on the way?", "Why is the sky blue?",
             "Write a short poem about autumn leaves.", "What should I pack for a week of hiking in the mountains?",
             "Name three animals."]


def start_server(model: str, max_batch: int) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "nemotron.serve", model, "--port", str(port), "--num-threads", "1",
               "--max-batch-size", str(max_batch)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server, port
        except httpx.TransportError:
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("the server did not start")
            time.sleep(1)


def one_client(client, model: str, question: str, max_tokens: int) -> dict:
    """One streamed chat request: when its first text arrived, how many tokens, whether it completed."""
    started = time.perf_counter()
    first = finish = usage = None
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=max_tokens, temperature=0,
        stream=True, stream_options={"include_usage": True})
    for chunk in stream:  # the openai client stops at data: [DONE]
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            if first is None and (choice.delta.content or extra.get("reasoning_content")):
                first = time.perf_counter()
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    ended = time.perf_counter()
    return {"ttft_s": (first or ended) - started, "seconds": ended - started,
            "tokens": usage.completion_tokens if usage else 0, "complete": finish is not None and usage is not None}


def server_cpu(server: subprocess.Popen) -> float | None:
    """CPU seconds the server process has used so far (user + system, all its threads; Linux's /proc), else None."""
    try:
        fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sequential(client, model: str, count: int, max_tokens: int, server: subprocess.Popen) -> list[dict]:
    results = []
    for i in range(count):
        before = server_cpu(server)
        results.append(one_client(client, model, QUESTIONS[i % len(QUESTIONS)], max_tokens))
        after = server_cpu(server)
        results[-1]["server_cpu_s"] = None if before is None or after is None else after - before
    return results


def concurrent(client, model: str, count: int, max_tokens: int, server: subprocess.Popen) -> dict:
    results: list[dict] = [{}] * count
    cpu_before = server_cpu(server)

    def work(i: int) -> None:
        results[i] = one_client(client, model, QUESTIONS[i % len(QUESTIONS)], max_tokens)

    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    cpu_after = server_cpu(server)
    return {"clients": count, "wall_s": wall, "complete": sum(r["complete"] for r in results),
            "server_cpu_s": None if cpu_before is None or cpu_after is None else cpu_after - cpu_before,
            "tokens": sum(r["tokens"] for r in results), "tokens_per_s": sum(r["tokens"] for r in results) / wall,
            "median_ttft_s": statistics.median(r["ttft_s"] for r in results)}


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


def measure(model: str, levels: list[int], max_tokens: int, long_tokens: int, delay: float) -> dict:
    import openai

    server, port = start_server(model, max(levels))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=900)
        entry = client.models.list().data[0]
        served = entry.model_extra["nemotron"]
        name, cache, context = entry.id, served["cache"], served["context"]
        one_client(client, name, QUESTIONS[0], 2)  # warm-up: first-call costs are not part of any figure
        alone = sequential(client, name, max(levels), max_tokens, server)
        runs = []
        for count in levels:
            run = concurrent(client, name, count, max_tokens, server)
            first = alone[:count]  # the same requests, one after another
            tokens = sum(r["tokens"] for r in first)
            run["sequential_tokens_per_s"] = tokens / sum(r["seconds"] for r in first)
            cpu = [r["server_cpu_s"] for r in first]
            # the server's CPU time per token, one after another over all at once: about the speed-up an idle
            # machine would show (wall time on a shared one measures the neighbours too)
            run["cpu_over_sequential"] = (None if None in cpu or not run["server_cpu_s"] else
                                          sum(cpu) / tokens / (run["server_cpu_s"] / run["tokens"]))
            run["sequential_median_ttft_s"] = statistics.median(r["ttft_s"] for r in first)
            run["over_sequential"] = run["tokens_per_s"] / run["sequential_tokens_per_s"]
            runs.append(run)
        blocked = head_of_line(client, name, long_tokens, delay)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    return {"model": name, "concurrent": runs, "head_of_line": blocked, "cache": cache, "context": context}


def report(result: dict, delay: float, long_tokens: int) -> None:
    print(f"{result['model']}", file=sys.stderr)
    for run in result["concurrent"]:
        print(f"  {run['clients']:>2} clients: {run['complete']}/{run['clients']} complete, {run['tokens_per_s']:6.1f} "
              f"tok/s against {run['sequential_tokens_per_s']:5.1f} one after another ({run['over_sequential']:.2f}x), "
              f"time to first token median {run['median_ttft_s']:.2f}s (alone {run['sequential_median_ttft_s']:.2f}s)"
              + ("" if run["cpu_over_sequential"] is None else
                 f"; server CPU per token, one after another over at once: {run['cpu_over_sequential']:.2f}x"),
              file=sys.stderr)
    h, cache = result["head_of_line"], result["cache"]
    rows = cache["max_batch_size"]
    print(f"  cache per row: {cache['bytes_per_row']:,} bytes + {cache['bytes_per_token']:,} per token (a request is "
          f"refused if {rows} rows of its length, --max-batch-size, would pass {cache['memory'] / 2**20:,.0f} MiB)",
          file=sys.stderr)
    print(f"  head of line: 2-token completion alone {h['alone_s']:.2f}s, sent {delay:g}s after a {long_tokens}-token "
          f"one {h['beside_long_s']:.2f}s (target {h['target_s']:.2f}s)", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="what to serve (repeatable): smollm2, a checkpoint, an HF "
                        "folder, or `tiny` (a fresh untrained nano2); default: smollm2 and tiny")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--quick", action="store_true", help="the tiny nano2 only, 8 tokens, 1 and 4 clients")
    parser.add_argument("--json", type=Path, help="also write every figure, with the date, commit, CPU model and "
                        "command, to this file (the data of README.md's serving block: scripts/readme_results.py)")
    args = parser.parse_args()
    models = args.model or (["tiny"] if args.quick else ["smollm2", "tiny"])
    levels, max_tokens, long_tokens, delay = [1, 4, 8, 16], args.max_tokens, 200, 2.0
    if args.quick:
        levels, max_tokens, long_tokens, delay = [1, 4], 8, 40, 0.3
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure(str(random_chat_model(Path(tmp) / "tiny")) if m == "tiny" else m, levels, max_tokens,
                           long_tokens, delay) for m in models]
    load_after = os.getloadavg()
    for result in results:
        report(result, delay, long_tokens)
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in load_after)} after; {os.cpu_count()} cores", file=sys.stderr)
    key = max(levels) if max(levels) < 8 else 8  # the headline: the first model at 8 clients (--quick: 4)
    headline = next(run["over_sequential"] for run in results[0]["concurrent"] if run["clients"] == key)
    record = {"headline_over_sequential": headline, "headline_clients": key, "headline_model": results[0]["model"],
              "max_tokens": max_tokens, "long_tokens": long_tokens, "delay_s": delay, "goals": GOALS,
              "load_average_before": load_before, "load_average_after": load_after, "cores": os.cpu_count(),
              "models": results}
    print(json.dumps(record))
    if args.json:
        args.json.write_text(json.dumps({**record, **provenance(sys.argv[1:])}, indent=1) + "\n")


def provenance(argv: list[str]) -> dict:
    """When, at which commit (`artifact.provenance.git_revision`, as a step's artifact records it), on which CPU and
    by which command the figures were measured."""
    commit, dirty = git_revision(REPO)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown") if Path("/proc/cpuinfo").exists() else "unknown"
    shown = [a for i, a in enumerate(argv) if a != "--json" and (i == 0 or argv[i - 1] != "--json")]
    return {"date": time.strftime("%Y-%m-%d"), "commit": (commit or "unknown")[:12], "dirty": bool(dirty),
            "cpu_model": cpu, "command": " ".join(["python benchmarks/bench_serve.py", *shown])}


if __name__ == "__main__":
    main()
