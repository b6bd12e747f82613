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
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import DummyLayer, DynamicLayer, LinearAttentionCacheLayerMixin

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

    def add(self, cache: Any, lengths: list[int]) -> None:
        """Append the rows of `cache`, from a left-padded prefill: `lengths` tokens each (the rest padding)."""
        _check_layers(cache)
        if self.cache is None:
            self.cache, self.lengths = cache, list(lengths)
            return
        width = max(self.width, *lengths)
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            if isinstance(mine, LinearAttentionCacheLayerMixin):  # fixed size per row: stack
                for i in range(mine.number_of_states):
                    if mine.is_conv_states_initialized[i]:
                        mine.conv_states[i] = torch.cat([mine.conv_states[i], theirs.conv_states[i]])
                    if mine.is_recurrent_states_initialized[i]:
                        mine.recurrent_states[i] = torch.cat([mine.recurrent_states[i], theirs.recurrent_states[i]])
            if isinstance(mine, DynamicLayer) and mine.is_initialized:  # one column per token: left-pad, stack
                mine.keys = torch.cat([_left_pad(mine.keys, width), _left_pad(theirs.keys, width)])
                mine.values = torch.cat([_left_pad(mine.values, width), _left_pad(theirs.values, width)])
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
            if isinstance(layer, DynamicLayer) and layer.is_initialized:
                index = index.to(layer.keys.device)
                layer.keys, layer.values = layer.keys[index, :, cut:], layer.values[index, :, cut:]
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


def _left_pad(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """(batch, heads, tokens, dim) -> (batch, heads, width, dim), zeros before the tokens (masked out)."""
    return F.pad(tensor, (0, 0, width - tensor.shape[-2], 0))


def _check_layers(cache: Any) -> None:
    for layer in cache.layers:
        plain_attention = type(layer) is DynamicLayer
        if not (plain_attention or isinstance(layer, (LinearAttentionCacheLayerMixin, DummyLayer))):
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
