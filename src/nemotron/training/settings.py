"""The settings every training step's Config shares: precision, how often it validates and saves, threads.

A training step declares `class Config(TrainingSettings)` (or one of the compositions below) and adds
its own fields (inputs, steps, ...); a step that wants another default redefines the field, with its
marker (`eval_every: int = bookkeeping(40)`: `nemotron.artifact.fields` says what a marker means).

    TrainingSettings      device, precision, compile, validation and checkpoint cadence, threads,
                          output folder, scale, seed
    OptimizerSettings     AdamW and its schedule: lr, min_lr_ratio, warmup_steps, weight_decay,
                          grad_clip, schedule, decay_fraction
    MicroBatchSettings    micro_batch_size, grad_accum_steps
    HandOffSettings       TrainingSettings + the cluster flags of a step that can hand its training to
                          Megatron-Bridge: engine, dry_run, data_root, nodes, gpus_per_node, container_image
    PretrainingSettings   both pretraining steps (they hand off)
    ContinuedTrainingSettings   a dataset and the checkpoint to continue from: the DPO step (no hand-off)
    FineTuningSettings    ContinuedTrainingSettings + HandOffSettings: both SFT steps

`TrainingRun` reads these names, and so does `nemotron.training.megatron_bridge.hand_off` (the cluster
fields, and the optimizer's). torch-free, so a step's `--help` stays fast.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from tyro.constructors import PrimitiveConstructorSpec

from nemotron.artifact.fields import bookkeeping, execution
from nemotron.errors import NemotronError
from nemotron.models.device import DeviceSettings

# `--compile` alone or `--compile on|off|auto` on the command line; saved as True / False / "auto", so that a
# run without the flag saves `"compile": false` as before and keeps its digest.
COMPILE_WORDS = {"on": True, "off": False, "auto": "auto"}
CompileSetting = Annotated[bool | Literal["auto"], PrimitiveConstructorSpec(
    nargs=(0, 1), metavar="{on,off,auto}", choices=tuple(COMPILE_WORDS),
    instance_from_str=lambda words: COMPILE_WORDS[words[0]] if words else True,
    is_instance=lambda value: value in (True, False, "auto"),
    str_from_instance=lambda value: ["auto" if value == "auto" else "on" if value else "off"])]


@dataclass
class TrainingSettings(DeviceSettings):  # --device (nemotron.models.device)
    # precision is bookkeeping, as --device is: the weights and AdamW state are fp32 on every device and
    # autocast only rounds the forward pass, so a run saved on a GPU in bf16 continues on a CPU in fp32.
    precision: Literal["auto", "fp32", "bf16"] = bookkeeping("auto")
    """bf16 autocast for forward passes (weights and optimizer stay fp32); auto: bf16 on a GPU, fp32 on a CPU.
    A checkpoint resumes on another device or precision (both only change rounding and speed)."""
    compile: CompileSetting = False
    """torch.compile the forward pass (the model, and in pretraining the loss with it): on, off, or auto: on
    when the run's steps exceed the measured break-even of this device, scale and thread count (compile
    time included; nemotron.training.compilation). Off by default: at tiny, compiling costs more than it saves."""
    eval_every: int = bookkeeping(20)
    """Measure the validation loss every this many steps (and at the last step)."""
    checkpoint_every: int = bookkeeping(20)
    """Save a checkpoint every this many steps (and at the last step); a killed run resumes from the newest."""
    keep_last: int = bookkeeping(2)
    """How many checkpoints to keep; older ones are deleted."""
    num_threads: int | None = execution(None)
    """torch threads per process; default: the cores this process may use, split between the processes
    of this machine (nemotron.cpu.torch_threads)."""
    output_dir: Path = Path("runs/training")
    """Where the step writes its checkpoints, metrics, final model folder and artifact."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the data, the model and the steps (tiny runs on a laptop CPU)."""
    seed: int = 0
    """Seeds every random choice of the run: same config and seed, same weights (on CPU)."""

    @property
    def hands_off(self) -> bool:
        """True when this step's own loop must not train: at `--scale full` the published model is
        trained at scale by an engine, never by the plain loop. A step with no hand-off (DPO, RL)
        refuses the run; `HandOffSettings` adds the engine flag and the hand-off itself."""
        return self.scale == "full"


@dataclass
class HandOffSettings(TrainingSettings):
    """The cluster flags of a step that can hand its training to Megatron-Bridge (pretraining and SFT:
    `nemotron.training.megatron_bridge.hand_off` reads them); steps that cannot hand off lack them."""

    engine: Literal["plain", "megatron-bridge"] | None = bookkeeping(None)
    """Who trains: `plain` is this step's own loop; `megatron-bridge` writes a Megatron-Bridge run folder
    for a GPU cluster instead (docs/run-a-recipe.md, "At scale"). Default: plain, megatron-bridge at full."""
    dry_run: bool = bookkeeping(False)
    """With megatron-bridge: write the run folder and print the configuration and commands; start nothing."""
    data_root: str | None = bookkeeping(None)
    """With megatron-bridge: where the cluster reads our data, a shared absolute path or s3://bucket/prefix."""
    nodes: int | None = bookkeeping(None)
    """With megatron-bridge: the number of nodes."""
    gpus_per_node: int | None = bookkeeping(None)
    """With megatron-bridge: GPUs per node."""
    container_image: str | None = bookkeeping(None)
    """With megatron-bridge: the container Slurm runs the job in (pyxis); none: the nodes' own Python."""

    @property
    def hands_off(self) -> bool:
        """True when Megatron-Bridge trains instead of this step's loop: `--engine megatron-bridge`, or
        `--scale full` with no engine given (the published model is never trained by the plain loop)."""
        return self.engine == "megatron-bridge" or (self.engine is None and self.scale == "full")


@dataclass
class OptimizerSettings:
    """AdamW and its learning-rate schedule (`nemotron.training.optim.adamw_with_schedule` reads these).

    A step whose measured best differs redefines the field with its own default and says why in a
    comment; the flag and its help stay these."""

    lr: float = 3e-3
    """Peak learning rate, reached after the warmup (per-step defaults: each step says why its own)."""
    min_lr_ratio: float = 0.1
    """Where the schedule ends, as a fraction of lr: the floor of the cosine decay (--schedule cosine), or
    what warmup-stable-decay's final decay reaches (--schedule wsd); 1.0 keeps the rate constant."""
    warmup_steps: int | None = None
    """Linear warmup steps; default 10% of the steps."""
    weight_decay: float = 0.1
    """AdamW weight decay, on weight matrices only (not on norms, biases, Mamba's A_log/D/dt_bias or
    embeddings; nemotron.training.optim says why)."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 disables)."""
    schedule: Literal["cosine", "wsd"] = "cosine"
    """Learning-rate schedule after the warmup: cosine decay, or warmup-stable-decay (constant, then a
    linear decay over the last --decay-fraction of the steps; nemotron.training.optim)."""
    decay_fraction: float = 0.2
    """With --schedule wsd: the share of the steps over which the rate decays to lr x min_lr_ratio; with
    --patience, the share of the planned steps a run anneals over before it ends early."""


@dataclass
class MicroBatchSettings:
    """How one optimizer step's batch is cut: what a step with gradient accumulation adds to the optimizer."""

    micro_batch_size: int = 8
    """Examples per forward pass, per process: windows, packed rows, or preference pairs (two sequences each)."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; global batch = micro_batch_size x grad_accum_steps x processes."""


@dataclass
class PretrainingSettings(HandOffSettings, OptimizerSettings, MicroBatchSettings):
    """What both recipes' pretraining steps read: bin/idx shards cut into windows, a model from a scale."""

    dataset_path: Path | None = None
    """A PretrainDataset folder (stage-0 data curation's bin/idx shards); default: read it from stdin."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `pretraindataset:latest`."""
    seq_len: int | None = None
    """Tokens per training window; default per scale (tiny 256)."""
    model_overrides: tuple[str, ...] = ()
    """NemotronHConfig fields as KEY=VALUE (JSON values), e.g. hidden_size=192 or n_routed_experts=16."""
    schedule: Literal["cosine", "wsd"] = "wsd"
    """Warmup-stable-decay by default for pretraining (Hu et al., 2024; the Nano 3 run's schedule).
    Measured at tiny (nano2, 300 steps, lr 3e-3, same data and seed): held-out bits per byte 0.722x the
    unigram's with cosine decay, 0.706x with WSD decaying over the last 20% and 0.705x over 30%; lr
    5e-3 was worse with either schedule (0.716x cosine, 0.708x WSD); 340 WSD steps: 0.700x."""
    eval_batches: int = 8
    """Global batches of validation windows per evaluation (the whole valid split if it is smaller)."""
    eval_every: int = bookkeeping(40)
    """Validation loss every this many steps (and at the last)."""
    checkpoint_every: int = bookkeeping(40)
    """Checkpoint every this many steps (and at the last); a killed run resumes from the newest."""
    seed: int = 0
    """Seeds the weights and the order of the windows."""


@dataclass
class ContinuedTrainingSettings(TrainingSettings, OptimizerSettings, MicroBatchSettings):
    """What a step that continues from a checkpoint reads: a dataset, and that checkpoint (the step's
    description names the artifact types). The DPO step's, as it is: it cannot hand off."""

    dataset_path: Path | None = None
    """The dataset folder to train on; default: read it from stdin."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `sftdataset:latest` (the dataset's type, lower case)."""
    checkpoint_path: Path | None = None
    """The checkpoint folder to start from; default: read it from stdin, or for SFT the one the dataset was
    made from (at --scale full: the previous stage's training folder holding its MegatronBridgeRun)."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference such as `sftcheckpoint:latest` (the checkpoint's type, lower case)."""
    steps: int | None = None
    """Optimizer steps; default: --epochs passes over the training data (a step is one global batch)."""
    epochs: float | None = None
    """Passes over the training data, which set the steps unless --steps is given; default per scale (the
    step's EPOCHS says why)."""
    patience: int | None = 5
    """End early when the validation loss has not improved on its best for this many evaluations in a
    row (every --eval-every steps): the held-out loss decides when more passes stop helping. The run does
    not stop at once at a high rate: it anneals to its floor over the next --decay-fraction of its planned
    steps, then ends (the check in each step's loop: `TrainingRun.patience_ends_run`, `optim.anneal`). 0: never."""


@dataclass
class FineTuningSettings(ContinuedTrainingSettings, HandOffSettings):
    """What both SFT steps read: `ContinuedTrainingSettings`, and the cluster flags (SFT at scale hands
    off to Megatron-Bridge, from the stage-0 Megatron checkpoint)."""


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
