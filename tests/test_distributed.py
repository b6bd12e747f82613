"""One process or many (nemotron.training.distributed): the group, its collectives, leaving it.

The collectives are checked for real: two processes under torchrun with Gloo on 127.0.0.1, against the
same script as one plain process holding the whole batch. NCCL (a GPU per rank) cannot run here; under
NCCL the same functions move a CPU count to the rank's GPU for the reduction (`collective_device`), which
scripts/gpu_check.sh checks on a machine with one GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from nemotron.training.distributed import all_reduce_mean, setup_distributed, sum_over_ranks

DISTRIBUTED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def test_plain_python_is_a_single_process_without_a_group(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    info = setup_distributed()
    assert (info.rank, info.world_size, info.is_main, info.device.type) == (0, 1, True, "cpu")
    assert torch.equal(all_reduce_mean(torch.tensor([2.0, 4.0])), torch.tensor([2.0, 4.0]))
    assert sum_over_ranks(7) == 7.0 and sum_over_ranks(torch.tensor([3, 4])).dtype == torch.float64


# The global batch is two shares of per-token losses, 7 tokens and 2: one process holds both, rank r of two
# holds share r. Each process weighs its loss sum as a training step does (loss_sum / (N / W), N the tokens of
# every rank), and logs the step's loss as all_reduce_mean of that; both must give the one-process numbers.
COLLECTIVES = """
import json, sys
from pathlib import Path
import torch
from nemotron.training.distributed import (all_reduce_mean, cleanup, collective_device, setup_distributed,
                                           sum_over_ranks, world_size)

info = setup_distributed("cpu")
shares = [torch.linspace(0.5, 3.5, 7, dtype=torch.float64), torch.tensor([10.0, 20.0], dtype=torch.float64)]
mine = shares if info.world_size == 1 else [shares[info.rank]]
tokens = sum(len(share) for share in mine)
loss_sum = sum(share.sum() for share in mine)
weighted = loss_sum / (sum_over_ranks(tokens) / world_size())  # what this process backpropagates
counts = sum_over_ranks(torch.tensor([tokens, len(mine)]))  # int64 in, float64 out
mean = all_reduce_mean(torch.tensor([float(info.rank), 10.0]))
out = {"rank": info.rank, "world_size": info.world_size, "is_main": info.is_main,
       "group_device": str(collective_device()) if info.is_distributed else None,
       "tokens": sum_over_ranks(tokens), "counts": counts.tolist(), "counts_dtype": str(counts.dtype),
       "counts_device": str(counts.device), "logged_loss": all_reduce_mean(weighted).item(),
       "mean": mean.tolist(), "token_mean": all_reduce_mean(torch.tensor([tokens])).tolist()}
# One file per rank: two processes printing to one pipe can interleave their lines.
Path(sys.argv[1], f"rank{info.rank}.json").write_text(json.dumps(out))
cleanup()
"""


@pytest.mark.slow
def test_two_gloo_processes_sum_and_weigh_the_batch_as_one_process_does(tmp_path):
    script = tmp_path / "collectives.py"
    script.write_text(COLLECTIVES)
    env = {**{k: v for k, v in os.environ.items() if k not in DISTRIBUTED}, "OMP_NUM_THREADS": "1"}
    runs = {}
    for name, launcher in (("one", []), ("two", ["-m", "torch.distributed.run", "--standalone",
                                                 "--nproc_per_node", "2"])):
        (tmp_path / name).mkdir()
        result = subprocess.run([sys.executable, *launcher, str(script), str(tmp_path / name)], env=env,
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr[-2000:]
        runs[name] = [json.loads(path.read_text()) for path in sorted((tmp_path / name).glob("rank*.json"))]
    (one,), two = runs["one"], runs["two"]
    whole = (torch.linspace(0.5, 3.5, 7, dtype=torch.float64).sum().item() + 30.0) / 9  # the batch's token mean
    assert (one["tokens"], one["counts"], one["logged_loss"]) == (9.0, [9.0, 2.0], pytest.approx(whole, rel=1e-15))
    assert [(r["rank"], r["world_size"], r["is_main"]) for r in two] == [(0, 2, True), (1, 2, False)]
    for rank in two:
        assert (rank["tokens"], rank["counts"]) == (one["tokens"], one["counts"])  # the global counts
        assert rank["logged_loss"] == pytest.approx(one["logged_loss"], rel=1e-12)  # a rank with 2 tokens
        # weighs each as much as one with 7: a per-rank mean would log (2 + 15) / 2 = 8.5, not 44 / 9
        assert (rank["group_device"], rank["counts_device"], rank["counts_dtype"]) == ("cpu", "cpu", "torch.float64")
        assert rank["mean"] == [0.5, 10.0] and rank["token_mean"] == [4.5]  # a mean of integers is a float


# The end of a DDP run, many times over: a step's backward pass, then cleanup() of its group, then
# the step returns and frees the DDP wrapper, the model and the group at once. With cleanup() as a
# plain barrier + destroy, Gloo's worker thread and the main thread deadlocked here in every run we
# made (of 200 rounds); cleanup() keeps the final barrier's Work so the worker never frees it.
LEAVE_WORKER = """
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from nemotron.training.distributed import cleanup, setup_distributed

def train_and_leave(group):
    model = torch.nn.Linear(4, 4)
    ddp = DistributedDataParallel(model, process_group=group)
    ddp(torch.randn(2, 4)).sum().backward()
    cleanup(group)

info = setup_distributed()
for _ in range(int(sys.argv[1])):
    train_and_leave(dist.new_group(backend="gloo"))
print(f"rank {info.rank} left {sys.argv[1]} groups", file=sys.stderr)
cleanup()
"""


@pytest.mark.slow
def test_leaving_a_ddp_process_group_never_deadlocks(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(LEAVE_WORKER)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(script), "200"]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        _, stderr = job.communicate(timeout=300)  # ~20 s when nothing hangs
    except subprocess.TimeoutExpired:
        job.terminate()  # torchrun stops its workers on SIGTERM (SIGKILL would leave them running)
        job.communicate(timeout=120)
        pytest.fail("the two workers hung while leaving their process groups (stopped after 300 s)")
    assert job.returncode == 0, stderr[-2000:]
    assert "rank 0 left 200 groups" in stderr and "rank 1 left 200 groups" in stderr
