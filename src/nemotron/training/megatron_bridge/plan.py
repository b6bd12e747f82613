"""What a Megatron-Bridge run is: where it runs (`MegatronBridgeLaunch`), how it trains (`Schedule`), and
what was planned (`LaunchPlan`, saved as the run folder's plan.json). No engine import.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from nemotron.errors import NemotronError


@dataclass(frozen=True)
class MegatronBridgeLaunch:
    """Where and on what the run happens: everything a laptop cannot know."""

    data_root: str | None = None
    """Where the cluster reads our data: an absolute shared-filesystem path or s3://bucket/prefix."""
    nodes: int | None = None
    """Number of nodes (sbatch --nodes)."""
    gpus_per_node: int | None = None
    """GPUs per node (torchrun --nproc-per-node, sbatch --gpus-per-node)."""
    container_image: str | None = None
    """Container for sbatch (pyxis --container-image); none: the nodes' own Python environment."""
    partition: str | None = None
    """Slurm partition (#SBATCH --partition), when the cluster needs one."""
    account: str | None = None
    """Slurm account (#SBATCH --account), when the cluster needs one."""
    time_limit: str | None = None
    """Slurm time limit such as 04:00:00 (#SBATCH --time)."""
    tensor_parallel: int | None = None
    """Tensor-parallel size; default the recipe's at full scale (nano2 2, nano3 1), 1 for the smaller models."""
    expert_parallel: int | None = None
    """Expert-parallel size (MoE families); default the recipe's at full scale (nano3 8), 1 for the smaller models."""


@dataclass(frozen=True)
class Schedule:
    """The step's training settings, in Megatron's terms (iterations = optimizer steps)."""

    seq_length: int
    train_iters: int
    micro_batch_size: int
    global_batch_size: int
    lr: float
    min_lr: float
    warmup_iters: int
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    eval_interval: int = 500
    eval_iters: int = 32
    save_interval: int = 1000
    seed: int = 0
    wsd_decay_iters: int | None = None
    """Warmup-stable-decay: the rate holds at `lr` and decays linearly to `min_lr` over these last
    iterations (our `--schedule wsd`); None: cosine decay over the whole run (`--schedule cosine`)."""


@dataclass
class LaunchPlan:
    """What `write_run_folder` wrote and what `launch` runs (also saved as plan.json)."""

    kind: Literal["pretrain", "sft"]
    scale: str
    run_folder: str
    recipe_module: str
    recipe_function: str
    megatron_bridge_commit: str
    overrides: dict[str, Any]
    upload: list[list[str]]  # [local file, remote path]: copy before launching (`upload` command)
    stage_in: list[list[str]]  # [remote path, run-folder path]: copied on the cluster before training
    commands: dict[str, str]  # how to start it: torchrun (one node) and sbatch
    settings: dict[str, Any] = field(default_factory=dict)
    family: str = "nano2"  # the model family (FAMILIES); export_hf_checkpoint builds its config

    def describe(self) -> str:
        """The configuration and the commands, for a human (stderr)."""
        lines = [
            f"Megatron-Bridge {self.kind} ({self.scale}): {self.recipe_module}.{self.recipe_function}() "
            f"at Megatron-Bridge {self.megatron_bridge_commit[:12]}",
            f"run folder: {self.run_folder}",
            "overrides.yaml:",
            *("  " + line for line in yaml.safe_dump(self.overrides, sort_keys=True).splitlines()),
            f"upload ({len(self.upload)} files to the data root): "
            f"python -m nemotron.training.megatron_bridge upload {shlex.quote(self.run_folder)}",
            *(f"  {local} -> {remote}" for local, remote in self.upload[:6]),
            *([f"  ... {len(self.upload) - 6} more in plan.json"] if len(self.upload) > 6 else []),
            f"one node:  {self.commands['torchrun']}",
            f"Slurm:     {self.commands['sbatch']}",
        ]
        return "\n".join(lines)


def check_settings(settings: MegatronBridgeLaunch) -> None:
    """Every missing required flag in one line, then the values that cannot work."""
    missing = [flag for flag, value in [("--data-root", settings.data_root), ("--nodes", settings.nodes),
                                        ("--gpus-per-node", settings.gpus_per_node)] if value is None]
    if missing:
        raise NemotronError(
            f"the Megatron-Bridge hand-off needs {', '.join(missing)}: the data root the cluster reads "
            "(an absolute shared path or s3://bucket/prefix), the number of nodes and GPUs per node"
        )
    root = settings.data_root
    if root.startswith(("gs://", "hf://", "gcs://")):
        raise NemotronError(f"--data-root {root}: Megatron-Core reads bin/idx from a filesystem or s3:// only; "
                            "use an absolute shared path or s3://bucket/prefix")
    if not (root.startswith("s3://") or root.startswith("/")):
        raise NemotronError(f"--data-root {root}: give an absolute path on the cluster's shared filesystem "
                            "(e.g. /lustre/team/nemotron) or s3://bucket/prefix")
    if settings.nodes < 1 or settings.gpus_per_node < 1:
        raise NemotronError(f"--nodes {settings.nodes} --gpus-per-node {settings.gpus_per_node}: both must be >= 1")
