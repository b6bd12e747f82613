"""How a process's torch threads use the CPU: how many there are, and how they wait on a CPU shared with other work.

- `allowed_cores()`, `torch_threads(num_threads)`: the cores this process may use, and its intra-op thread
  count (its share of them); `evaluation_threads(...)`: the same rule for a block of evaluation code;
- `env_int(name)`: an integer environment variable (torchrun's LOCAL_WORLD_SIZE, RANK, ...), or one clear error;
- `apply_cpu_policy()`: how the threads wait, set before torch loads OpenMP (below).

torch's CPU kernels run on OpenMP threads (GNU libgomp in the Linux wheels: see
`torch.__config__.parallel_info()`). Between two parallel ops each thread waits at a barrier, and libgomp's
default wait is to spin (GOMP_SPINCOUNT, 300,000 polls, ~0.1-1 ms) before it sleeps. Alone on idle
cores that costs nothing. Beside other work it costs a multiple: a thread spins on a core the other job
needs while the sibling it waits for is descheduled, at every one of the thousands of ops of a step
(issue 39, measured on a 2-core machine: two tiny nano3 RL evaluations at once took 3.79x one alone, and
two tiny runs beside each other 10-20x their idle time a step).

`apply_cpu_policy()` (run by `nemotron/__init__.py`, so before any step imports torch; a child process
inherits the environment) sets the wait policy that `benchmarks/bench_shared_cpu.py` measured best; see
`POLICY` for the choice and the numbers. It changes nothing a user chose:
- any OpenMP wait setting already in the environment (OMP_WAIT_POLICY, GOMP_SPINCOUNT) is kept;
- NEMOTRON_CPU_POLICY=spin restores libgomp's default (the previous behaviour; the benchmark's baseline);
- the thread count stays `torch_threads` (`--num-threads`, OMP_NUM_THREADS).
libgomp reads its environment once, when torch is first imported: in a process that imported torch
before nemotron (a notebook, the test suite) the call sets the variables for child processes only.

This module imports nothing but the standard library (`evaluation_threads` imports torch when called): data
steps import it and must not load torch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nemotron.errors import NemotronError

# The environment the default ("share") policy sets, only if the user has set no wait policy: a waiting
# thread polls 1,000 times (a few microseconds), then sleeps, where libgomp's default polls 300,000 times.
# Measured on the idle 2-core machine (benchmarks/bench_shared_cpu.py, nano2 tiny stage 0, 40 steps, median
# of 3 repeats, the policies in turn; 2026-12-02; the loop's own s/step alone, against spin's):
#   policy                      two at once / alone   beside a busy core / alone   loop alone vs spin
#   spin (libgomp default)             2.43x                  1.80x                     1.00
#   OMP_WAIT_POLICY=PASSIVE            1.19x                  1.17x                     1.27
#   GOMP_SPINCOUNT=1000                1.30x                  1.37x                     1.09
#   GOMP_SPINCOUNT=10000               1.85x                  1.76x                     1.09
# Passive (sleep at once, the previous default) shares best but pays a futex wake per parallel op alone;
# a spin count of 1,000 meets both 2.5x goals of issue 39 and shares better than 10,000 at the same cost.
# On a loaded machine (load 4-9, 2026-11-28) spin was 2-4x slower than passive even "alone". Confirmed
# 2026-12-03 (idle, a faster machine): 1,000 two 1.40x, busy 1.35x, loop alone 0.97x spin's.
# docs/performance.md keeps every run.
POLICY = {"GOMP_SPINCOUNT": "1000"}
WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
POLICIES = ("share", "spin")


def apply_cpu_policy(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set the default OpenMP wait policy in `environ` (os.environ) unless the user chose one; the
    variables it set (empty when it set none)."""
    environ = os.environ if environ is None else environ
    policy = environ.get("NEMOTRON_CPU_POLICY", "share")
    if policy not in POLICIES:
        sys.exit(f"error: NEMOTRON_CPU_POLICY={policy!r} is not one of {', '.join(POLICIES)}; "
                 "unset it for the default (share) or set spin for libgomp's own spin-waiting")
    if policy == "spin" or any(name in environ for name in WAIT_SETTINGS):
        return {}
    environ.update(POLICY)
    return dict(POLICY)


def allowed_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota if one is set.

    Not `os.cpu_count()`: in a container or under `taskset` the host's count overstates what the
    process gets, and threads beyond it only wait for each other.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text(encoding="ascii").split()
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def torch_threads(num_threads: int | None = None, processes_here: int | None = None) -> int:
    """The torch intra-op thread count of a process: `num_threads` if given, else its share of the cores.

    The rule: the cores this process may use (`allowed_cores`) split evenly between the processes on
    this machine (torchrun's LOCAL_WORLD_SIZE), at least one. Measured on an idle 2-core machine
    (benchmarks/bench_compute_policy.py, nano2 tiny stage-0 step): 1 process x 2 threads trains 1.5x
    faster than 1 x 1, and 2 processes x 1 thread (DDP) is no faster than 1 x 2, so one process using
    every core is the default layout. Beside other work the threads no longer spin long for descheduled
    siblings (`apply_cpu_policy` sleeps them after a short spin), so the layout stays. Results are bitwise
    reproducible for a fixed thread count (measured for the tiny model with 1 and 2 threads too, but not
    guaranteed: another count can split a reduction differently), so keep the count fixed when comparing runs.
    """
    if num_threads is not None:
        if num_threads < 1:
            raise NemotronError(f"num_threads={num_threads} must be at least 1; pass e.g. --num-threads 1")
        return num_threads
    processes = processes_here or env_int("LOCAL_WORLD_SIZE") or 1
    return max(1, allowed_cores() // processes)


@contextmanager
def evaluation_threads(num_threads: int | None = None) -> Iterator[int]:
    """Run the block with the thread count `torch_threads` chooses; the previous count is restored."""
    import torch

    previous = torch.get_num_threads()
    chosen = torch_threads(num_threads)
    torch.set_num_threads(chosen)
    try:
        yield chosen
    finally:
        torch.set_num_threads(previous)


def env_int(name: str) -> int | None:
    """The integer in environment variable `name`, None when it is unset or empty; anything else is refused."""
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise NemotronError(f"environment variable {name}={value!r} is not an integer; unset it or fix it") from None
