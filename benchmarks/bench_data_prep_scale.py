"""Does data prep outgrow one machine? Driver and worker memory and throughput vs the corpus size.

Writes synthetic JSONL corpora of 1x, 4x and 16x a base size (seeded random prose, distinct ids),
and runs `run_pretrain_pipeline` on each in a fresh process with a pool of 2 workers and work items
of base/4 bytes (so the number of work items grows with the corpus, as at scale). Each run reports
the driver's peak RSS (the process that plans, dispatches and finalizes) and the largest worker's
peak RSS. The target: from 1x to 16x the driver's peak RSS grows by less than a tenth of the corpus
growth (the driver holds work items and counts, never documents), and a worker's peak RSS (its VmHWM,
sampled while it runs) follows
the work-item size, not the corpus.

Then one worker (in-process) vs a pool of 2 on the 16x corpus, where start-up is amortised as it is
at scale: wall and CPU seconds of the tokenize phase (`run_stages`: read, filter, tokenize, write) and
of the whole run (interpreter start, plan and finalize included). On a shared machine the wall-clock
ratio measures the neighbours, so the ratio an idle machine would show is also derived from CPU
seconds: the driver's own CPU runs alone, the workers' CPU splits over 2 cores. The load average is
printed with them. Every run folder of the same corpus must hold the same bytes, whatever the worker
count.

    python benchmarks/bench_data_prep_scale.py [--base-mb 3] [--quick]

`--quick` uses a 0.25 MB base (seconds); the output ends with the driver-growth ratio it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = ("the of and to a in that is was he for it with as his on be at by i this had not are but from or have "
         "an they which one you were her all she there would their we him been has when who will more no if out "
         "so said what up its about into than them can only other new some could time these two may then do "
         "first any my now such like our over man me even most made after also did many before must through "
         "back years where much your way well down should because each just those people how too little state "
         "good very make world still own see men work long get here between both life being under never day "
         "same another know while last might us great old year off come since against go came right used take "
         "three kingdom crown river winter harvest ledger engine whisper lantern orchard").split()

CHILD = """
import glob, json, resource, sys, threading, time
from nemotron.data_prep import DataBlend, pipeline, run_pretrain_pipeline

def watch_workers(peak):
    # VmHWM: a worker's own peak RSS since its exec (ru_maxrss of a spawned child also counts the
    # parent's pages at fork time, before the exec, so it would report the driver's size). The pool's
    # workers are this process's children, listed by the kernel in /proc/self/task/*/children: a scan
    # of every process (psutil's children()) 20 times a second cost the driver 0.6 CPU s in 8 s. A
    # high-water mark needs no fast sampling: the workers live until the run ends.
    while True:
        pids = [pid for name in glob.glob("/proc/self/task/*/children") for pid in open(name).read().split()]
        for pid in pids:
            try:
                status = open(f"/proc/{pid}/status").read()
            except OSError:
                continue
            hwm = [line for line in status.splitlines() if line.startswith("VmHWM:")]
            if hwm:
                peak[0] = max(peak[0], int(hwm[0].split()[1]) / 1024)
        time.sleep(0.25)

def cpu_seconds():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime

def timed(phase, function):
    # The tokenize phase: the library's own run_stages with a clock around it (pool workers are reaped
    # when it returns, so their CPU seconds are counted by then).
    def run(*args, **kwargs):
        started, (own, children) = time.perf_counter(), cpu_seconds()
        try:
            return function(*args, **kwargs)
        finally:
            after = cpu_seconds()
            phase.update(seconds=time.perf_counter() - started, driver_cpu=after[0] - own,
                         workers_cpu=after[1] - children)
    return run

if __name__ == "__main__":
    corpus, out, tokenizer, workers, item_bytes = sys.argv[1:6]
    peak, phase = [0.0], {}
    threading.Thread(target=watch_workers, args=(peak,), daemon=True).start()
    pipeline.run_stages = timed(phase, pipeline.run_stages)
    started = time.perf_counter()
    result = run_pretrain_pipeline(blend=DataBlend(sources=[{"path": corpus}], split=[0.98, 0.01, 0.01]),
                                   output_dir=out, tokenizer=tokenizer, workers=int(workers),
                                   work_item_bytes=int(item_bytes))
    seconds = time.perf_counter() - started
    driver_cpu, workers_cpu = cpu_seconds()
    print(json.dumps({"seconds": seconds, "tokens": result.total_tokens, "run_hash": result.run_hash,
                      "output_dir": str(result.output_dir),
                      "driver_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "worker_rss_mb": peak[0], "driver_cpu": driver_cpu, "workers_cpu": workers_cpu,
                      "phase": phase}))
"""


def write_corpus(path: Path, megabytes: float, seed: int = 0) -> int:
    """Seeded random documents of 20..400 words until the file holds `megabytes` MB."""
    rng, target, number = random.Random(seed), int(megabytes * 1e6), 0
    with path.open("w") as out:
        while out.tell() < target:
            words = rng.choices(WORDS, k=rng.randint(20, 400))
            out.write(json.dumps({"id": f"doc{number}", "text": " ".join(words).capitalize() + "."}) + "\n")
            number += 1
    return path.stat().st_size


def run(corpus: Path, out: Path, tokenizer: Path, workers: int, item_bytes: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD, str(corpus), str(out), str(tokenizer), str(workers),
                           str(item_bytes)], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"benchmark run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu(run_or_phase: dict) -> float:
    return run_or_phase["driver_cpu"] + run_or_phase["workers_cpu"]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-mb", type=float, default=3.0, help="size of the 1x corpus in MB")
    parser.add_argument("--quick", action="store_true", help="a 0.25 MB base: seconds, the same code path")
    args = parser.parse_args()
    base_mb = 0.25 if args.quick else args.base_mb
    item_bytes = max(1, int(base_mb * 1e6 / 4))

    from nemotron.data_prep.tokenizer import train_tokenizer

    with tempfile.TemporaryDirectory(prefix="bench-data-prep-") as folder:
        root = Path(folder)
        rng = random.Random(1)
        tokenizer = train_tokenizer([" ".join(rng.choices(WORDS, k=200)) for _ in range(2000)], 2048,
                                    root / "tokenizer")
        print(f"work items of {item_bytes / 1e6:.2f} MB; pool of 2 workers; driver and largest worker peak RSS",
              file=sys.stderr)
        scales = {}
        for scale in (1, 4, 16):
            corpus = root / f"corpus_{scale}x.jsonl"
            size = write_corpus(corpus, base_mb * scale)
            result = run(corpus, root / f"out_{scale}x_2", tokenizer, 2, item_bytes)
            scales[scale] = (size, result)
            print(f"{scale:>3}x  corpus {size / 1e6:7.1f} MB  driver {result['driver_rss_mb']:6.1f} MB  "
                  f"worker {result['worker_rss_mb']:6.1f} MB  {size / 1e6 / result['seconds']:5.2f} MB/s  "
                  f"{result['tokens'] / result['seconds']:10,.0f} tokens/s", file=sys.stderr)

        size, two = scales[16]
        one = run(root / "corpus_16x.jsonl", root / "out_16x_1", tokenizer, 1, item_bytes)
        same = folder_bytes(Path(one["output_dir"])) == folder_bytes(Path(two["output_dir"]))
        if not same or one["run_hash"] != two["run_hash"]:
            sys.exit("1 and 2 workers wrote different bytes: determinism is broken")
        whole = {name: {"seconds": r["seconds"], "driver_cpu": r["driver_cpu"], "workers_cpu": r["workers_cpu"]}
                 for name, r in (("one", one), ("two", two))}
        for label, one_run, two_run in (("tokenize phase", one["phase"], two["phase"]),
                                        ("whole run", whole["one"], whole["two"])):
            print(f"16x corpus ({size / 1e6:.1f} MB), {label}: 1 worker {one_run['seconds']:.1f} s "
                  f"({cpu(one_run):.1f} CPU s); 2 workers {two_run['seconds']:.1f} s ({cpu(two_run):.1f} CPU s: "
                  f"driver {two_run['driver_cpu']:.1f}, workers {two_run['workers_cpu']:.1f})", file=sys.stderr)
        print(f"same bytes and run hash for 1 and 2 workers: {same}; load average {os.getloadavg()[0]:.1f}",
              file=sys.stderr)
        for label, one_run, two_run in (("whole run", whole["one"], whole["two"]),
                                        ("tokenize phase", one["phase"], two["phase"])):
            # On an idle 2-core machine the driver's CPU runs alone and the workers' splits over 2 cores.
            idle = cpu(one_run) / (two_run["driver_cpu"] + two_run["workers_cpu"] / 2)
            print(f"2 workers vs 1, {label}: wall clock {one_run['seconds'] / two_run['seconds']:.2f}x; "
                  f"from CPU seconds on an idle machine {idle:.2f}x (target >= 1.8)")

        (size_1, run_1), (size_16, run_16) = scales[1], scales[16]
        corpus_growth = (size_16 - size_1) / 1e6
        driver_growth = run_16["driver_rss_mb"] - run_1["driver_rss_mb"]
        worker_growth = run_16["worker_rss_mb"] - run_1["worker_rss_mb"]
        print(f"corpus growth 1x -> 16x: {corpus_growth:.1f} MB; driver peak RSS growth {driver_growth:+.1f} MB; "
              f"worker peak RSS growth {worker_growth:+.1f} MB", file=sys.stderr)
        print(f"driver peak RSS growth / corpus growth: {driver_growth / corpus_growth:.3f} (target < 0.1)")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"benchmark wall time {time.perf_counter() - start:.0f} s", file=sys.stderr)
