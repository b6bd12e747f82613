"""How the served model's weights lie in memory for batched decoding on a CPU.

`column_major_linears(model)` stores every `nn.Linear` weight column-major: the same values (the same
Parameter objects, so tied weights stay tied and `state_dict` keeps its keys), laid out as the transpose
of a contiguous matrix. `F.linear(x, W)` computes x @ W.T; with W column-major, W.T is an ordinary
contiguous matrix, and MKL's sgemm multiplies the decode step's few rows by it without the transposed
code path, uneven and often slow for 2-16 rows. Measured on the 2-core Xeon (CPU time of one SmolLM2 decode
step, docs/performance.md): 4 rows 86-89 -> 74-78 ms, 7 rows 109 -> 86, 8 rows 115-155 -> 108-111, 12 rows
161 -> 107, 16 rows 131-132 -> 121-128, 1 row unchanged; bench_serve's 4 and 16 clients 2.34x -> 2.87x and
4.67x -> 5.19x sequential. The products are the same up to float rounding (another summation order: ~1e-5
on the log-probs).

`packed_linears(model)` then keeps a second copy of each weight packed for oneDNN, used by decode steps of
`PACKED_ROWS` rows, where it beats MKL (8 rows 97 -> 80 ms of matrix products per SmolLM2 step); MKL keeps
the one-row steps and the prefills, where oneDNN is slower.

On a GPU (cuBLAS reads either layout at the same speed) the model is left as it is.
"""

from __future__ import annotations

from typing import Any

import torch


def column_major_linears(model: Any) -> int:
    """Store each `nn.Linear` weight of `model` (on a CPU) column-major, in place; returns how many changed."""
    changed = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(module, torch.nn.Linear) or weight is None or weight.device.type != "cpu":
            continue
        if weight.dim() == 2 and not weight.t().is_contiguous():  # a tied weight is seen twice: once is enough
            weight.data = weight.data.t().contiguous().t()
            changed += 1
    return changed


# Rows (a decode step's running requests) for which oneDNN's packed weight beats MKL's column-major one. Per
# SmolLM2 step, its 210 layer matrices, one thread, fresh weights (least of 2-3 rounds, interleaved): 1 row 46 vs
# 56 ms, 3 rows 53 vs 57, 4 rows 71 vs 69, 5 rows 63 vs 61, 8 rows 97 vs 80 (with the output layer), 16 rows 115
# vs 95, 40 rows (a prefill) 122 vs 131: MKL keeps the one-row steps and the prefills.
PACKED_ROWS = range(5, 17)


class PackedLinear(torch.nn.Linear):
    """An `nn.Linear` holding its weight twice: as it was (the same Parameter: state_dict, tied weights) and
    packed by oneDNN (`torch.ops.mkldnn._reorder_linear_weight`, the kernel `torch.compile` picks on a CPU),
    used when the input has PACKED_ROWS rows. The same product up to float rounding (~1e-6)."""

    @classmethod
    def of(cls, linear: torch.nn.Linear) -> PackedLinear:
        packed = cls.__new__(cls)
        torch.nn.Module.__init__(packed)
        packed.in_features, packed.out_features = linear.in_features, linear.out_features
        packed.weight, packed.bias = linear.weight, linear.bias
        with torch.no_grad():
            packed.packed_weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 8)
        return packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[:-1].numel() not in PACKED_ROWS:
            return super().forward(x)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")


def packed_linears(model: Any) -> int:
    """Replace each `nn.Linear` of `model` on a CPU by a `PackedLinear` of the same weights (one more copy of
    them in memory); returns how many. A torch without oneDNN keeps the model as it is."""
    if not torch.backends.mkldnn.is_available():
        return 0
    found = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is torch.nn.Linear and child.weight.device.type == "cpu"
             and child.weight.dtype == torch.float32]
    for parent, name, child in found:
        setattr(parent, name, PackedLinear.of(child))
    return len(found)
