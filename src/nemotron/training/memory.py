"""A training process and this machine's memory: what it may use, what a run needs, how malloc keeps it.

- `check_trainable_here(scale, parameters, processes_here)`: refuse, before any work, a model that the plain
  training loop cannot train here (`--scale full`, or weights + gradients + AdamW state beyond the memory);
- `available_memory_bytes()`: the memory this process may still use (MemAvailable, capped by a cgroup);
- `keep_freed_memory()`: glibc's malloc keeps a step's freed buffers for the next step (no page faults).
"""

from __future__ import annotations

import ctypes
import platform
from pathlib import Path

from nemotron.errors import NemotronError

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
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except OSError:
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text(encoding="ascii").strip()
        if limit != "max":
            available = min(available or int(limit), int(limit))
    except (OSError, ValueError):
        pass
    return available


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
