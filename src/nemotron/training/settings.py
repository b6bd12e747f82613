"""The settings every training step's Config shares: precision, how often it validates and saves, threads.

A training step declares `class Config(TrainingSettings)` and adds its own fields (inputs, steps,
learning rate, ...); a step that wants another default redefines the field. `TrainingRun` reads these
names, and so does `nemotron.training.megatron_bridge.hand_off` (the engine and cluster fields).
torch-free, so a step's `--help` stays fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nemotron.errors import NemotronError


@dataclass
class TrainingSettings:
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to train: auto is the GPU when CUDA is available (one per process under torchrun), else the CPU."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """bf16 autocast for forward passes (weights and optimizer stay fp32); auto: bf16 on a GPU, fp32 on a CPU.
    A checkpoint resumes on another device or precision (both only change rounding and speed)."""
    schedule: Literal["cosine", "wsd"] = "cosine"
    """Learning-rate schedule after the warmup: cosine decay, or warmup-stable-decay (constant, then a
    linear decay over the last --decay-fraction of the steps; nemotron.training.optim)."""
    decay_fraction: float = 0.2
    """With --schedule wsd: the share of the steps over which the rate decays to lr x min_lr_ratio."""
    compile: bool = False
    """torch.compile the model (inductor) before training. Off by default: at tiny, compiling takes
    longer than it saves within the run (benchmarks/bench_compile.py prints the break-even step)."""
    eval_every: int = 20
    """Measure the validation loss every this many steps (and at the last step)."""
    checkpoint_every: int = 20
    """Save a checkpoint every this many steps (and at the last step); a killed run resumes from the newest."""
    keep_last: int = 2
    """How many checkpoints to keep; older ones are deleted."""
    num_threads: int | None = None
    """torch threads per process; default: the cores this process may use, split between the processes
    of this machine (nemotron.training.compute.torch_threads)."""
    engine: Literal["plain", "megatron-bridge"] | None = None
    """Who trains: `plain` is this step's own loop; `megatron-bridge` writes a Megatron-Bridge run folder
    for a GPU cluster instead (docs/run-a-recipe.md, "At scale"). Default: plain, megatron-bridge at full."""
    dry_run: bool = False
    """With megatron-bridge: write the run folder and print the configuration and commands; start nothing."""
    data_root: str | None = None
    """With megatron-bridge: where the cluster reads our data, a shared absolute path or s3://bucket/prefix."""
    nodes: int | None = None
    """With megatron-bridge: the number of nodes."""
    gpus_per_node: int | None = None
    """With megatron-bridge: GPUs per node."""
    container_image: str | None = None
    """With megatron-bridge: the container Slurm runs the job in (pyxis); none: the nodes' own Python."""
    output_dir: Path = Path("runs/training")
    """Where the step writes its checkpoints, metrics, final model folder and artifact."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the data, the model and the steps (tiny runs on a laptop CPU)."""
    seed: int = 0
    """Seeds every random choice of the run: same config and seed, same weights (on CPU)."""

    @property
    def hands_off(self) -> bool:
        """True when Megatron-Bridge trains instead of this step's loop: `--engine megatron-bridge`, or
        `--scale full` with no engine given (the published model is never trained by the plain loop)."""
        return self.engine == "megatron-bridge" or (self.engine is None and self.scale == "full")



def parse_overrides(items: tuple[str, ...]) -> dict:
    """`("hidden_size=192", "hybrid_override_pattern=M-M*-")` -> {"hidden_size": 192, ...}."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise NemotronError(f"--model-overrides {item!r} is not KEY=VALUE; e.g. hidden_size=192")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value  # a bare string such as a layer pattern
    return overrides
