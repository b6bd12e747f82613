"""Samplers: which items each optimizer step trains on, seeded and resumable.

`EpochSampler(items, micro_batch_size, accumulation, seed, rank, world_size)` walks seeded epochs over
any list of items (packed SFT rows, DPO pair ids, RL prompts) and hands each rank its micro-batches
for the next optimizer step. Its `state_dict()` (epoch, index) is the whole data position a
checkpoint needs to resume bit for bit. `planned_steps(config, num_items, epochs)`: a post-training
run's length from its data (passes over it), unless `--steps` says otherwise.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Generic, TypeVar

import numpy as np

from nemotron.errors import NemotronError

T = TypeVar("T")


class EpochSampler(Generic[T]):
    """Seeded, resumable optimizer-step batches of items: packed SFT rows, DPO pair ids, RL prompts.

    One optimizer step consumes a global batch of `micro_batch_size * accumulation * world_size`
    items. Each epoch visits every item once in a permutation drawn from `(seed, epoch)`; a global batch
    that runs past an epoch's end continues into the next, so batches are always full. Every rank walks
    the same order and takes its own contiguous slice, cut into `accumulation` micro-batches. The
    position `(epoch, index)` is the whole data state saved in checkpoints.
    """

    def __init__(
        self,
        items: Sequence[T],
        micro_batch_size: int,
        accumulation: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if micro_batch_size < 1 or accumulation < 1:
            raise NemotronError(
                f"micro_batch_size={micro_batch_size} and accumulation={accumulation} must be at least 1"
            )
        self.items, self.seed = list(items), seed
        self.micro_batch_size, self.accumulation = micro_batch_size, accumulation
        self.rank, self.world_size = rank, world_size
        self.global_batch_size = micro_batch_size * accumulation * world_size
        if len(self.items) < self.global_batch_size:
            raise NemotronError(
                f"the data has {len(self.items)} items, fewer than one global batch of "
                f"{self.global_batch_size} (micro batch x accumulation x processes); add data or lower them"
            )
        self.epoch, self.index = 0, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed,
                "global_batch_size": self.global_batch_size, "num_items": len(self.items)}

    def load_state_dict(self, state: dict) -> None:
        for key, mine in (("seed", self.seed), ("global_batch_size", self.global_batch_size),
                          ("num_items", len(self.items))):
            if state.get(key) != mine:
                raise NemotronError(
                    f"cannot resume the data position: the checkpoint was made with {key}={state.get(key)}, "
                    f"this run has {key}={mine}; resume with the same dataset, seed and batch settings "
                    "(or use a new output folder)"
                )
        self.epoch, self.index = int(state["epoch"]), int(state["index"])

    def items_of_first_steps(self, steps: int) -> list[T]:
        """Every item the first `steps` optimizer steps hand out (all ranks together), in item order.

        What a one-time pass over the data must cover: DPO scores its frozen reference on these pairs
        only (at tiny, 60 steps of 8 visit 480 of ~1,600). Every item once the steps span an epoch.
        """
        count = steps * self.global_batch_size
        if count >= len(self.items):
            return list(self.items)
        first_epoch = np.random.default_rng([self.seed, 0]).permutation(len(self.items))  # as _take walks it
        return [self.items[int(i)] for i in np.sort(first_epoch[:count])]

    def next_step(self) -> list[list[T]]:
        """This rank's micro-batches (lists of items) for the next optimizer step."""
        ids = self._take(self.global_batch_size)
        per_rank = self.micro_batch_size * self.accumulation
        mine = ids[self.rank * per_rank : (self.rank + 1) * per_rank]
        return [
            [self.items[int(i)] for i in mine[start : start + self.micro_batch_size]]
            for start in range(0, per_rank, self.micro_batch_size)
        ]

    def _take(self, count: int) -> np.ndarray:
        taken = []
        while count:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.items))
            chunk = order[self.index : self.index + count]
            taken.append(chunk)
            count -= len(chunk)
            self.index += len(chunk)
            if self.index == len(self.items):
                self.epoch, self.index = self.epoch + 1, 0
        return np.concatenate(taken)


def planned_steps(config, num_items: int, epochs: float) -> int:
    """`config.steps` if given, else enough optimizer steps for `epochs` passes over `num_items` training
    items (rows, pairs) in global batches of micro_batch_size x grad_accum_steps x processes (WORLD_SIZE, as
    torchrun sets it: the steps are known before the process group starts)."""
    if config.steps is not None:
        return config.steps
    if not epochs > 0:
        raise NemotronError(f"--epochs {epochs} must be above 0 (passes over the training data)")
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    return max(1, math.ceil(epochs * num_items / (config.micro_batch_size * config.grad_accum_steps * processes)))
