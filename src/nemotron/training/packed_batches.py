"""SFT batches from packed Parquet: several conversations per row, kept apart, loss on assistant tokens.

A packed row (see `nemotron.data_prep.packing`) holds conversations back to back, `seq_start_id`
marking where each starts, and a loss mask that is already shifted to the labels: `loss_mask[i] == 1`
means "predicting token i+1 from position i is trained". This module turns rows into model inputs:

- `collate_packed(rows, pad_id)` -> `SFTBatch`: rows padded to the longest one, labels = the next
  token, the shifted mask as per-position loss weights, and `position_ids` that restart at 0 at every
  conversation start (padding is a segment of its own).
- `collate_per_conversation(rows, pad_id)`: the same conversations one per batch row (right-padded),
  the exact "no packing" layout every conversation sees at inference. Used to measure what packing
  changes (tests, benchmarks/bench_sft_packing.py).
- `masked_token_loss(logits, batch)`: the SUM of next-token cross-entropy over trained positions.
- `sft_backward(...)`: one optimizer step's forward and backward passes, the loss per trained token of
  the whole step on all ranks (nano3's SFT step; nano2's writes it out in its loop).
- rows are drawn in seeded, resumable epochs by `nemotron.training.samplers.EpochSampler`.
- `validation_loss(model, rows, pad_id)`: mean loss per trained token over held-out rows.

How packed conversations are kept from leaking into one another (transformers 5.23, NemotronH):
- Loss: never crosses a boundary. The last position of every conversation has mask 0 (its "next
  token" is the next conversation's first), `read_packed` checks it, and padding has mask 0.
- Attention layers: block-diagonal. With `attention_mask=None` and no cache, transformers'
  `create_causal_mask` reads segments off `position_ids` (a new segment wherever the position does
  not grow by one, `masking_utils.find_packed_sequence_indices`) and builds a causal mask that is
  also block-diagonal, for every attention backend: sdpa and eager here, flash-attention varlen with
  cu_seqlens on a GPU (the HF "packing with position_ids" path, as `DataCollatorWithFlattening`).
  Nemotron-H attention uses no position embedding (NoPE), so position_ids change nothing else.
- Mamba-2 layers: NOT isolated. The PyTorch scans (the CPU path: transformers' and models.mamba2) have no notion of
  sub-sequences: the recurrent state and the 4-tap causal convolution carry from one conversation into
  the next. The CUDA kernels (`mamba_ssm`) can reset the state with `seq_idx`, which transformers
  does not derive from position_ids. `collate_per_conversation` is the exact alternative; the SFT step
  says which one it trains with and why (measured).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from nemotron.data_prep.packing import PackedRow
from nemotron.training.distributed import all_reduce_mean, gradient_sync, sum_over_ranks, world_size


@dataclass
class SFTBatch:
    """Model inputs for one micro-batch. All tensors are (batch, length)."""

    input_ids: torch.Tensor  # int64, padded with pad_id
    position_ids: torch.Tensor  # int64, 0, 1, 2, ... restarting at each conversation (and at padding)
    labels: torch.Tensor  # int64, labels[b, i] = input_ids[b, i + 1] (pad_id where nothing follows)
    loss_mask: torch.Tensor  # float32 0/1: the prediction of labels[b, i] is trained
    num_tokens: int  # real (not padding) tokens: what throughput is counted in

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum().item())

    def to(self, device: torch.device | str) -> SFTBatch:
        move = {name: getattr(self, name).to(device) for name in ("input_ids", "position_ids", "labels", "loss_mask")}
        return SFTBatch(**move, num_tokens=self.num_tokens)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """Keyword arguments for `model(...)`; attention_mask stays None so the packed mask is built."""
        return {"input_ids": self.input_ids, "position_ids": self.position_ids}


def _segments(row: PackedRow) -> list[tuple[int, int]]:
    return list(itertools.pairwise(row.cu_seqlens().tolist()))


def collate_packed(rows: Sequence[PackedRow], pad_id: int) -> SFTBatch:
    """Rows as they are stored, several conversations each, padded to the longest row."""
    length = max(len(row.input_ids) for row in rows)
    input_ids = torch.full((len(rows), length), pad_id, dtype=torch.int64)
    labels = torch.full_like(input_ids, pad_id)
    position_ids = torch.zeros_like(input_ids)
    loss_mask = torch.zeros(len(rows), length, dtype=torch.float32)
    for b, row in enumerate(rows):
        n = len(row.input_ids)
        tokens = torch.from_numpy(row.input_ids.astype(np.int64))
        input_ids[b, :n] = tokens
        labels[b, : n - 1] = tokens[1:]
        loss_mask[b, :n] = torch.from_numpy(row.loss_mask.astype(np.float32))
        for start, end in _segments(row):
            position_ids[b, start:end] = torch.arange(end - start)
        position_ids[b, n:] = torch.arange(length - n)  # padding: its own segment, attended by nobody real
    return SFTBatch(input_ids, position_ids, labels, loss_mask, num_tokens=sum(len(row.input_ids) for row in rows))


def collate_per_conversation(rows: Sequence[PackedRow], pad_id: int) -> SFTBatch:
    """Every conversation of `rows` in its own batch row, right-padded: nothing can leak, at a cost."""
    pieces = [
        PackedRow(
            input_ids=row.input_ids[start:end],
            loss_mask=row.loss_mask[start:end],
            seq_start_id=np.zeros(1, dtype=np.int32),
        )
        for row in rows
        for start, end in _segments(row)
    ]
    return collate_packed(pieces, pad_id)


def masked_token_loss(logits: torch.Tensor, batch: SFTBatch) -> torch.Tensor:
    """Sum of next-token cross-entropy over the trained positions (a scalar, float32)."""
    per_token = F.cross_entropy(logits.flatten(0, 1).float(), batch.labels.flatten(), reduction="none")
    return (per_token * batch.loss_mask.flatten()).sum()


def sft_backward(forward, ddp, autocast, micro_batches: Sequence[SFTBatch], balance=None) -> torch.Tensor:
    """Forward and backward over this rank's micro-batches of one optimizer step; returns this rank's share
    of the step's loss (detached; `all_reduce_mean` of it is the loss per trained token of the step).

    A per-token loss, as Megatron-Core's `calculate_per_token_loss`: every micro-batch's loss SUM is
    divided by the trained tokens of the whole step on all ranks, times the world size to undo DDP's
    average (`distributed.sum_over_ranks` shows the maths), not averaged per micro-batch. Every trained token
    weighs the same, so accumulation and DDP give the one-big-batch gradient (tested); a per-micro-batch
    mean over-weights the tokens of micro-batches with few targets (the gradient-accumulation loss bug the
    HF Trainer fixed in v4.46, Oct 2024). `balance` (an `ExpertBalance`) adds the MoE load-balancing loss
    of each forward pass, averaged over the micro-batches. nano3's SFT step calls this; nano2's writes the
    same arithmetic out in its own loop.
    """
    trained = sum_over_ranks(sum(batch.num_loss_tokens for batch in micro_batches))
    trained_per_rank = max(trained, 1.0) / world_size()
    step_loss = torch.zeros(())
    for index, batch in enumerate(micro_batches):
        recording = balance.recording() if balance is not None else contextlib.nullcontext([])
        with gradient_sync(ddp, last=index == len(micro_batches) - 1), autocast, recording as routings:
            logits = forward(**batch.model_inputs(), use_cache=False).logits
            loss = masked_token_loss(logits, batch) / trained_per_rank
            aux = balance.loss(routings, len(batch.input_ids)) / len(micro_batches) if balance is not None else 0.0
            total = loss + aux
        total.backward()
        step_loss += loss.detach().cpu()
    return step_loss


@torch.no_grad()
def validation_loss(
    model: torch.nn.Module,
    rows: Sequence[PackedRow],
    pad_id: int,
    collate=collate_packed,
    batch_size: int = 8,
    rank: int = 0,
    world_size: int = 1,
    autocast: contextlib.AbstractContextManager | None = None,
) -> float:
    """Mean cross-entropy per trained token over all `rows` (each rank scores its share; all ranks
    get the same number). The model is put back in training mode afterwards."""

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    mine = rows[rank::world_size]
    total, count = torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)
    for start in range(0, len(mine), batch_size):
        batch = collate(mine[start : start + batch_size], pad_id).to(device)
        with autocast or contextlib.nullcontext():
            logits = model(**batch.model_inputs(), use_cache=False).logits
        total += masked_token_loss(logits, batch).double().cpu()
        count += batch.num_loss_tokens
    model.train(was_training)
    return (all_reduce_mean(total) / all_reduce_mean(count).clamp(min=1.0)).item()
