"""The running rows' caches as one batch, so one forward pass decodes every running request.

Requests are prefilled together, left-padded to the longest prompt (masked, so each row's cache and logits
are those of a plain forward pass over its own prompt, to float rounding), and their caches then join the
running batch's on the batch dimension:

- a Mamba-2 layer (transformers' `LinearAttentionLayer`) holds a fixed-size state per row, the last
  `conv_kernel` inputs of its causal convolution and its SSM state (heads x head_dim x state): they stack
  as they are;
- an attention layer (`DynamicLayer`) holds each row's keys and values, as long as that row's tokens so far,
  which differ from row to row: they are left-padded to the longest, so every row's newest key sits in the
  last column (the layout of a left-padded prefill), and the step's attention mask gives 0 to the padding,
  so a row attends to its own tokens only, at its own positions (`StackedCache.step_inputs`);
- an MLP or MoE layer holds nothing (`DummyLayer`).

A row that finishes leaves at once (its cache rows are dropped); padding columns no remaining row needs are
cut then. Memory: a row costs its attention keys and values (2 x layers x kv heads x head_dim x width
floats, `width` the longest row's tokens) plus its Mamba states, whatever its own length (`row_cost`).

The attention keys and values live in buffers with room for every column the running rows may still add
(`RoomyLayer`): a decode step writes its one new column in place. transformers' `DynamicLayer` concatenates
instead, copying every row's keys and values, per layer and per step, a copy that grows with the columns: a
SmolLM2 step (CPU time, the two caches stepped in turn in one process, docs/performance.md) at 8 rows took
128.7 -> 127.3 ms over columns 40-140 and 151.0 -> 138.5 ms over 140-240; at 16 rows 157.7 -> 145.6 and
182.2 -> 160.3. The buffers are sized, and copied, only when rows join or leave.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from transformers.cache_utils import DummyLayer, DynamicLayer, LinearAttentionCacheLayerMixin, LinearAttentionLayer

from nemotron.errors import NemotronError


class StackedCache:
    """The transformers cache of the running batch, and how many real tokens each of its rows holds."""

    def __init__(self) -> None:
        self.cache: Any = None  # a DynamicCache whose tensors hold every running row, in row order
        self.lengths: list[int] = []  # per row: tokens in its cache (its prompt and what it generated so far)

    @property
    def width(self) -> int:
        """Columns of the attention caches: the longest row's tokens."""
        return max(self.lengths, default=0)

    def add(self, cache: Any, lengths: list[int], room: int) -> None:
        """Append the rows of `cache`, from a left-padded prefill: `lengths` tokens each (the rest padding). `room`:
        the most tokens any running row may still add (its attention buffers get that many spare columns)."""
        _check_layers(cache)
        if self.cache is None:
            self.cache, self.lengths = cache, []
        width = max(self.width, *lengths)
        for i, (mine, theirs) in enumerate(zip(self.cache.layers, cache.layers, strict=True)):
            if isinstance(mine, LinearAttentionCacheLayerMixin) and mine is not theirs:  # fixed size per row: stack
                for j in range(mine.number_of_states):
                    if mine.is_conv_states_initialized[j]:
                        mine.conv_states[j] = torch.cat([mine.conv_states[j], theirs.conv_states[j]])
                    if mine.is_recurrent_states_initialized[j]:
                        mine.recurrent_states[j] = torch.cat([mine.recurrent_states[j], theirs.recurrent_states[j]])
            if isinstance(mine, DynamicLayer) and mine.is_initialized:  # one column per token: left-pad, stack
                parts = [theirs] if mine is theirs else [mine, theirs]
                self.cache.layers[i] = RoomyLayer([p.keys for p in parts], [p.values for p in parts], width, room)
        self.lengths += lengths

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (indices, in order): the others finished. Padding no kept row needs is cut."""
        if not rows:
            self.cache, self.lengths = None, []
            return
        if len(rows) == len(self.lengths):
            return
        cut = self.width - max(self.lengths[i] for i in rows)  # leading columns that were only the leavers'
        index = torch.tensor(rows)
        for layer in self.cache.layers:
            if isinstance(layer, LinearAttentionCacheLayerMixin):
                layer.reorder_cache(index)  # index_select on the batch dimension of every state
            if isinstance(layer, RoomyLayer):
                layer.keep(index.to(layer.keys.device), cut)
        self.lengths = [self.lengths[i] for i in rows]

    def step_inputs(self, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention mask (rows x width + 1: 1 on each row's own tokens and the new one) and the position
        of each row's new token (its own length), for one decode step of every row."""
        lengths = torch.tensor(self.lengths)
        columns = torch.arange(self.width + 1)
        mask = (columns[None, :] >= (self.width - lengths)[:, None]).long()
        return mask.to(device), lengths[:, None].to(device)

    def advance(self) -> None:
        """Every row holds one more token (the step's forward pass appended it)."""
        self.lengths = [n + 1 for n in self.lengths]


class RoomyLayer(DynamicLayer):
    """A full-attention layer of the running batch whose keys and values (batch, heads, tokens, dim) are the first
    columns of buffers with spare columns after them: a decode step writes its new column in place, where
    `DynamicLayer.update` would concatenate (a copy of the whole cache, per layer and step)."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], width: int, room: int):
        """Stack the row blocks `keys` / `values` on the batch dimension, each left-padded to `width` columns with
        zeros (masked out, and finite: a masked column's value still meets a zero weight), then `room` spare columns."""
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys[0].dtype, keys[0].device, True
        self.key_buffer, self.value_buffer = (_stacked(blocks, width, room) for blocks in (keys, values))
        self.keys, self.values = self.key_buffer[:, :, :width], self.value_buffer[:, :, :width]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        start = self.keys.shape[-2]
        end = start + key_states.shape[-2]
        if end > self.key_buffer.shape[-2]:  # out of room (the engine sizes it to what its rows may add): grow
            self.key_buffer, self.value_buffer = (_stacked([b[:, :, :start]], start, 2 * end - start)
                                                  for b in (self.key_buffer, self.value_buffer))
        self.key_buffer[:, :, start:end], self.value_buffer[:, :, start:end] = key_states, value_states
        self.keys, self.values = self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]
        return self.keys, self.values

    def keep(self, index: torch.Tensor, cut: int) -> None:
        """Keep the rows `index`, less the `cut` leading columns (padding of theirs only): a copy, room included."""
        width = self.keys.shape[-2] - cut
        self.key_buffer, self.value_buffer = (b[index, :, cut:] for b in (self.key_buffer, self.value_buffer))
        self.keys, self.values = self.key_buffer[:, :, :width], self.value_buffer[:, :, :width]


def _stacked(blocks: list[torch.Tensor], width: int, room: int) -> torch.Tensor:
    """(batch, heads, tokens, dim) blocks -> one (sum of batches, heads, width + room, dim) buffer: each block
    right-aligned at column `width` (zeros before it), the `room` columns after it left for later tokens."""
    first = blocks[0]
    buffer = first.new_zeros((sum(b.shape[0] for b in blocks), first.shape[1], width + room, first.shape[3]))
    row = 0
    for block in blocks:
        buffer[row:row + block.shape[0], :, width - block.shape[-2]:width] = block
        row += block.shape[0]
    return buffer


def _check_layers(cache: Any) -> None:
    for layer in cache.layers:
        if not (type(layer) in (DynamicLayer, LinearAttentionLayer) or isinstance(layer, DummyLayer)):
            raise NemotronError(f"the model's cache has a {type(layer).__name__} layer, which the serving engine "
                                "cannot stack into a batch (it stacks full attention, Mamba and MLP layers); "
                                "serve this model with vLLM or transformers' generate")


def row_cost(cache: Any) -> tuple[int, int]:
    """(bytes, bytes per token) of one row of `cache` (a batch of one): its fixed-size Mamba states, and what
    each token adds (a key and a value per attention layer). A row of a batch padded to `width` tokens costs
    bytes + width x bytes per token."""
    fixed = per_token = 0
    for layer in cache.layers:
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            for i in range(layer.number_of_states):
                for state in (layer.conv_states[i], layer.recurrent_states[i]):
                    if state is not None:
                        fixed += state.numel() * state.element_size()
        if isinstance(layer, DynamicLayer) and layer.is_initialized:
            per_token += 2 * layer.keys[..., :1, :].numel() * layer.keys.element_size()
    return fixed, per_token


def free_memory(device: torch.device) -> int | None:
    """Bytes the caches may take on `device`: half the free physical memory of a CPU (the rest is the
    process's and its neighbours'), 90% of a GPU's free memory after the weights; None when unknown."""
    if device.type == "cuda":
        return int(0.9 * torch.cuda.mem_get_info(device)[0])
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):  # not Linux: no check
        return None
