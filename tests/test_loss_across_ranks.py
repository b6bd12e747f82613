"""A loss means the same on 1 or 2 processes: every training step's maths, one optimizer step each.

`one_step_across_ranks.py` (beside this file) runs one step of each training step's forward and backward
function on a fixed global batch, once as one process and once as two under torchrun (Gloo), with
shares whose token counts differ between the ranks. The gradients DDP averaged, and every weight after
AdamW, must equal the one-process run's up to float rounding. A per-rank token mean (GRPO's before it
used `distributed.sum_over_ranks`) weighs the tokens of the rank with fewer of them more, and fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("one_step_across_ranks.py")
STEPS = ["nano2_pretraining", "nano3_pretraining", "nano2_sft", "nano3_sft", "nano3_grpo"]
LR = 1e-3  # the worker's AdamW rate
DISTRIBUTED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _run_two(out: Path) -> Path:
    env = {name: value for name, value in os.environ.items() if name not in DISTRIBUTED}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(WORKER), str(out)], capture_output=True, text=True, timeout=400,
                            env={**env, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _run_one(out: Path) -> Path:
    """The worker's `main` in this process (not under torchrun: one process, the whole batch); it sets one
    thread and seeds torch, so both are given back after."""
    import one_step_across_ranks  # tests/ is on sys.path under pytest

    assert not any(name in os.environ for name in DISTRIBUTED)
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng():
            one_step_across_ranks.main(out)
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """Both runs once for the module: (one process, two processes)."""
    root = tmp_path_factory.mktemp("ranks")
    return _run_one(root / "one"), _run_two(root / "two")


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS)
def test_two_processes_take_the_same_optimizer_step_as_one_with_the_same_global_batch(runs, step):
    one, two = (torch.load(folder / f"{step}.pt", weights_only=True) for folder in runs)
    assert one["grads"].keys() == two["grads"].keys() and one["grads"]
    # Gradients: the same sums in another order (each rank's half, then Gloo's all-reduce), so float32
    # rounding apart; a per-rank mean moves them by tens of percent.
    for name, single in one["grads"].items():
        scale = single.abs().max().item()
        assert torch.allclose(two["grads"][name], single, rtol=1e-4, atol=1e-5 * scale + 1e-12), (step, name)
    # Weights after clip and AdamW: Adam divides by each gradient's own magnitude, so float noise on a
    # gradient near zero can move a weight by a small fraction of lr; a wrong gradient moves it by ~lr.
    for name, single in one["weights"].items():
        assert torch.allclose(two["weights"][name], single, rtol=0, atol=0.05 * LR), (step, name)
