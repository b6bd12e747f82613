"""Training FLOPs per token of a Nemotron-H-style model, counted the way model-FLOPs utilisation needs.

Model FLOPs utilisation (MFU; Chowdhery et al., 2022, "PaLM", appendix B) is the FLOPs the model's
maths needs per second, divided by the device's peak. Like nanochat and torchtitan we count, per
trained token (forward + backward = 3 x forward; a multiply-add is 2 FLOPs):

- `6 x matmul weights`: every weight that multiplies a token's activations once per token: the
  `nn.Linear` weights (the output head included) and Mamba's depthwise `conv1d` weights. Not the
  input embedding (a row lookup costs no FLOPs), nor the norms' gains, biases, Mamba's `A_log`, `D`,
  `dt_bias` (elementwise). An MoE layer counts its router and shared expert fully and its routed
  experts by the share that is active: `num_experts_per_tok / n_routed_experts`.
- attention, full-attention layers only: `12 x heads x head_dim x seq_len` per layer (QK^T and
  scores x V, 2 x heads x head_dim x seq_len multiply-adds forward, all positions counted as nanochat
  and PaLM do, not half for the causal mask; the softmax is elementwise and not counted).
- the Mamba-2 scan (SSD, Dao & Gu, 2024, arXiv:2405.21060, section 6), which none of those counters
  has. In chunks of Q = min(chunk_size, seq_len) tokens, with H heads of P channels, state size N and
  G groups sharing B and C, its four matmul-shaped products need, per token and forward:

      C_chunk B_chunk^T  (Q x N by N x Q, per group):             Q x N x G   multiply-adds
      (L o C B^T) X      (Q x Q scores by Q x P values, per head): Q x H x P
      B^T X              (the state each chunk leaves, per head):  H x P x N
      C state            (each position reads its chunk's start state): H x P x N

  so 6 x (Q N G + Q H P + 2 H P N) training FLOPs per token and Mamba layer. Checked against
  transformers' reference `mamba2_chunk_scan` (the CPU path, transformers 5.23): its einsums are
  these four products, except that it repeats B and C per head, so its first product costs Q N H;
  we count the algorithm (mamba_ssm's kernels share B and C per group), not that copy. Left out as
  elementwise: the decay masks (exp of segment sums), the D skip, the passing of each chunk's state
  to the next (a decay and an add of H x P x N numbers per chunk, H P N / Q per token).

At nano2 tiny (seq_len 256): 939,648 matmul weights -> 5.64 M, attention 0.39 M, scan 0.15 M:
6.18 M training FLOPs a token (tests/test_flops.py checks a small shape against a hand count).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn
from transformers import NemotronHConfig, NemotronHForCausalLM
from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHExperts, NemotronHTopkRouter


@dataclass(frozen=True)
class TrainingFlops:
    """Training FLOPs per token (forward and backward), by term; `per_token` is their sum."""

    matmul_weights: float  # weights counted once per token (routed experts by their active share)
    matmul: float  # 6 x matmul_weights
    attention: float
    mamba_scan: float

    @property
    def per_token(self) -> float:
        return self.matmul + self.attention + self.mamba_scan


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int, repeats: int) -> float:
    """The best FLOP/s of `repeats` products of two (size x size) matrices (after one warm-up): the
    denominator of MFU as measured on this device (a process's first products run slow, hence the best)."""
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    best = float("inf")
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def matmul_weights(model: nn.Module) -> float:
    """The weights that multiply each token's activations once (see the module docstring for which)."""
    total = 0.0
    top_k = getattr(model.config, "num_experts_per_tok", None)
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d)):
            total += module.weight.numel()
        elif isinstance(module, NemotronHTopkRouter):
            total += module.weight.numel()
        elif isinstance(module, NemotronHExperts):
            total += (module.up_proj.numel() + module.down_proj.numel()) * top_k / module.num_experts
    return total


def training_flops(config: NemotronHConfig, seq_len: int) -> TrainingFlops:
    """Training FLOPs per token of the model `config` describes, on windows of `seq_len` tokens.

    The weights are counted on a model built on the meta device: nothing is allocated.
    """
    with torch.device("meta"):
        weights = matmul_weights(NemotronHForCausalLM(config))
    kinds = list(config.layers_block_type)
    attention = kinds.count("full_attention") * 12 * config.num_attention_heads * config.head_dim * seq_len
    chunk = min(config.chunk_size, seq_len)
    heads, channels, state = config.mamba_num_heads, config.mamba_head_dim, config.ssm_state_size
    scan = chunk * state * config.n_groups + chunk * heads * channels + 2 * heads * channels * state
    mamba = kinds.count("linear_attention") * 6 * scan
    return TrainingFlops(matmul_weights=weights, matmul=6 * weights, attention=float(attention),
                         mamba_scan=float(mamba))
