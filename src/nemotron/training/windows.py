"""Pretraining batches: fixed-length windows cut from the token stream of bin/idx shards.

How pretraining sees its data (the GPT recipe, as in Megatron-LM's `GPTDataset`):
1. The documents of all shards, in order, form one token stream. Every document already ends with
   EOS (data prep appends it), so the model learns where a document stops and another begins.
2. The stream is cut into windows of `seq_len + 1` tokens that overlap by one token: window i covers
   tokens [i * seq_len, (i + 1) * seq_len + 1). Inputs are window[:-1], targets window[1:], so every
   token of the stream is predicted exactly once per epoch. The tail shorter than a window is unused.
   Windows cross document boundaries; attention (and Mamba's state) then sees the end of one
   document before the next, which is harmless because EOS marks the cut (GPT-3 does the same).
3. Each epoch visits all windows in a fresh permutation drawn from `(seed, epoch)`, batch after
   batch. A batch that runs past the end of an epoch continues in the next one, so every batch is
   full and no window is skipped.

The position in this sequence, `(epoch, index)`, is the whole data state: `state_dict()` goes into
the checkpoint, `load_state_dict()` puts it back, and the resumed run reads exactly the batches an
uninterrupted run would have read. With several processes (DDP), every rank walks the same global
order and takes its own slice of each global batch, so the state is identical on all ranks.

Shards are memory-mapped (`IndexedReader`), so the stream is never loaded into memory as a whole.
`windows_loss(model, windows, ids, ...)` is the validation loss over a fixed set of windows.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from nemotron.data_prep.indexed import IndexedReader
from nemotron.errors import NemotronError
from nemotron.models.device import to_device
from nemotron.training.distributed import all_reduce_mean, gradient_sync, sum_over_ranks, world_size


class TokenWindows:
    """Seeded, resumable batches of `(batch_size, seq_len + 1)` token windows from bin/idx shards."""

    def __init__(
        self,
        shard_prefixes: Sequence[Path | str],
        seq_len: int,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not shard_prefixes:
            raise NemotronError("no pretraining shards given; pass the bin/idx prefixes of the tokenized dataset")
        if seq_len < 1 or batch_size < 1:
            raise NemotronError(f"seq_len and batch_size must be positive, got {seq_len} and {batch_size}")
        if not 0 <= rank < world_size:
            raise NemotronError(f"rank {rank} is not in [0, world_size={world_size})")
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.shard_prefixes = [str(prefix) for prefix in shard_prefixes]
        self._readers = [IndexedReader(prefix) for prefix in shard_prefixes]

        # Global document table: where each document starts in the stream, and which shard holds it.
        lengths = np.concatenate([np.asarray(reader.sequence_lengths, dtype=np.int64) for reader in self._readers])
        self._doc_starts = np.concatenate([[0], np.cumsum(lengths)])
        self._shard_first_doc = np.cumsum([0] + [len(reader) for reader in self._readers])
        self.num_tokens = int(self._doc_starts[-1])

        self.num_windows = (self.num_tokens - 1) // seq_len if self.num_tokens else 0
        self.global_batch_size = batch_size * world_size
        if self.num_windows < self.global_batch_size:
            raise NemotronError(
                f"the shards hold {self.num_tokens} tokens, only {self.num_windows} windows of "
                f"seq_len+1={seq_len + 1}, fewer than one global batch of {self.global_batch_size} "
                f"({', '.join(self.shard_prefixes)}); add data, or lower seq_len or batch_size"
            )
        self.epoch, self.index = 0, 0
        self._permutation_epoch, self._permutation = -1, np.empty(0, dtype=np.int64)

    # ----------------------------------------------------------------------------------------------
    # the data state saved in checkpoints
    # ----------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The position of the next batch, plus what it means (to refuse resuming on other data)."""
        return {
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "global_batch_size": self.global_batch_size,
            "num_windows": self.num_windows,
        }

    def load_state_dict(self, state: dict) -> None:
        for key in ("seed", "seq_len", "global_batch_size", "num_windows"):
            if state.get(key) != getattr(self, key):
                raise NemotronError(
                    f"cannot resume the data position: the checkpoint was made with {key}="
                    f"{state.get(key)}, this run has {key}={getattr(self, key)}; resume with the same "
                    "dataset, seed, seq_len and batch size (or start a new run folder)"
                )
        self.epoch, self.index = int(state["epoch"]), int(state["index"])

    # ----------------------------------------------------------------------------------------------
    # batches
    # ----------------------------------------------------------------------------------------------

    def next_batch(self) -> torch.Tensor:
        """This rank's `(batch_size, seq_len + 1)` int64 windows of the next global batch."""
        window_ids = self._take_global_batch()
        mine = window_ids[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        return torch.from_numpy(np.stack([self.window(int(i)) for i in mine]))

    def __iter__(self) -> Iterator[torch.Tensor]:
        while True:
            yield self.next_batch()

    def window(self, i: int) -> np.ndarray:
        """Window i of the stream as int64: tokens [i * seq_len, (i + 1) * seq_len + 1)."""
        if not 0 <= i < self.num_windows:
            raise IndexError(f"window {i} out of range ({self.num_windows} windows)")
        return self._stream_slice(i * self.seq_len, (i + 1) * self.seq_len + 1)

    @property
    def tokens_per_batch(self) -> int:
        """Tokens predicted per global batch (the number to count throughput and budgets in)."""
        return self.global_batch_size * self.seq_len

    def _take_global_batch(self) -> np.ndarray:
        """The next `global_batch_size` window ids, crossing into the next epoch when needed."""
        taken: list[np.ndarray] = []
        needed = self.global_batch_size
        while needed:
            order = self._epoch_permutation(self.epoch)
            chunk = order[self.index : self.index + needed]
            taken.append(chunk)
            needed -= len(chunk)
            self.index += len(chunk)
            if self.index == self.num_windows:
                self.epoch, self.index = self.epoch + 1, 0
        return np.concatenate(taken)

    def _epoch_permutation(self, epoch: int) -> np.ndarray:
        # One generator per (seed, epoch): an epoch's order never depends on how the run got there.
        if epoch != self._permutation_epoch:
            self._permutation = np.random.default_rng([self.seed, epoch]).permutation(self.num_windows)
            self._permutation_epoch = epoch
        return self._permutation

    def _stream_slice(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the concatenated stream, gathered from the documents they span."""
        pieces = []
        position = start
        while position < stop:
            # The last document starting at or before `position` contains it (empty ones are skipped).
            doc = int(np.searchsorted(self._doc_starts, position, side="right")) - 1
            doc_start, doc_end = int(self._doc_starts[doc]), int(self._doc_starts[doc + 1])
            end = min(stop, doc_end)
            shard = int(np.searchsorted(self._shard_first_doc, doc, side="right")) - 1
            tokens = self._readers[shard][doc - int(self._shard_first_doc[shard])]
            pieces.append(tokens[position - doc_start : end - doc_start])
            position = end
        return np.concatenate(pieces).astype(np.int64)


@torch.no_grad()
def windows_loss(model, windows: TokenWindows, ids: range, batch_size: int, autocast=None) -> float:
    """Mean next-token loss over windows `ids` of every rank together (each rank passes its own ids).

    The mean over ranks of (sum, count) is (sum of sums, sum of counts) / world_size: the ratio is
    exact, so 1 and 2 processes report the same validation loss. Training mode is restored afterwards.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(ids), batch_size):
        batch = torch.from_numpy(np.stack([windows.window(i) for i in ids[start : start + batch_size]]))
        with autocast or contextlib.nullcontext():
            logits = model(input_ids=batch[:, :-1].to(device), use_cache=False).logits
        targets = batch[:, 1:].flatten().to(device)
        total += F.cross_entropy(logits.float().flatten(0, 1), targets, reduction="sum").item()
        count += targets.numel()
    model.train(was_training)
    total, count = all_reduce_mean(torch.tensor([total, count], dtype=torch.float64)).tolist()
    return total / count


def pretraining_backward(
    forward, ddp, autocast, windows: torch.Tensor, micro_batch_size: int, device: torch.device, balance=None,
) -> torch.Tensor:
    """Forward and backward over this rank's `windows` of one optimizer step, `micro_batch_size` at a time;
    `forward(input ids, target ids)` is the mean next-token loss (a `losses.CausalLMLoss`, or its DDP
    wrapper); returns this rank's share of the step's next-token loss (detached: `all_reduce_mean` of it over the
    ranks is the mean per target of the global batch).

    Each micro-batch's mean cross-entropy is weighted by its targets x world size / the step's targets
    on all ranks (`distributed.sum_over_ranks` says why): after DDP's average of gradients, every target of
    the global batch weighs the same. Windows all hold `seq_len` targets, so the weight is exactly
    1/grad_accum_steps; the counts keep it true for any batch. `balance` (an `ExpertBalance`, for a
    mixture of experts) adds coeff x the load-balancing loss of each forward pass (Switch Transformer;
    Megatron's seq_aux_loss), averaged over the micro-batches; its gradient reaches only the routers.
    nano3's pretraining step calls this; nano2's writes the same arithmetic out in its own loop.
    """
    micro_batches = windows.split(micro_batch_size)
    targets_per_rank = sum_over_ranks(windows[:, 1:].numel()) / world_size()
    step_loss = torch.zeros(())
    for index, micro in enumerate(micro_batches):
        recording = balance.recording() if balance is not None else contextlib.nullcontext([])
        with gradient_sync(ddp, last=index == len(micro_batches) - 1), autocast, recording as routings:
            micro = to_device(micro, device)
            loss = forward(micro[:, :-1], micro[:, 1:]) * (micro[:, 1:].numel() / targets_per_rank)
            aux = balance.loss(routings, len(micro)) / len(micro_batches) if balance is not None else 0.0
            total = loss + aux
        total.backward()
        step_loss += loss.detach().cpu()
    return step_loss


def pretraining_windows(
    dataset, seq_len: int, micro_batch_size: int, grad_accum_steps: int, eval_batches: int, seed: int,
    rank: int, world_size: int,
) -> tuple[TokenWindows, TokenWindows, range]:
    """What a pretraining step reads from a dataset with `train_prefixes` / `valid_prefixes`:
    (this rank's seeded training windows, the validation windows, the validation ids this rank scores).

    Validation is the first `eval_batches` global batches of valid windows, whatever the split into
    processes and micro-batches (so 1 and 2 processes report the same val_loss); each rank scores a
    slice. Opening the shards validates them (magic, sizes, pointers): a truncated shard fails here.
    """
    train = TokenWindows(dataset.train_prefixes, seq_len, micro_batch_size * grad_accum_steps, seed, rank, world_size)
    valid = TokenWindows(dataset.valid_prefixes, seq_len, 1, seed=0)
    num_valid = min(valid.num_windows, eval_batches * train.global_batch_size)
    per_rank = math.ceil(num_valid / world_size)
    return train, valid, range(rank * per_rank, min(num_valid, (rank + 1) * per_rank))


def heldout_windows(prefixes: list[Path], seq_len: int, max_tokens: int) -> list[np.ndarray]:
    """Up to `max_tokens` of held-out text from the shards `prefixes`, as windows of `seq_len + 1` tokens.

    The same windows pretraining reads (documents concatenated, each ending in EOS, consecutive windows
    sharing one token), taken in stream order: a fixed, seed-free set, so every run scores the same text.
    """
    stream = TokenWindows(prefixes, seq_len=seq_len, batch_size=1, seed=0)
    count = min(stream.num_windows, max(1, max_tokens // seq_len))
    return [stream.window(i) for i in range(count)]
