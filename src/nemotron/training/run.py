"""A training run's state and I/O in one object, so that a training step reads as its algorithm.

Every training step (pretraining, SFT, DPO, ...) does the same bookkeeping around its loop: set up the
processes, threads and seeds; resume from the newest checkpoint of its output folder; log every step;
save checkpoints; write the final model folder and the artifact. `TrainingRun` does all of that and
nothing else: it never changes the model's layers (the step chooses them where it builds or loads the
model, e.g. the CPU training scan of `nemotron.models.mamba2`). The maths stays in the step file:
the batches, the forward pass, the loss and its weight, `backward()`, `no_sync`, clipping,
`optimizer.step()`, the schedule and early stopping's check (`patience_ends_run` counts the validations
and moves the run's last step; the step anneals its own schedule). nano2's pretraining, SFT and DPO steps
write one optimizer step out in full; the others call named library functions for the parts they share
(`windows.pretraining_backward`, `packed_batches.sft_backward`, `optim.optimizer_step`):

    training = TrainingRun(config, inputs=[dataset], steps=steps, name="pretrain")   # compute init
    model, optimizer, scheduler, data = ...                                          # the step's choices
    loss_of, ddp, autocast = training.prepare(CausalLMLoss(model))                   # device, DDP, precision
    state = training.resume(model, optimizer, scheduler, data, tokenizer)            # -> LoopState
    for step in range(state.step + 1, steps + 1):
        ...forward, loss, backward (no_sync but the last micro-batch), clip, optimizer.step()...
        training.record(step, loss=loss, lr=lr, grad_norm=grad_norm, tokens=tokens, validation=...)
        if (last := training.patience_ends_run(step, validation)) is not None:  # --patience: end early
            anneal(scheduler, step, last)                                       # the rate to its floor at `last`
        training.checkpoint_if_due(step)
    return training.finish(PretrainCheckpoint, metrics={...})

The output folder of a run (`config.output_dir`):

    checkpoints/step_000020/   checkpoints (nemotron.training.checkpoint), kept for resume
    model/                     the final Hugging Face folder: weights, config, tokenizer
    metrics.jsonl              per-step numbers (nemotron.training.metrics)
    watch.jsonl                what the steps did: samples, probe pairs, per-token losses (`keep`,
                               nemotron.training.watch)
    metadata.json              the artifact, written last; absent while the run is unfinished

Resume is safe by construction: every checkpoint stores the run's identity (`run_settings(config)`:
the settings that shape the trajectory, plus the digests of the inputs), and a folder written by a run
with other settings or inputs is refused with the names of what changed. Continuing run A's optimizer
state with run B's learning rate or data would give a model that is neither, silently.

Under torchrun every rank builds a `TrainingRun`; only rank 0 writes files, logs and prints (the other
ranks' stdout is muted, so a job prints one artifact), and every rank meets at the same barriers.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nemotron import atomic
from nemotron.artifact import Artifact, mark_unfinished
from nemotron.artifact.fields import part_of_the_run
from nemotron.cpu import torch_threads
from nemotron.errors import NemotronError
from nemotron.models.device import autocast_dtype, device_name, to_device
from nemotron.models.loading import mamba_kernels_note, quiet_cuda_kernel_notes
from nemotron.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from nemotron.training.compilation import choose, compile_forward
from nemotron.training.distributed import barrier, cleanup, setup_distributed, sum_over_ranks
from nemotron.training.memory import check_trainable_here, keep_freed_memory
from nemotron.training.metrics import MetricsLog, TrainingProgress
from nemotron.training.optim import wsd_decay_steps
from nemotron.training.watch import WATCH_FILE

A = TypeVar("A", bound=Artifact)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (every CUDA device too), and flush denormal floats to zero.

    Tiny values that appear as a model fits its data can make x86 float math many times slower, and
    flushing is itself deterministic. On the CPU the same seed, data order and thread count then give
    bit-identical losses and weights (measured; `torch.use_deterministic_algorithms` is not needed for these
    CPU kernels), so keep the thread count fixed when comparing runs (`nemotron.cpu.torch_threads`).
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_flush_denormal(True)

# Smoothing of the logged loss: an exponential moving average with this decay, debiased like Adam's
# moments (Kingma & Ba, 2015, section 3) so the first steps are not pulled towards zero.
EMA_DECAY = 0.9


@dataclass
class LoopState:
    """Where the training loop is. Saved in every checkpoint and restored on resume."""

    step: int = 0  # optimizer steps done
    ema: float = 0.0  # moving average of the loss, not yet debiased
    tokens: int = 0  # tokens trained on so far, all ranks together
    validation: dict[str, float] = field(default_factory=dict)  # the latest validation numbers
    best_val_loss: float | None = None  # the lowest validation loss so far
    evals_without_gain: int = 0  # validations in a row that did not beat it
    stopped_early: bool = False  # `--patience` moved the run's last step before its planned one
    last_step: int | None = None  # that step (the rate anneals to its floor on the way)

    @property
    def smoothed_loss(self) -> float:
        return self.ema / (1 - EMA_DECAY**self.step) if self.step else float("nan")


class TrainingRun:
    """Compute init, resume, per-step records, checkpoints and the final artifact of one training run."""

    def __init__(self, config: Any, inputs: Sequence[Artifact], steps: int, name: str,
                 patience: int | None = None) -> None:
        """`patience`: the run's `--patience` where the step picks it per scale (the config keeps None then, as
        for a per-scale `--steps`); default the config's own."""
        self.config, self.inputs, self.steps, self.name = config, list(inputs), steps, name
        self.patience = getattr(config, "patience", None) if patience is None else patience
        self.out = Path(config.output_dir)
        if steps < 1:
            raise NemotronError(f"--steps {steps} must be at least 1")
        if getattr(config, "watch_every", 1) < 1:  # the steps that keep records every N steps (GRPO, DPO)
            raise NemotronError(f"--watch-every {config.watch_every} must be at least 1 (1: keep every step)")
        # --- compute: processes, threads, seeds ---
        self.info = setup_distributed(config.device)
        seed_everything(config.seed)
        quiet_cuda_kernel_notes()  # on a CPU the Mamba CUDA kernels cannot run: no need to say so
        torch.set_num_threads(torch_threads(config.num_threads))
        keep_freed_memory()  # each step re-takes the buffers the last one freed: no page faults
        if not self.info.is_main:
            sys.stdout = open(os.devnull, "w")  # one artifact JSON on stdout per job, from rank 0
        self.identity = {"config": run_settings(config), "inputs": [artifact.digest for artifact in self.inputs]}
        self.state = LoopState()
        self.started = time.perf_counter()  # after the inputs: in a pipe, loading waits for the previous step
        self._parts: tuple | None = None
        self._log: MetricsLog | None = None
        self._watch: MetricsLog | None = None
        self._progress: TrainingProgress | None = None
        self._resumed_from, self._loop_started, self._loop_tokens = 0, 0.0, 0
        self._compute_note = ""
        self._compiled = False

    @property
    def is_main(self) -> bool:
        return self.info.is_main

    @property
    def device(self) -> torch.device:
        return self.info.device

    def load_model(self, model_dir: Path | str) -> nn.Module:
        """A saved model in float32 to train further; refused first (counted on the meta device, nothing
        allocated) if its weights and optimizer state cannot fit this machine."""
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        with torch.device("meta"):
            parameters = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
        check_trainable_here(self.config.scale, parameters, self.info.world_size)
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)

    def prepare(
        self, model: nn.Module, *, static_shapes: bool = False,
    ) -> tuple[nn.Module, DistributedDataParallel | None, Any]:
        """Put `model` on this process's device in training mode, as the step built it (nothing is swapped).
        Returns (what to call for the forward pass: `model`, its DDP wrapper under torchrun, compiled when
        `--compile` says so (`nemotron.training.compilation`; `static_shapes`: every call has the same shapes,
        as pretraining's windows, which lets a GPU replay it as CUDA graphs); the DDP wrapper or None, for
        `no_sync`; the autocast context of `--precision` on this device: bf16, or a no-op for fp32)."""
        model.to(self.device).train()
        dtype = autocast_dtype(self.config.precision, self.device)
        choice = choose(self.config.compile, self.device.type, self.config.scale, torch.get_num_threads(), self.steps)
        # said once `resume` has accepted the output folder, so a refused run prints only its error
        kernels = mamba_kernels_note(self.device.type)
        self._compute_note = f"on {self.device}, {dtype or torch.float32} forward, {choice.why}; {kernels}"
        ddp = DistributedDataParallel(model) if self.info.is_distributed else None
        forward = ddp or model
        if choice.compile:
            forward = compile_forward(forward, self.device.type, static_shapes=static_shapes,
                                      distributed=self.info.is_distributed)
        self._compiled = choice.compile
        autocast = torch.autocast(self.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)
        return forward, ddp, autocast

    def to_device(self, batch: torch.Tensor) -> torch.Tensor:
        """A batch on this process's device (through pinned memory on a GPU: `models.device.to_device`)."""
        return to_device(batch, self.device)

    def resume(self, model: nn.Module, optimizer, scheduler, data, tokenizer) -> LoopState:
        """Continue from the newest checkpoint of the output folder, if any; returns the loop state.

        `data` is the step's sampler (anything with `state_dict` / `load_state_dict`). Refuses a
        checkpoint of another architecture or of a run with other settings or inputs.
        """
        self._parts = (model, optimizer, scheduler, data, tokenizer)
        latest = latest_checkpoint(self.out)
        if latest is not None:
            saved = load_checkpoint(latest, model, optimizer, scheduler)
            check_same_run(saved["extra"]["run"], self.identity, latest)
            data.load_state_dict(saved["data_state"])
            self.state = LoopState(**saved["extra"]["loop"])
            if self.state.stopped_early:  # --patience had moved the last step (older checkpoints: to this one)
                self.steps = self.state.last_step or self.state.step
        self._resumed_from = self.state.step
        if self.is_main:
            if self._compute_note:
                print(f"{self.name}: {self._compute_note}", file=sys.stderr)
            mark_unfinished(self.out)  # until this run completes, the folder holds no artifact
            self._log = MetricsLog(self.out / "metrics.jsonl", resume_step=self.state.step if latest else None)
            self._watch = MetricsLog(self.out / WATCH_FILE, resume_step=self.state.step if latest else None,
                                     mirror=False)
            if self.state.step >= self.steps:
                print(f"{self.name}: already finished: nothing to train ({self.state.step} of {self.steps} steps "
                      f"are in {self.out}); saving its model and artifact again", file=sys.stderr)
            else:
                self._progress = TrainingProgress(self.steps, self.state.step, self.name)
        self._loop_started = time.perf_counter()
        return self.state

    def is_due(self, step: int, every: int) -> bool:
        """True every `every` steps and at the last step (for validation and checkpoints)."""
        return step % every == 0 or step == self.steps

    def record(
        self, step: int, *, loss: float, lr: float, grad_norm: float, tokens: int,
        validation: dict[str, float] | None = None, **extra: float,
    ) -> None:
        """Log optimizer step `step`: numbers already averaged over ranks; `tokens` counts all ranks."""
        state = self.state
        state.step, state.tokens = step, state.tokens + tokens
        state.ema = EMA_DECAY * state.ema + (1 - EMA_DECAY) * loss
        if validation is not None:
            state.validation = dict(validation)
        self._loop_tokens += tokens
        if self.is_main:
            record = {"loss": loss, "smoothed_loss": state.smoothed_loss, "lr": lr, "grad_norm": grad_norm,
                      **extra, **(validation or {})}
            self._log.log(step, record)
            self._progress.update(1, tokens, state.smoothed_loss)

    def keep(self, step: int, kind: str, **record: Any) -> None:
        """Keep what step `step` did (JSON values) as one `kind` line of watch.jsonl, on rank 0 only
        (nemotron.training.watch says what each kind holds)."""
        if self.is_main:
            self._watch.log(step, {"kind": kind, **record})

    def patience_ends_run(self, step: int, validation: dict[str, float] | None) -> int | None:
        """Early stopping (`--patience P`), called by the step's loop after `record`: after P validations in a
        row without a new best validation loss, the run's new last step, else None. Stopping at once would
        leave the model of a rate still high (measured on nano3's tiny SFT: exact match 0.54 and 0.85 where
        the same runs taken to their planned end gave 0.66 and 0.97), so the run ends `decay_fraction` of its
        planned steps later (the length of a warmup-stable-decay run's decay) and the step anneals its rate to
        the floor on the way (`optim.anneal`: the schedule is the step's, never changed here). The new last
        step is saved with the checkpoints (`stopped_early`: a re-run of the same command resumes into the same
        last step). When fewer steps than that are left, the planned schedule already ends the run as low:
        None, nothing changes."""
        state, patience = self.state, self.patience
        if not patience or state.stopped_early or not self.is_due(step, self.config.eval_every) or step >= self.steps:
            return None
        val_loss = (validation or {}).get("val_loss")
        if val_loss is not None:  # a step may validate on rank 0 only (DPO): its verdict goes to every rank
            if state.best_val_loss is None or val_loss < state.best_val_loss:
                state.best_val_loss, state.evals_without_gain = val_loss, 0
            else:
                state.evals_without_gain += 1
        stop = state.evals_without_gain >= patience
        if self.info.is_distributed:
            stop = sum_over_ranks(float(stop)) > 0
        last = step + wsd_decay_steps(self.config.decay_fraction, self.steps)
        if not stop or last >= self.steps:
            return None
        state.stopped_early, state.last_step, self.steps = True, last, last
        if self.is_main:
            print(f"{self.name}: the validation loss has not beaten its best ({state.best_val_loss:.4f}) for "
                  f"{patience} evaluations (--patience): the rate anneals to its floor over the next "
                  f"{last - step} steps, and the run ends at step {last}", file=sys.stderr)
            if self._progress is not None:
                self._progress.end_at(last)
        return last

    @property
    def stopped_early(self) -> bool:
        """True once `--patience` has moved the run's last step (`steps`) before its planned one."""
        return self.state.stopped_early

    def checkpoint_if_due(self, step: int) -> None:
        """Save a checkpoint every `config.checkpoint_every` steps and at the end (rank 0, then a barrier)."""
        if not self.is_due(step, self.config.checkpoint_every):
            return
        if self.is_main:
            model, optimizer, scheduler, data, tokenizer = self._parts
            extra = {"run": self.identity, "loop": asdict(self.state)}
            save_checkpoint(self.out, step, model, optimizer, scheduler, data.state_dict(), extra,
                            tokenizer=tokenizer, keep_last=self.config.keep_last)
        barrier()

    def finish(self, artifact_class: type[A], *, metrics: dict[str, Any], **fields: Any) -> A:
        """Write the model folder and the artifact (rank 0), meet the other ranks, leave the process group."""
        loop_seconds = time.perf_counter() - self._loop_started
        steps_run = self.steps - self._resumed_from
        if self._progress is not None:
            self._progress.close()
        artifact = None
        if self.is_main:
            model, _, _, _, tokenizer = self._parts
            save_model_folder(model, tokenizer, self.out / "model")
            state = self.state
            artifact = artifact_class(
                path=self.out,
                config=asdict(self.config),
                scale=self.config.scale,
                seed=self.config.seed,
                inputs=self.inputs,
                model_dir=self.out / "model",
                metrics_path=self.out / "metrics.jsonl",
                watch_path=self.out / WATCH_FILE,
                training_loss=state.smoothed_loss,
                validation_loss=state.validation.get("val_loss"),
                steps=self.steps,
                metrics={
                    "training_loss": state.smoothed_loss,
                    "validation_loss": state.validation.get("val_loss"),
                    **{name: value for name, value in state.validation.items() if name != "val_loss"},
                    **metrics,
                    "patience": self.patience,  # the --patience the run used (a step may pick it per scale)
                    "stopped_early": state.stopped_early,
                    "train_tokens": state.tokens,
                    "tokens_per_second": self._loop_tokens / loop_seconds if self._loop_tokens else None,
                    "seconds_per_step": loop_seconds / steps_run if steps_run > 0 else None,
                    "resumed_from_step": self._resumed_from,
                    "world_size": self.info.world_size,
                    "device": device_name(self.info.device),
                    "num_threads": torch.get_num_threads(),
                    "compiled": self._compiled,
                    "wall_seconds": time.perf_counter() - self.started,
                },
                **fields,
            ).save()
        cleanup()  # every rank waits here for rank 0's files, then leaves the process group
        return artifact or artifact_class.from_path(self.out)


def run_settings(config: Any) -> dict:
    """The fields of a step's Config dataclass that a resumed run must share with the run it continues:
    all but locations and those declared `execution(...)` or `bookkeeping(...)` (`nemotron.artifact.fields`:
    what is logged or saved, or how fast, may change on resume)."""
    values = asdict(config)
    return {name: values[name] for name in part_of_the_run(config)}


def check_same_run(saved: dict, current: dict, where: Path | str) -> None:
    """Refuse to resume from `where` when its run identity (`{"config", "inputs"}`) differs from ours."""
    if saved == current:
        return
    changed = sorted(
        name
        for name in set(saved["config"]) | set(current["config"])
        if saved["config"].get(name) != current["config"].get(name)
    )
    what = f"settings {', '.join(changed)}" if changed else "inputs (dataset or base checkpoint digest)"
    raise NemotronError(
        f"{where} was written by a run with other {what}; re-run with the same ones to resume, "
        "or pass a new --output-dir to start over"
    )


def save_model_folder(model: nn.Module, tokenizer: Any, folder: Path | str) -> Path:
    """Save the final Hugging Face folder (weights, config, tokenizer) atomically; returns it."""
    with atomic.output_folder(Path(folder)) as staging:
        getattr(model, "module", model).save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return Path(folder)
