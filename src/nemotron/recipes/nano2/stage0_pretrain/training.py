"""Stage 0, step 2: pretrain the nano2 hybrid Mamba-Transformer from scratch on the curated shards.

Next-token prediction on fixed-length windows of the token stream (the GPT recipe): the model
predicts every token of the training split from the tokens before it, and the loss is the mean
cross-entropy over all predicted tokens.

Input: a `PretrainDataset` (`--dataset-path`, `--dataset-artifact`, or stdin). Output: a
`PretrainCheckpoint` (`model/` loads with AutoModelForCausalLM and AutoTokenizer alone,
`metrics.jsonl`, `checkpoints/step_*` for resume).

    python -m nemotron.recipes.nano2.stage0_pretrain.training --scale tiny --dataset-path runs/.../data_curation
    python -m nemotron.recipes.nano2.stage0_pretrain.data_curation | python -m nemotron.recipes.nano2.stage0_pretrain.training
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano2.stage0_pretrain.training --dataset-path ...

Supports:
- the model of `nemotron.models.nano2` at the run's scale, every shape overridable
  (`--model-overrides hidden_size=192 hybrid_override_pattern=M-M*-`);
- windows of `seq_len + 1` tokens read from the bin/idx shards in a seeded order (nemotron.training.windows);
- AdamW (betas 0.9/0.95, decay on matrices only), linear warmup + cosine decay, gradient clipping,
  gradient accumulation; `--precision bf16` autocast for the forward pass;
- validation loss on the valid shards every `--eval-every` steps and at the end;
- resume after a kill: re-run the same command with the same output folder; it continues from the last
  checkpoint (weights, optimizer, scheduler, RNG, data position) and ends with the same weights and
  loss as an uninterrupted run (bitwise on CPU);
- DDP under torchrun (Gloo on CPU, NCCL on GPU): each rank takes its slice of every global batch.

Refuses, before training: shards that are missing or truncated; a sequence length beyond the model's
`max_position_embeddings`; token ids beyond the model's vocabulary; resuming a folder that holds a
checkpoint of another architecture or of a run with other settings or inputs; inputs of another scale.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch.nn.parallel import DistributedDataParallel

from nemotron.artifact import METADATA, Artifact, ArtifactPath
from nemotron.cli import run
from nemotron.data_prep.indexed import IndexedReader
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.errors import NemotronError
from nemotron.models.nano2 import build_config, build_model, count_parameters, describe_pattern
from nemotron.recipes.nano2.stage0_pretrain.data_curation import PretrainDataset
from nemotron.training.checkpoint import check_same_architecture, latest_checkpoint, load_checkpoint, save_checkpoint
from nemotron.training.distributed import (
    all_reduce_mean,
    barrier,
    cleanup,
    seed_everything,
    setup_distributed,
    torch_threads,
)
from nemotron.training.metrics import MetricsLog, TrainingProgress
from nemotron.training.optim import build_optimizer, warmup_cosine
from nemotron.training.run_folder import check_same_run, run_settings, save_model_folder
from nemotron.training.windows import TokenWindows

# Optimizer steps and window length per scale. Tiny: ~1.5 CPU minutes, ~0.4 epochs of Shakespeare.
STEPS = {"tiny": 300, "small": 2000, "medium": 20000, "full": 100000}
SEQ_LEN = {"tiny": 256, "small": 512, "medium": 1024, "full": 8192}


@dataclass
class Config:
    """Pretrain the nano2 model from scratch on bin/idx shards."""

    dataset_path: Path | None = None
    """A PretrainDataset folder; default: read it from stdin."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `pretraindataset:latest`."""
    steps: int | None = None
    """Optimizer steps; default per scale (tiny 300)."""
    seq_len: int | None = None
    """Tokens per training window; default per scale (tiny 256)."""
    micro_batch_size: int = 8
    """Windows per forward pass (per process)."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; global batch = micro_batch_size x grad_accum_steps x processes."""
    lr: float = 3e-3
    """Peak learning rate; small models tolerate (and need) a high one."""
    min_lr_ratio: float = 0.1
    warmup_steps: int | None = None
    """Linear warmup; default 10% of the steps."""
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 disables)."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """bf16 autocast for forward passes (weights and optimizer stay fp32)."""
    model_overrides: tuple[str, ...] = ()
    """NemotronHConfig fields as KEY=VALUE (JSON values), e.g. hidden_size=192."""
    eval_every: int = 40
    eval_batches: int = 8
    """Global batches of validation windows per evaluation (the whole valid split if it is smaller)."""
    checkpoint_every: int = 40
    keep_last: int = 2
    num_threads: int | None = None
    """torch threads per process; default 1 at tiny (tiny matmuls do not gain from more), else torch's."""
    output_dir: Path = Path("runs/nano2/stage0_pretrain/training")
    scale: str = "tiny"
    seed: int = 0
    """Seeds the weights and the order of the windows."""


class PretrainCheckpoint(Artifact):
    model_dir: ArtifactPath  # final Hugging Face folder: weights + config + tokenizer (with chat template)
    metrics_path: ArtifactPath  # metrics.jsonl: step, loss, lr, grad_norm, val_loss (no wall-clock values)
    training_loss: float  # final smoothed train loss (nats per token)
    validation_loss: float | None
    steps: int = Field(gt=0)


def main(config: Config) -> PretrainCheckpoint:
    # --- compute init ---
    info = setup_distributed()
    seed_everything(config.seed)
    torch.set_num_threads(torch_threads(config.scale, config.num_threads))
    if not info.is_main:
        sys.stdout = open(os.devnull, "w")  # one artifact JSON on stdout per job, from rank 0

    # --- inputs ---
    dataset = PretrainDataset.load(path=config.dataset_path, reference=config.dataset_artifact, scale=config.scale)
    started = time.perf_counter()  # after the input: in a pipe, loading waits for the previous step
    tokenizer = load_tokenizer(dataset.tokenizer_dir)

    # --- model ---
    model_config = build_config(config.scale, dataset.vocab_size, **parse_overrides(config.model_overrides))
    seq_len = config.seq_len or SEQ_LEN[config.scale]
    if seq_len > model_config.max_position_embeddings:
        raise NemotronError(
            f"seq_len={seq_len} is longer than the model supports (max_position_embeddings="
            f"{model_config.max_position_embeddings}); lower --seq-len or raise it in --model-overrides"
        )
    model = build_model(model_config, seed=config.seed).to(info.device).train()
    ddp = DistributedDataParallel(model) if info.is_distributed else None
    forward = ddp or model
    autocast = torch.autocast(info.device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16")
    if info.is_main:
        pattern = model_config.hybrid_override_pattern
        print(f"nano2 {config.scale}: {count_parameters(model) / 1e6:.2f}M parameters, "
              f"{describe_pattern(pattern)}", file=sys.stderr)

    # --- optimizer + schedule ---
    steps = config.steps or STEPS[config.scale]
    warmup = steps // 10 if config.warmup_steps is None else config.warmup_steps
    optimizer = build_optimizer(model, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = warmup_cosine(optimizer, warmup, steps, config.min_lr_ratio)

    # --- data: seeded windows over the train shards; a fixed slice of the valid shards ---
    # Opening the shards validates them (magic, sizes, pointers): a truncated shard fails here.
    batch_size = config.micro_batch_size * config.grad_accum_steps
    train = TokenWindows(dataset.train_prefixes, seq_len, batch_size, config.seed, info.rank, info.world_size)
    # Validation: the first `eval_batches` global batches of valid windows, whatever the split into
    # processes and micro-batches (so 1 and 2 processes report the same val_loss); each rank scores a slice.
    valid = TokenWindows(dataset.valid_prefixes, seq_len, 1, seed=0)
    num_valid = min(valid.num_windows, config.eval_batches * train.global_batch_size)
    per_rank = math.ceil(num_valid / info.world_size)
    valid_ids = range(info.rank * per_rank, min(num_valid, (info.rank + 1) * per_rank))
    check_vocabulary(dataset.train_prefixes + dataset.valid_prefixes, model_config.vocab_size, dataset.path)

    # --- resume: the newest checkpoint of this output folder, if any ---
    out = config.output_dir
    run_identity = {"config": run_settings(config), "inputs": [dataset.digest]}
    start_step, ema, val_loss, tokens_seen = 0, 0.0, None, 0
    if (latest := latest_checkpoint(out)) is not None:
        check_same_architecture(latest, model_config)
        state = load_checkpoint(latest, model, optimizer, scheduler)
        check_same_run(state["extra"]["run"], run_identity, latest)
        train.load_state_dict(state["data_state"])
        start_step, ema = state["step"], state["extra"]["ema"]
        val_loss, tokens_seen = state["extra"]["val_loss"], state["extra"]["tokens"]
    log = None
    if info.is_main:
        (out / METADATA).unlink(missing_ok=True)  # until this run completes, the folder holds no artifact
        log = MetricsLog(out / "metrics.jsonl", resume_step=start_step if latest else None)

    # --- training loop ---
    progress = TrainingProgress(steps, start_step, "pretrain") if info.is_main else None
    loop_started, loop_tokens = time.perf_counter(), 0
    for step in range(start_step + 1, steps + 1):
        windows = train.next_batch()  # this rank's (micro_batch_size x grad_accum_steps, seq_len + 1)
        step_loss = torch.zeros(())
        for index, micro in enumerate(windows.split(config.micro_batch_size)):
            last = index == config.grad_accum_steps - 1
            # Every micro-batch has the same number of targets, so the mean of micro-batch means is
            # the mean over the whole batch; DDP averages gradients over ranks the same way.
            with (ddp.no_sync() if ddp and not last else contextlib.nullcontext()), autocast:
                logits = forward(input_ids=micro[:, :-1].to(info.device), use_cache=False).logits
                loss = F.cross_entropy(logits.float().flatten(0, 1), micro[:, 1:].flatten().to(info.device))
                loss = loss / config.grad_accum_steps
            loss.backward()
            step_loss += loss.detach().cpu()
        clip = config.grad_clip if config.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        # Bookkeeping: the batch loss over all ranks, a debiased moving average, throughput.
        loss_value = all_reduce_mean(step_loss).item()
        ema = 0.9 * ema + 0.1 * loss_value
        smoothed = ema / (1 - 0.9**step)
        step_tokens = train.tokens_per_batch
        tokens_seen, loop_tokens = tokens_seen + step_tokens, loop_tokens + step_tokens
        record = {"loss": loss_value, "smoothed_loss": smoothed, "lr": lr, "grad_norm": grad_norm.item()}
        if step % config.eval_every == 0 or step == steps:
            val_loss = validation_loss(model, valid, valid_ids, config.micro_batch_size, info.device, autocast)
            record["val_loss"] = val_loss
        if info.is_main:
            log.log(step, record)
            progress.update(1, step_tokens, smoothed)
        if step % config.checkpoint_every == 0 or step == steps:
            if info.is_main:
                extra = {"run": run_identity, "ema": ema, "val_loss": val_loss, "tokens": tokens_seen}
                save_checkpoint(out, step, model, optimizer, scheduler, train.state_dict(), extra,
                                tokenizer=tokenizer, keep_last=config.keep_last)
            barrier()
    loop_seconds = time.perf_counter() - loop_started
    if progress:
        progress.close()

    # --- final save: the model folder and the artifact (rank 0) ---
    artifact = None
    if info.is_main:
        save_model_folder(model, tokenizer, out / "model")
        final = log.records()[-1]
        artifact = PretrainCheckpoint(
            path=out,
            config=asdict(config),
            scale=config.scale,
            seed=config.seed,
            inputs=[dataset],
            model_dir=out / "model",
            metrics_path=out / "metrics.jsonl",
            training_loss=final["smoothed_loss"],
            validation_loss=val_loss,
            steps=steps,
            metrics={
                "training_loss": final["smoothed_loss"],
                "validation_loss": val_loss,
                "parameters": count_parameters(model),
                "train_tokens": tokens_seen,
                "epochs": tokens_seen / max(train.num_tokens, 1),
                "tokens_per_second": loop_tokens / loop_seconds if loop_tokens else None,
                "seconds_per_step": loop_seconds / (steps - start_step) if steps > start_step else None,
                "resumed_from_step": start_step,
                "world_size": info.world_size,
                "num_threads": torch.get_num_threads(),
                "wall_seconds": time.perf_counter() - started,
            },
        ).save()
    barrier()
    cleanup()
    return artifact or PretrainCheckpoint.from_path(out)


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


def check_vocabulary(prefixes: list[Path], vocab_size: int, where: Path) -> None:
    """Token ids beyond the embedding table would crash mid-step (or read garbage on a GPU)."""
    largest = max(int(doc.max()) for prefix in prefixes for doc in IndexedReader(prefix) if len(doc))
    if largest >= vocab_size:
        raise NemotronError(
            f"{where}: the shards hold token id {largest} but the model's vocabulary has {vocab_size} "
            "entries; re-run data curation, or pass the matching vocab size"
        )


@torch.no_grad()
def validation_loss(model, valid: TokenWindows, ids: range, batch_size: int, device, autocast) -> float:
    """Mean next-token loss over the valid windows `ids` of all ranks together (the same every time)."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(ids), batch_size):
        batch = torch.from_numpy(np.stack([valid.window(i) for i in ids[start : start + batch_size]]))
        with autocast:
            logits = model(input_ids=batch[:, :-1].to(device), use_cache=False).logits
        total += F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten().to(device), reduction="sum").item()
        count += batch[:, 1:].numel()
    model.train()
    # The mean over ranks of (sum, count) is (sum of sums, sum of counts) / world_size: the ratio is exact.
    total, count = all_reduce_mean(torch.tensor([total, count], dtype=torch.float64)).tolist()
    return total / count


if __name__ == "__main__":
    run(main)
