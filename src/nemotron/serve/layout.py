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
