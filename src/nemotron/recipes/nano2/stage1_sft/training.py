"""Stage 1, step 2: supervised fine-tuning (SFT) of the stage-0 model on packed chats.

SFT continues training the pretrained model on conversations, with the loss only where the model
should learn to speak: assistant tokens and their `<|im_end|>` (the mask made by data curation).

Inputs: an `SFTDataset` (`--dataset-path`, `--dataset-artifact`, or stdin) and the stage-0
`PretrainCheckpoint` (`--checkpoint-path`, `--checkpoint-artifact`, stdin, or else the one recorded in
the dataset's lineage). Output: an `SFTCheckpoint` (`model/` loads with AutoModelForCausalLM and
AutoTokenizer alone, `metrics.jsonl`, `checkpoints/step_*` for resume).

    python -m nemotron.recipes.nano2.stage1_sft.training --scale tiny --dataset-path runs/.../data_curation
    python -m nemotron.recipes.nano2.stage1_sft.data_curation | python -m nemotron.recipes.nano2.stage1_sft.training
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano2.stage1_sft.training --dataset-path ...

Supports:
- a per-token loss, as Megatron-Core's `calculate_per_token_loss`: cross-entropy SUMMED over trained
  positions, divided by the trained tokens of the whole optimizer step (all micro-batches, all ranks),
  not averaged per micro-batch. Every assistant token weighs the same, so accumulation and DDP give
  the one-big-batch gradient (tested); a per-micro-batch mean over-weights the tokens of micro-batches
  with few targets (the gradient-accumulation loss bug the HF Trainer fixed in v4.46, Oct 2024);
- AdamW, warmup + cosine decay, gradient clipping and accumulation (nemotron.training);
- validation loss on the valid rows every `--eval-every` steps and at the end;
- resume after a kill: re-run the same command; it continues from the last checkpoint and ends with
  the same weights and loss as an uninterrupted run (bitwise on CPU);
- DDP under torchrun (Gloo on CPU, NCCL on GPU); `--precision bf16` autocast.

Packing, what is kept apart and what is not (nemotron.training.packed_batches has the mechanics):
the loss never crosses a conversation boundary (mask 0 at each conversation's last position), and
attention is block-diagonal (position_ids restart per conversation; transformers builds the packed
causal mask from them). The Mamba-2 state is NOT reset between conversations: transformers' CPU
reference scan has no sub-sequence reset (only the CUDA kernels take `seq_idx`), so the state and the
4-tap convolution carry over. We accept it, measured (benchmarks/bench_sft_packing.py, tiny, SFT
from a pretrained tiny base): the trained model scores its validation chats packed vs alone within
4e-5 (relative); training packed instead of one chat per row changes the validation loss by 0.002,
ten times less than changing the seed of the row order (0.02); the exact layout (`--layout
per_conversation`, each chat alone in a padded batch row) makes a step 3x slower. The carried state
decays geometrically, and every chat opens with template and user tokens before its first target.

Refuses, before training: a tokenizer (checkpoint's or dataset's) without `<|im_start|>`/`<|im_end|>`
as special tokens or without the nano2 chat template; a checkpoint whose tokenizer differs from the
dataset's (ids would mean other tokens); token ids beyond the model's embedding or rows beyond its
context; inputs of another scale; resuming a folder that holds a run with other settings or inputs.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoModelForCausalLM

from nemotron.artifact import METADATA, Artifact, ArtifactPath
from nemotron.cli import run
from nemotron.data_prep.conversations import check_chat_tokenizer
from nemotron.data_prep.packing import read_packed
from nemotron.data_prep.tokenizer import check_same_vocabulary, load_tokenizer
from nemotron.evaluation.inputs import load_upstream
from nemotron.recipes.nano2.stage0_pretrain.training import PretrainCheckpoint
from nemotron.recipes.nano2.stage1_sft.data_curation import SFTDataset
from nemotron.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
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
from nemotron.training.packed_batches import (
    PackedBatches,
    check_rows_fit,
    collate_packed,
    collate_per_conversation,
    masked_token_loss,
    validation_loss,
)
from nemotron.training.run_folder import check_same_run, run_settings, save_model_folder

# Optimizer steps per scale. Tiny: ~4 epochs over the ~130 packed chatterbot rows in ~30 s on 2 cores.
STEPS = {"tiny": 60, "small": 1000, "medium": 3000, "full": 10000}
COLLATE = {"packed": collate_packed, "per_conversation": collate_per_conversation}


@dataclass
class Config:
    """Supervised fine-tuning of the stage-0 model on packed chats (loss on assistant tokens only)."""

    dataset_path: Path | None = None
    """An SFTDataset folder; default: read it from stdin."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `sftdataset:latest`."""
    checkpoint_path: Path | None = None
    """The stage-0 PretrainCheckpoint folder; default: stdin, else the one the dataset was made from."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference such as `pretraincheckpoint:latest`."""
    steps: int | None = None
    """Optimizer steps; default per scale (tiny 60)."""
    micro_batch_size: int = 4
    """Packed rows per forward pass (per process)."""
    grad_accum_steps: int = 2
    """Micro-batches per optimizer step; global batch = micro_batch_size x grad_accum_steps x processes."""
    lr: float = 3e-3
    """Peak learning rate. Tiny: the chat markers were never seen in pretraining and 60 steps is short;
    measured valid loss 4.38 at 1e-3, 4.11 at 2e-3, 4.03 at 3e-3 (a 400-step pretrained tiny base)."""
    min_lr_ratio: float = 0.1
    warmup_steps: int | None = None
    """Linear warmup; default 10% of the steps."""
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 disables)."""
    layout: Literal["packed", "per_conversation"] = "packed"
    """packed: rows as stored (Mamba state carries over); per_conversation: exact, one chat per batch row."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """bf16 autocast for forward passes (weights and optimizer stay fp32)."""
    eval_every: int = 20
    checkpoint_every: int = 20
    keep_last: int = 2
    num_threads: int | None = None
    """torch threads per process; default 1 at tiny (tiny matmuls do not gain from more), else torch's."""
    output_dir: Path = Path("runs/nano2/stage1_sft/training")
    scale: str = "tiny"
    seed: int = 0
    """Seeds the order of the packed rows."""


class SFTCheckpoint(Artifact):
    model_dir: ArtifactPath  # final Hugging Face folder: weights + config + tokenizer (with chat template)
    metrics_path: ArtifactPath  # metrics.jsonl: step, loss, lr, grad_norm, val_loss (no wall-clock values)
    training_loss: float  # final smoothed train loss (per assistant token)
    validation_loss: float | None
    steps: int = Field(gt=0)


def main(config: Config) -> SFTCheckpoint:
    # --- compute init ---
    info = setup_distributed()
    seed_everything(config.seed)
    torch.set_num_threads(torch_threads(config.scale, config.num_threads))
    if not info.is_main:
        sys.stdout = open(os.devnull, "w")  # one artifact JSON on stdout per job, from rank 0

    # --- inputs: the dataset and the model it starts from, checked against each other ---
    dataset = SFTDataset.load(path=config.dataset_path, reference=config.dataset_artifact, scale=config.scale)
    started = time.perf_counter()  # after the input: in a pipe, loading waits for the previous step
    piped = config.dataset_path is None and config.dataset_artifact is None
    base = load_upstream(
        PretrainCheckpoint, path=config.checkpoint_path, reference=config.checkpoint_artifact,
        scale=config.scale, made_from=[dataset], stdin=piped,
    )
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    base_tokenizer = load_tokenizer(base.model_dir)
    check_chat_tokenizer(base_tokenizer, base.model_dir)
    check_chat_tokenizer(tokenizer, dataset.tokenizer_dir)
    check_same_vocabulary(base_tokenizer, tokenizer, f"checkpoint {base.model_dir}", f"dataset {dataset.path}")

    # --- model ---
    model = AutoModelForCausalLM.from_pretrained(base.model_dir, dtype=torch.float32, local_files_only=True)
    train_rows, valid_rows = read_packed(dataset.train_packed), read_packed(dataset.valid_packed)
    check_rows_fit(train_rows + valid_rows, model.config, where=str(dataset.path))
    model.to(info.device).train()
    ddp = DistributedDataParallel(model) if info.is_distributed else None
    forward = ddp or model
    autocast = torch.autocast(info.device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16")

    # --- optimizer + schedule ---
    steps = config.steps or STEPS[config.scale]
    warmup = steps // 10 if config.warmup_steps is None else config.warmup_steps
    optimizer = build_optimizer(model, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = warmup_cosine(optimizer, warmup, steps, config.min_lr_ratio)

    # --- data ---
    batches = PackedBatches(
        train_rows, config.micro_batch_size, config.grad_accum_steps, config.seed, info.rank, info.world_size
    )
    collate, pad_id = COLLATE[config.layout], tokenizer.pad_token_id

    # --- resume: the newest checkpoint of this output folder, if any ---
    out = config.output_dir
    run_identity = {"config": run_settings(config), "inputs": [dataset.digest, base.digest]}
    start_step, ema, val_loss, tokens_seen = 0, 0.0, None, 0
    if (latest := latest_checkpoint(out)) is not None:
        state = load_checkpoint(latest, model, optimizer, scheduler)
        check_same_run(state["extra"]["run"], run_identity, latest)
        batches.load_state_dict(state["data_state"])
        start_step, ema = state["step"], state["extra"]["ema"]
        val_loss, tokens_seen = state["extra"]["val_loss"], state["extra"]["tokens"]
    log = None
    if info.is_main:
        (out / METADATA).unlink(missing_ok=True)  # until this run completes, the folder holds no artifact
        log = MetricsLog(out / "metrics.jsonl", resume_step=start_step if latest else None)

    # --- training loop ---
    progress = TrainingProgress(steps, start_step, "sft") if info.is_main else None
    loop_started, loop_tokens = time.perf_counter(), 0
    for step in range(start_step + 1, steps + 1):
        micro_batches = [collate(rows, pad_id).to(info.device) for rows in batches.next_step()]
        # Per-token normalisation over the whole step: divide every micro-batch's loss SUM by the mean
        # number of trained tokens per rank; DDP then averages gradients over ranks, which gives
        # sum(all losses) / sum(all trained tokens), exactly the one-big-batch gradient.
        targets_per_rank = max(per_rank_mean(sum(b.num_loss_tokens for b in micro_batches)), 1.0)
        step_loss = torch.zeros(())
        for index, batch in enumerate(micro_batches):
            last = index == len(micro_batches) - 1
            with (ddp.no_sync() if ddp and not last else contextlib.nullcontext()), autocast:
                logits = forward(**batch.model_inputs(), use_cache=False).logits
                loss = masked_token_loss(logits, batch) / targets_per_rank
            loss.backward()
            step_loss += loss.detach().cpu()
        clip = config.grad_clip if config.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        # Bookkeeping: the step's loss per trained token, a debiased moving average, throughput.
        loss_value = all_reduce_mean(step_loss).item()
        ema = 0.9 * ema + 0.1 * loss_value
        smoothed = ema / (1 - 0.9**step)
        step_tokens = round(per_rank_mean(sum(b.num_tokens for b in micro_batches)) * info.world_size)
        tokens_seen, loop_tokens = tokens_seen + step_tokens, loop_tokens + step_tokens
        record = {"loss": loss_value, "smoothed_loss": smoothed, "lr": lr, "grad_norm": grad_norm.item()}
        if step % config.eval_every == 0 or step == steps:
            val_loss = validation_loss(
                model, valid_rows, pad_id, collate, rank=info.rank, world_size=info.world_size, autocast=autocast
            )
            record["val_loss"] = val_loss
        if info.is_main:
            log.log(step, record)
            progress.update(1, step_tokens, smoothed)
        if step % config.checkpoint_every == 0 or step == steps:
            if info.is_main:
                extra = {"run": run_identity, "ema": ema, "val_loss": val_loss, "tokens": tokens_seen}
                save_checkpoint(out, step, model, optimizer, scheduler, batches.state_dict(), extra,
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
        artifact = SFTCheckpoint(
            path=out,
            config=asdict(config),
            scale=config.scale,
            seed=config.seed,
            inputs=[dataset, base],
            model_dir=out / "model",
            metrics_path=out / "metrics.jsonl",
            training_loss=final["smoothed_loss"],
            validation_loss=val_loss,
            steps=steps,
            metrics={
                "training_loss": final["smoothed_loss"],
                "validation_loss": val_loss,
                "train_tokens": tokens_seen,
                "tokens_per_second": loop_tokens / loop_seconds if loop_tokens else None,
                "seconds_per_step": loop_seconds / (steps - start_step) if steps > start_step else None,
                "resumed_from_step": start_step,
                "layout": config.layout,
                "world_size": info.world_size,
                "num_threads": torch.get_num_threads(),
                "wall_seconds": time.perf_counter() - started,
            },
        ).save()
    barrier()
    cleanup()
    return artifact or SFTCheckpoint.from_path(out)


def per_rank_mean(count: float) -> float:
    """The mean of a per-process count over all processes (the count itself with one process)."""
    return all_reduce_mean(torch.tensor(float(count), dtype=torch.float64)).item()


if __name__ == "__main__":
    run(main)
