"""Training in one process or many: the process group, its collectives, and leaving it.

- `setup_distributed(device)`: one process, or one of many under torchrun (DDP), on `pick_device(device)`;
- `collective_device()`: where the group's collectives run: this process's GPU under NCCL, the CPU under Gloo;
- `sum_over_ranks(count)`: a count of the whole global batch, the normaliser of every token-mean loss;
- `all_reduce_mean(tensor)`: a logged number of the whole batch (each rank computed its own share);
- `gradient_sync(ddp, last)`, `world_size()`: DDP's once-per-step gradient all-reduce, the process count;
- `barrier()`, `cleanup()`: meet every process; leave the group without the Gloo deadlock.

The same training script runs three ways, and this module is the only place that knows which:

    python -m nemotron.recipes.nano2.stage0_pretrain.training ...            # 1 process, no group
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano2.stage0_pretrain.training ...   # DDP, CPU
    torchrun --nnodes N --nproc_per_node 8 ...                                # DDP, GPU cluster

torchrun starts one process per worker and tells each who it is through environment variables
(RANK = global index, WORLD_SIZE = number of processes, LOCAL_RANK = index on this machine; see
https://pytorch.org/docs/stable/elastic/run.html). `setup_distributed()` reads them, joins the
process group with the backend that fits the device (NCCL between GPUs, Gloo between CPU
processes) and returns a `DistributedInfo`. Without those variables, or with one process, it is a
plain single process and no group is created, so `python script.py` needs no launcher.

Every collective runs on the group's device (`collective_device`): NCCL reduces CUDA tensors only, and
the counts a step sums (tokens, pairs) are often Python numbers or CPU tensors, so under NCCL they
travel to this process's GPU for the reduction and come back to where they were; under Gloo they stay
on the CPU. A tensor already on the group's device is reduced where it is.

Reproducibility (measured on CPU): the same seed and the same data order give bit-identical losses and
weights across processes, with no extra flags; 1 vs 2 processes give the same optimizer step up to float
rounding (tests/test_loss_across_ranks.py), because every loss divides by a global count.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist

from nemotron.cpu import env_int
from nemotron.errors import NemotronError
from nemotron.models.device import pick_device


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
    rank, world_size, local_rank = (env_int(name) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    if world_size is None or world_size == 1:
        return DistributedInfo(rank=0, world_size=1, local_rank=0, device=pick_device(device_name))
    if rank is None or local_rank is None:
        raise NemotronError(
            f"WORLD_SIZE={world_size} is set but RANK or LOCAL_RANK is missing from the environment; "
            "launch multi-process training with torchrun, which sets all three"
        )
    device = pick_device(device_name, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # one GPU per process: the local rank picks which
    if not dist.is_initialized():
        # NCCL between GPUs, bound to this rank's (device_id: its barriers and collectives know which GPU is
        # this rank's); Gloo, PyTorch's CPU backend, between CPU processes. env:// reads MASTER_ADDR /
        # MASTER_PORT, which torchrun also sets.
        nccl = device.type == "cuda"
        dist.init_process_group(backend="nccl" if nccl else "gloo", init_method="env://", rank=rank,
                                world_size=world_size, device_id=device if nccl else None)
    return DistributedInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def collective_device() -> torch.device:
    """The device the default group's collectives run on, from its backend: this process's GPU under NCCL
    (which reduces CUDA tensors only; `setup_distributed` made it the current device), the CPU under Gloo."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _summed(tensor: torch.Tensor) -> torch.Tensor:
    """all_reduce(SUM) of `tensor` (which it may modify) on the group's device, returned on `tensor`'s device."""
    on_group = tensor.to(collective_device())  # the same tensor when it is there already
    dist.all_reduce(on_group, op=dist.ReduceOp.SUM)
    return on_group.to(tensor.device)


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """The mean of `tensor` over all processes (a copy on `tensor`'s device; the input is not modified).

    Used for logging: each rank's loss is computed on its own slice of the batch, and the number a
    user sees should be the loss of the whole batch. With one process it returns a copy unchanged.
    """
    result = tensor.detach().clone()
    if not result.is_floating_point():
        result = result.double()  # a mean of integers (e.g. token counts) is not an integer
    if dist.is_available() and dist.is_initialized():
        result = _summed(result) / dist.get_world_size()
    return result


def sum_over_ranks(count: float | torch.Tensor) -> float | torch.Tensor:
    """`count` summed over all processes: a float for a number, a float64 tensor for a tensor (a copy, on the
    tensor's device).

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
    Gloo; none of 80 with this fix), and `tests/test_distributed.py`'s leave loop in every run we
    made. Holding the Work ourselves turns the worker's drop into a plain count decrement.
    """
    if dist.is_available() and dist.is_initialized():
        work = dist.barrier(group=group, async_op=True)
        work.wait()
        _FINAL_BARRIERS.append(work)
        dist.destroy_process_group(group)
