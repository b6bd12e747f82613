"""Mamba-2's training forward: the SSD chunked scan, written for few, large kernels, and its compiled form.

A Mamba-2 layer (Dao & Gu, 2024, "Transformers are SSMs", arXiv:2405.21060) maps each head's input
sequence x_t (head_dim p wide) through a selective state space with a scalar decay per head and step:

    dt_t = clamp(softplus(dt_raw_t + dt_bias), min=dt_min)            (step size, per head)
    H_t  = exp(dt_t A) H_{t-1} + dt_t B_t x_t^T                         (state: n x p per head)
    y_t  = C_t^T H_t + D x_t                                            (output: p per head)

with A = -exp(A_log) < 0, and B_t, C_t (n wide) shared by the heads of a group. The SSD algorithm
(section 6 of the paper) computes the same y in chunks of Q steps, as four matrix products; with
a_t = dt_t A and its running sum within a chunk cum_t:

    1. inside a chunk:   y_l  = sum_{s<=l} (C_l . B_s) exp(cum_l - cum_s) dt_s x_s      (causal "attention")
    2. chunk states:     S_c  = sum_s exp(cum_Q - cum_s) B_s (dt_s x_s)^T               (what a chunk leaves)
    3. across chunks:    H_c  = sum_{z<c} exp(cum of the chunk totals from z+1 to c-1) S_z (state entering c)
    4. from the state:   y_l += exp(cum_l) C_l^T H_c

transformers' `mamba2_chunk_scan` (the PyTorch path of `NemotronHMamba2Mixer`, which runs wherever the
mamba_ssm CUDA kernels do not) is that algorithm written for clarity: B and C are copied to every head
before C . B is formed, the decay matrix is built by an expand + masked cumsum + two masked fills per
call, and each einsum lays its operands out again. `ssd_chunked_scan` below is the same sum with:
C . B formed once per group (not per head: 4x less work at nano2 tiny, whose 4 heads share one group),
heads kept in the batch dimension of every product so that each is one batched matmul, and the decay
exp(cum_l - cum_s) taken from the difference of running sums, as the mamba_ssm Triton kernels do
(ssd_chunk_scan.py: exp(dA_cs_m - dA_cs_k)). The result equals transformers' to float rounding;
tests/test_mamba2.py compares outputs and gradients on seeded random inputs of several shapes.
Measured (nano2 tiny's mixer, 8 x 256 tokens, forward + backward, 1 thread, one profiler run on a loaded
2-core machine): 5.25 s transformers' vs 3.11 s ours over 3 passes each, 1.69x.

`fused_chunked_scan` is `ssd_chunked_scan` compiled (torch.compile, inductor): the same sum, with the
elementwise work between the products (the decay matrices' differences, masks and exps, the scaling of
B, C and dt x, and their gradients) fused into a few generated kernels instead of one kernel per
operation, and what the backward pass needs recomputed from the inputs rather than stored. On a GPU,
where the eager scan is dozens of small kernel launches per layer, that is what keeps the GPU busy.
`ssd_chunked_scan` stays its specification: tests/test_mamba2_fused.py checks values and every gradient
against it on seeded random shapes.

`Mamba2TrainingMixer` is transformers' `NemotronHMamba2Mixer` with a forward that, in training (no cache,
no padding mask; also its validation loss), runs:
- on a GPU with the `mamba_ssm` and `causal_conv1d` kernels importable (`MAMBA_SSM_KERNELS`: an import
  check, never a dependency; `pip install mamba-ssm causal-conv1d`): transformers' forward, which calls
  mamba_ssm's fused Triton kernel for the convolution, the scan, the gated norm and the output projection;
- on a GPU without them: our convolution and `fused_chunked_scan`;
- on a CPU: our convolution and `ssd_chunked_scan`, eager (`--compile` compiles the whole model, this
  scan with it; without it a run's numbers stay those of this eager code, digest for digest);
- anything else (other devices, generation with its cache, padded batches): transformers' own forward.
Its parameters are the same objects under the same names, so a saved model is a plain `NemotronHForCausalLM`
folder. `use_training_scan(model)` switches every Mamba-2 layer of a model to it; each training step calls
it in sight, where it builds its model.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer

try:  # optional CUDA kernels; transformers' module (imported above) has tried to import them already
    import causal_conv1d  # noqa: F401
    import mamba_ssm  # noqa: F401

    MAMBA_SSM_KERNELS = True
except Exception:  # not installed (never on a CPU-only machine), or built for another torch / CUDA
    MAMBA_SSM_KERNELS = False


def decay_matrix(cum: torch.Tensor) -> torch.Tensor:
    """exp(cum_l - cum_s) for s <= l, else 0: (..., Q) -> (..., Q, Q), rows l, columns s."""
    size = cum.shape[-1]
    causal = torch.ones(size, size, dtype=torch.bool, device=cum.device).tril()
    difference = cum[..., :, None] - cum[..., None, :]
    return torch.exp(difference.masked_fill(~causal, -torch.inf))


class CausalDepthwiseConv(torch.autograd.Function):
    """y[b, t, c] = bias[c] + sum_k weight[c, k] x[b, t - K + 1 + k, c], x = 0 before the start; K taps.

    Mamba's short causal convolution over time, one filter per channel, in the (batch, time, channels)
    layout the projections use, with its gradients written out: for these shapes (2,048 tokens x 288
    channels x 4 taps) `nn.Conv1d`'s depthwise backward and the transposes around it (to and from
    channels-first) cost more than the K multiply-adds themselves.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        taps, time = weight.shape[-1], x.shape[1]
        padded = F.pad(x, (0, 0, taps - 1, 0))  # (batch, K - 1 + time, channels)
        y = padded[:, taps - 1:] * weight[:, taps - 1]
        for k in range(taps - 1):
            y.addcmul_(padded[:, k:k + time], weight[:, k])
        if bias is not None:
            y += bias
        ctx.save_for_backward(padded, weight)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        padded, weight = ctx.saved_tensors
        taps, time = weight.shape[-1], grad.shape[1]
        grad = grad.contiguous()
        later = F.pad(grad, (0, 0, 0, taps - 1))  # zeros after the end: x[s] feeds y[s + K - 1 - k]
        grad_x = grad * weight[:, taps - 1]
        for k in range(taps - 1):
            grad_x.addcmul_(later[:, taps - 1 - k:taps - 1 - k + time], weight[:, k])
        grad_weight = torch.stack([(grad * padded[:, k:k + time]).sum((0, 1)) for k in range(taps)], dim=-1)
        grad_bias = grad.sum((0, 1)) if ctx.has_bias else None
        return grad_x, grad_weight, grad_bias


def ssd_chunked_scan(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, chunk_size: int,
) -> torch.Tensor:
    """The SSD scan of the module docstring, steps 1-4 (without the D x skip term), from a zero state.

    x (batch, time, heads, p), dt (batch, time, heads) after softplus and clamp, A (heads,) negative,
    B and C (batch, time, groups, n) -> y (batch, time, heads, p) in float32.
    """
    batch, time, heads, p = x.shape
    groups = B.shape[2]
    per_group = heads // groups
    pad = -time % chunk_size  # zero steps after the end: causal, so they change no real output
    chunks = (time + pad) // chunk_size

    def chunked(t: torch.Tensor) -> torch.Tensor:  # (batch, time, ...) -> (batch, chunks, Q, ...)
        t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) if pad else t
        return t.reshape(batch, chunks, chunk_size, *t.shape[2:])

    dt = dt.float()
    # Heads-major layouts, (batch, groups, heads per group, chunks, Q, ...): every product below is one bmm.
    a = chunked(dt * A.float()).view(batch, chunks, chunk_size, groups, per_group).permute(0, 3, 4, 1, 2)
    xdt = chunked(x.float() * dt[..., None])
    xdt = xdt.view(batch, chunks, chunk_size, groups, per_group, p).permute(0, 3, 4, 1, 2, 5).contiguous()
    B = chunked(B.float()).permute(0, 3, 1, 2, 4)[:, :, None]  # (batch, groups, 1, chunks, Q, n)
    C = chunked(C.float()).permute(0, 3, 1, 2, 4)[:, :, None]
    cum = a.cumsum(-1)  # (batch, groups, per_group, chunks, Q)

    # 1. inside each chunk: C . B once per group, times each head's decay (applied to dt x in step 4).
    scores = (C @ B.transpose(-1, -2)) * decay_matrix(cum)  # (..., chunks, Q, Q)
    # 2. the state each chunk leaves; the decay to the chunk's end scales B (Q x n), not dt x (Q x p).
    states = (B * torch.exp(cum[..., -1:] - cum)[..., None]).transpose(-1, -2) @ xdt  # (..., chunks, n, p)
    # 3. the state entering each chunk: row c of the chunk-level decay matrix shifted down by one.
    entering = F.pad(decay_matrix(cum[..., -1].cumsum(-1)), (0, 0, 1, 0))[..., :-1, :]  # (..., chunks, chunks)
    states = (entering @ states.flatten(-2)).view_as(states)
    # 4. what the entering state contributes at each step (exp(cum) <= 1 scales C), plus step 1's product.
    y = (C * torch.exp(cum)[..., None]) @ states
    y = torch.baddbmm(y.flatten(0, -3), scores.flatten(0, -3), xdt.flatten(0, -3)).view_as(y)
    y = y.permute(0, 3, 4, 1, 2, 5).reshape(batch, chunks * chunk_size, heads, p)
    return y[:, :time]


@functools.cache
def compiled_scan():
    """`ssd_chunked_scan` under torch.compile, built on first use (importing the compiler takes seconds).
    fullgraph: one graph, or an error (never a silent fall-back to eager); dynamic=None: compiled for the
    first shapes, and once more with symbolic sizes when they change (SFT rows, DPO pairs)."""
    return torch.compile(ssd_chunked_scan, fullgraph=True)


def fused_chunked_scan(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, chunk_size: int,
) -> torch.Tensor:
    """`ssd_chunked_scan(x, dt, A, B, C, chunk_size)`, compiled into fused kernels (module docstring): the same
    arguments and result, equal to float rounding. Inside a model that is being compiled already (`--compile`)
    it is the plain scan, which that model's graph takes in and fuses with the layers around it."""
    if torch.compiler.is_compiling():
        return ssd_chunked_scan(x, dt, A, B, C, chunk_size)
    return compiled_scan()(x, dt, A, B, C, chunk_size)


class Mamba2TrainingMixer(NemotronHMamba2Mixer):
    """`NemotronHMamba2Mixer` whose training forward is ours where it applies (module docstring)."""

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        device = hidden_states.device.type
        if (device not in ("cpu", "cuda") or (device == "cuda" and MAMBA_SSM_KERNELS)
                or cache_params is not None or attention_mask is not None):
            return super().forward(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
        batch, time, _ = hidden_states.shape
        heads, p, groups, n = self.num_heads, self.head_dim, self.n_groups, self.ssm_state_size
        gate, xBC, dt = self.in_proj(hidden_states).split([self.intermediate_size, self.conv_dim, heads], dim=-1)
        xBC = self.act(CausalDepthwiseConv.apply(xBC, self.conv1d.weight[:, 0], self.conv1d.bias))
        x, B, C = xBC.split([self.intermediate_size, groups * n, groups * n], dim=-1)
        dt = F.softplus(dt + self.dt_bias).clamp(*self.time_step_limit)
        x = x.reshape(batch, time, heads, p)
        scan = fused_chunked_scan if device == "cuda" else ssd_chunked_scan
        y = scan(x, dt, -torch.exp(self.A_log.float()), B.reshape(batch, time, groups, n),
                 C.reshape(batch, time, groups, n), self.chunk_size)
        y = (y + self.D[:, None] * x.float()).reshape(batch, time, -1)
        return self.out_proj(self.norm(y, gate).to(hidden_states.dtype))


def use_training_scan(model: nn.Module) -> nn.Module:
    """Switch every `NemotronHMamba2Mixer` of `model` to `Mamba2TrainingMixer`, in place; returns `model`.

    Only the class of each mixer changes (its forward); the parameters stay the same objects under the same
    names, so the optimizer, checkpoints and the saved folder are those of the plain model. With a cache
    (generation), or on a GPU with the mamba_ssm kernels, the switched mixer runs transformers' forward."""
    for module in model.modules():
        if type(module) is NemotronHMamba2Mixer:
            module.__class__ = Mamba2TrainingMixer
    return model
