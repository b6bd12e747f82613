"""Compute policy and setup for a training or evaluation step: processes, threads, seeds, memory.

This is the one module that decides how a step uses the machine:
- `setup_distributed(device)`: one process, or one of many under torchrun (DDP), on `pick_device(device)`;
- `autocast_dtype(precision, device)`, `to_device(batch, device)`: bf16 autocast on a GPU by default,
  batches copied through pinned memory there;
- `allowed_cores()`, `torch_threads(num_threads)`: how many intra-op threads a process uses;
- `keep_freed_memory()`: glibc's malloc keeps a step's freed buffers for the next step;
- `evaluation_threads(...)`: the same rule for a block of evaluation code;
- `seed_everything(seed)`: Python, NumPy and torch RNGs, and deterministic CPU float math;
- `sum_over_ranks(count)`: a count of the whole global batch, the normaliser of every token-mean loss;
- `gradient_sync(ddp, last)`, `world_size()`: DDP's once-per-step gradient all-reduce, the process count;
- `check_trainable_here(...)`: refuse a model that the plain loop cannot train on this machine.

The same training script runs three ways, and this module is the only place that knows which:

    python -m nemotron.recipes.nano2.stage0_pretrain.training ...            # 1 process, no group
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano2.stage0_pretrain.training ...   # DDP, CPU
    torchrun --nnodes N --nproc_per_node 8 ...                                # DDP, GPU cluster

torchrun starts one process per worker and tells each who it is through environment variables
(RANK = global index, WORLD_SIZE = number of processes, LOCAL_RANK = index on this machine; see
https://pytorch.org/docs/stable/elastic/run.html). `setup_distributed()` reads them, joins the
process group with the backend that fits the hardware (NCCL between GPUs, Gloo between CPU
processes) and returns a `DistributedInfo`. Without those variables it is a plain single process and
no process group is created, so `python script.py` needs no launcher.

Reproducibility on CPU (measured): the same seed and the same data order give bit-identical losses
and weights, across processes, with no extra flags (`torch.use_deterministic_algorithms` is not
needed for these CPU kernels). For the tiny model we also measured identical weights with 1 and 2
intra-op threads, but that is not guaranteed in general (a different thread count can split a
reduction differently), so keep the thread count fixed when comparing runs. `seed_everything` also
flushes denormal floats to zero (`torch.set_flush_denormal(True)`): tiny values that appear as a model
fits its data can make x86 float math many times slower, and flushing is itself deterministic.
Throughput: see `torch_threads` for the measured thread policy. How those threads wait between ops
is set before torch loads, by `nemotron/cpu.py` (imported with the package): they sleep at a barrier
(OMP_WAIT_POLICY=PASSIVE) instead of spinning, so a step beside other work costs its share of the CPU, not
a multiple. Measured with benchmarks/bench_shared_cpu.py (nano2 tiny stage 0, 20 steps, whole process;
2-core machine shared with other helpers' test runs, 1-minute load average 5-9 throughout, so noisy;
2026-11-28): libgomp's spin (NEMOTRON_CPU_POLICY=spin) 63.7 s alone, passive 14.4 s alone (4.4x faster on
the busy machine); passive two at once 2.17x one alone, beside a pinned busy loop 1.64x (goal 2.5x);
GOMP_SPINCOUNT=10000 lies between (20.2 s alone, 2.43x, 2.27x). Two more runs (spin vs passive): at load
4-8, alone 45.1 vs 11.9 s, two/alone 2.74x vs 2.19x, busy/alone 1.88x vs 1.89x; at load 2-5 (the lowest
seen; the load includes the benchmark's own previous runs), alone 30.8 vs 16.1 s, two/alone 1.91x vs 1.35x,
busy/alone 1.66x vs 1.12x. The idle-machine (load < 1) speed of passive vs spin is not yet measured.
"""

from __future__ import annotations

import ctypes
import os
import platform
import random
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from nemotron.errors import NemotronError


@dataclass(frozen=True)
class DistributedInfo:
    """Who this process is in the job. `is_main` (rank 0) is the one that writes files and logs."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def setup_distributed(device_name: str = "auto") -> DistributedInfo:
    """Join the torchrun process group if launched by torchrun; otherwise describe a single process.
    `device_name` is `--device` (auto, cpu, cuda; `pick_device`)."""
    rank, world_size, local_rank = (_env_int(name) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    if world_size is None or world_size == 1:
        return DistributedInfo(rank=0, world_size=1, local_rank=0, device=pick_device(device_name))
    if rank is None or local_rank is None:
        raise NemotronError(
            f"WORLD_SIZE={world_size} is set but RANK or LOCAL_RANK is missing from the environment; "
            "launch multi-process training with torchrun, which sets all three"
        )
    device = pick_device(device_name, local_rank)
    if device.type == "cuda":
        # One GPU per process: the local rank picks which. NCCL is the GPU-to-GPU backend.
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        backend = "gloo"  # Gloo is PyTorch's CPU backend for collectives
    if not dist.is_initialized():
        # env:// reads MASTER_ADDR / MASTER_PORT, which torchrun also sets.
        dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world_size)
    return DistributedInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def pick_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """`--device auto|cpu|cuda` -> the device this process trains on: auto is the local rank's GPU when
    CUDA is available, else the CPU; `cuda` without a usable GPU is refused, not silently run on the CPU."""
    if name not in ("auto", "cpu", "cuda"):
        raise NemotronError(f"--device {name!r} is not one of auto, cpu, cuda")
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise NemotronError("--device cuda, but torch sees no CUDA GPU here (torch.cuda.is_available() is False); "
                            "pass --device cpu or auto, or install a CUDA build of torch")
    return torch.device("cuda", local_rank)


def device_name(device: torch.device) -> str:
    """What a run's metrics call its device: "cpu", or the GPU's index and model ("cuda:0 NVIDIA H100 80GB
    HBM3"), so a measured wall time or tokens/s always says what it was measured on."""
    if device.type != "cuda":
        return device.type
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} {torch.cuda.get_device_name(index)}"


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """`--precision` on `device` -> the autocast dtype, or None for plain fp32: auto is bf16 on a GPU
    (its tensor cores' fast dtype; the weights and AdamW state stay fp32) and fp32 on a CPU, where bf16
    matmuls are no faster on most cores and round more."""
    if precision not in ("auto", "fp32", "bf16"):
        raise NemotronError(f"--precision {precision!r} is not one of auto, fp32, bf16")
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A batch on the training device: on a GPU through pinned (page-locked) memory, so the copy runs
    without an extra staging copy and does not block the host (`non_blocking`); on a CPU, as it is."""
    if device.type != "cuda":
        return batch.to(device)
    return batch.pin_memory().to(device, non_blocking=True)


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """The mean of `tensor` over all processes (a copy; the input is not modified).

    Used for logging: each rank's loss is computed on its own slice of the batch, and the number a
    user sees should be the loss of the whole batch. With one process it returns a copy unchanged.
    """
    result = tensor.detach().clone()
    if not result.is_floating_point():
        result = result.double()  # a mean of integers (e.g. token counts) is not an integer
    if dist.is_available() and dist.is_initialized():
        result = _summed(result) / dist.get_world_size()
    return result


def _summed(tensor: torch.Tensor) -> torch.Tensor:
    """all_reduce(SUM) of `tensor` (which it may modify), returned on `tensor`'s device. NCCL reduces CUDA
    tensors only, and our counts and logged losses live on the CPU: under nccl they travel to this
    process's GPU and back; gloo reduces them where they are."""
    device = tensor.device
    if dist.get_backend() == "nccl" and device.type != "cuda":
        tensor = tensor.to(torch.device("cuda", torch.cuda.current_device()))
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.to(device)


def sum_over_ranks(count: float | torch.Tensor) -> float | torch.Tensor:
    """`count` summed over all processes: a float for a number, a float64 tensor for a tensor (a copy).

    With one process it is `count` itself; under torchrun an all_reduce(SUM) over the default group, so
    every process must call it at the same point. This is the normaliser of every token-mean (or
    pair-mean) training loss, and why it must be global: say rank r holds n_r trained tokens with
    per-token losses l_rt, N = sum_r n_r of them in the optimizer step. The loss we mean is

        L = (1/N) sum_r sum_t l_rt                          (every token of the global batch weighs 1/N)

    DDP does not see L: each rank backpropagates its own L_r and DDP AVERAGES the gradients, so the
    update follows (1/W) sum_r grad L_r over W ranks. A per-rank mean L_r = (1/n_r) sum_t l_rt gives
    (1/W) sum_r (1/n_r) sum_t grad l_rt: a rank with fewer tokens gets more weight per token, and the
    result differs from the one-process run on the same batch whenever the n_r differ. Dividing by
    the global count and undoing DDP's average,

        L_r = (W / N) sum_t l_rt   =>   (1/W) sum_r grad L_r = (1/N) sum_r sum_t grad l_rt = grad L,

    is exact for any split of the batch (Megatron-Core's `calculate_per_token_loss` does the same with
    a sum and a count). Written `loss_sum / (N / W)`, so one process divides by N, bit for bit as before.
    """
    if isinstance(count, torch.Tensor):
        total = count.detach().to(torch.float64).clone()
        if dist.is_available() and dist.is_initialized():
            total = _summed(total)
        return total
    return float(sum_over_ranks(torch.tensor(float(count), dtype=torch.float64)).item())


def gradient_sync(ddp, last: bool):
    """DDP's `no_sync()` for every micro-batch of an optimizer step but the `last` (gradient accumulation:
    one all-reduce per step, not one per micro-batch); a no-op without DDP."""
    return ddp.no_sync() if ddp is not None and not last else nullcontext()


def world_size() -> int:
    """How many processes train together: torchrun's group size, 1 without a group."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def barrier() -> None:
    """Wait until every process reaches this point (e.g. rank 0 finished writing a checkpoint)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


# The Work of the last barrier before a group is destroyed, kept until the process exits (see `cleanup`).
_FINAL_BARRIERS: list[dist.Work] = []


def cleanup(group: dist.ProcessGroup | None = None) -> None:
    """Meet every process at a barrier, then leave the process group (safe to call when there is none).

    `group` is the default group unless given. The barrier's Work object is kept until the process
    exits, on purpose. Gloo runs a collective on a worker thread, which drops its reference to the
    Work a moment after `wait()` returns. When that is the last reference, the worker frees the Work
    and tensors it holds whose Python objects are gone (in our runs, the model's, which DDP averaged),
    and that needs the GIL. By then the main thread may be freeing the group (the step returned, so
    the DDP wrapper that holds it went), and the group's destructor joins the worker threads while
    holding the GIL: a deadlock. It hung 5 of 120 two-process nano3 pretraining runs (torch 2.13,
    Gloo; none of 80 with this fix), and `tests/test_training_lib.py`'s leave loop in every run we
    made. Holding the Work ourselves turns the worker's drop into a plain count decrement.
    """
    if dist.is_available() and dist.is_initialized():
        work = dist.barrier(group=group, async_op=True)
        work.wait()
        _FINAL_BARRIERS.append(work)
        dist.destroy_process_group(group)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch, and make CPU float math deterministic and fast (see docstring)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    torch.set_flush_denormal(True)


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
        quota, period = open("/sys/fs/cgroup/cpu.max", encoding="ascii").read().split()
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
    every core is the default layout. Beside other work the threads no longer spin-wait for descheduled
    siblings (nemotron/cpu.py sleeps them, see the module docstring), so the layout stays. Results are
    bitwise reproducible for a fixed thread count; a different count may round reductions differently.
    """
    if num_threads is not None:
        if num_threads < 1:
            raise NemotronError(f"num_threads={num_threads} must be at least 1; pass e.g. --num-threads 1")
        return num_threads
    processes = processes_here or _env_int("LOCAL_WORLD_SIZE") or 1
    return max(1, allowed_cores() // processes)


# glibc's mallopt parameters (malloc.h) and the largest mmap threshold it accepts on 64-bit Linux
# (HEAP_MAX_SIZE / 2): a freed block larger than this still goes back to the kernel.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_MAX = 32 << 20


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks of up to 32 MB for reuse; True if it took the setting.

    By default glibc gives a freed block above its mmap threshold (128 KB at start, raised as blocks
    are freed) back to the kernel, and trims the top of its heap above 128 KB of free space. A training
    step frees and re-takes the same activation and gradient buffers every step, so each step
    page-faults them in again, each page zeroed by the kernel. With the threshold at its maximum and no
    trimming, a process keeps its peak step's memory mapped (its RSS does not fall between steps) and
    the page faults stop (nano2 tiny, batch 8: ~18,000 faults a step before, next to none after; with the
    loss's softmax in place, 2026-11-27: 5,000-11,000 a step before, 150-500 after).
    Measured on an idle 2-core machine (benchmarks/bench_mfu.py, --malloc default vs keep): nano2 tiny
    stage 0's step, 9,916 -> 12,855 tokens/s. A larger block (the full logits of the plain loss: 32 MB
    at tiny) still round-trips; the blocked loss's are 16 MB. Not glibc (macOS, musl): False.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL("libc.so.6")
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30))


@contextmanager
def evaluation_threads(num_threads: int | None = None) -> Iterator[int]:
    """Run the block with the thread count `torch_threads` chooses; the previous count is restored."""
    previous = torch.get_num_threads()
    chosen = torch_threads(num_threads)
    torch.set_num_threads(chosen)
    try:
        yield chosen
    finally:
        torch.set_num_threads(previous)


# Bytes per parameter that plain fp32 training with AdamW holds: weights 4, gradients 4, Adam's two
# moments 8 (Rajbhandari et al., 2020, "ZeRO", section 3.1, count 16 bytes per parameter the same way
# for mixed precision). Activations come on top, so this is a lower bound.
TRAINING_BYTES_PER_PARAMETER = 16


def check_trainable_here(scale: str, parameters: int, processes_here: int = 1) -> None:
    """Refuse, before any work, a run the plain training loop cannot do on this machine.

    `--scale full` is the published model: it is trained by Megatron-Bridge on a GPU cluster, never
    by this loop. Any other model whose weights, gradients and AdamW state alone would not fit in the
    memory this process may use (the cgroup limit when there is one) is refused the same way, instead
    of failing deep inside the first step or swapping the machine to a halt. Under DDP every process
    on this machine holds a full copy (`processes_here`, torchrun's LOCAL_WORLD_SIZE).
    """
    needed = parameters * TRAINING_BYTES_PER_PARAMETER * processes_here
    hand_off = "use --scale tiny, small or medium here, or hand the run to Megatron-Bridge on a GPU cluster"
    if scale == "full":
        raise NemotronError(
            f"--scale full is the published {parameters / 1e9:.2f}B-parameter model (~{needed / 2**30:,.0f} GiB "
            f"of weights, gradients and AdamW state in fp32) and the plain training loop does not train it; {hand_off}"
        )
    available = available_memory_bytes()
    if available is not None and needed > available:
        raise NemotronError(
            f"the model has {parameters / 1e6:,.1f}M parameters: weights, gradients and AdamW state need "
            f"~{needed / 2**30:,.1f} GiB but this process may use ~{available / 2**30:,.1f} GiB; "
            f"shrink it with --model-overrides or a smaller --scale, or {hand_off}"
        )


def available_memory_bytes() -> int | None:
    """Memory this process may still use: MemAvailable, capped by a cgroup v2 limit; None if unknown."""
    available = None
    try:
        for line in open("/proc/meminfo", encoding="ascii"):
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except OSError:
        return None
    try:
        limit = open("/sys/fs/cgroup/memory.max", encoding="ascii").read().strip()
        if limit != "max":
            available = min(available or int(limit), int(limit))
    except (OSError, ValueError):
        pass
    return available


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise NemotronError(f"environment variable {name}={value!r} is not an integer; unset it or fix it") from None
