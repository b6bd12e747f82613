"""The nano3 model: Nemotron 3 Nano's hybrid Mamba-Transformer mixture-of-experts, sized per scale.

Nemotron 3 Nano (NVIDIA, 2025, arXiv:2512.20848; 31.6B parameters, 3.2B active per token, 3.6B
with the embeddings) keeps
Nano 2's hybrid stack (Mamba-2 layers, a few attention layers, see `nemotron.models.nano2`) and
replaces every dense MLP with a mixture-of-experts layer, written `E` in the pattern:

    MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME   (52 layers: 23 Mamba-2, 23 MoE, 6 attention)

An MoE layer (Shazeer et al., 2017; as in DeepSeek-V3, arXiv:2412.19437) holds many small MLPs, the
*experts*, and a *router*: a linear map from the token's hidden state to one score per expert. Each
token goes through only the `num_experts_per_tok` (top-k) experts with the highest scores, and their
outputs are summed, weighted by the scores; a *shared expert* (a plain MLP) sees every token. So the
model has the parameters of 128 experts but pays, per token, for 6 of them plus the shared one: that
is the gap between "31.6B total" and "3.2B active". Nano 3's router, as in transformers'
`NemotronHTopkRouter`: sigmoid scores, the top-k picked on score + a per-expert bias, their weights
normalised to sum 1 and multiplied by `routed_scaling_factor` (2.5).

The router has to learn to spread tokens: if it sends most of them to a few experts, the others
never train and the layer is a small dense MLP with extra steps. Two mechanisms keep the load even,
and Nano 3 uses both (Megatron-Bridge: `moe_aux_loss_coeff=1e-4`, `moe_router_load_balancing_type=
"seq_aux_loss"`, `moe_router_enable_expert_bias=True`):
- the load-balancing loss (Switch Transformer, Fedus et al., 2021): `E/(k T^2) * sum_i f_i P_i`,
  f_i = routed slots expert i received, P_i = summed router probability of expert i, T tokens;
  it is 1 when the load is even and grows as it concentrates. "seq_" computes it per sequence and
  averages. transformers 5.23's NemotronH has no auxiliary loss (its output carries the router
  logits only), so `load_balancing_loss` below computes it from the router's outputs;
- the expert bias ("auxiliary-loss-free" balancing, Wang et al., 2024, arXiv:2408.15664): after each
  optimizer step, raise the selection bias of under-loaded experts and lower the over-loaded ones'
  by a fixed rate (`update_expert_bias`). The bias changes which experts are chosen, never the
  weights of the ones chosen. transformers stores it as the buffer `e_score_correction_bias`, so it
  is saved with the model.

`RoutingRecorder` collects what every router chose during a forward pass (forward hooks on
`NemotronHTopkRouter`), which gives the loss, the bias update and the per-expert load the training
log shows.

Scales (parameters counted with the vocabulary in `VOCAB_SIZES`; "active" = used per token):
    tiny   ~1.8M total, ~1.5M active   ME*E: 8 experts, top-2 + shared; same active shape as nano2 tiny
    small  ~20M  total, ~11M  active   16 layers, 16 experts, top-4
    medium ~250M total, ~100M active
    full   31.6B total, 3.6B  active   the published Nemotron 3 Nano 30B-A3B shape (GPU cluster only)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import NemotronHConfig

from nemotron.data_prep.tokenizer import VOCAB_SIZES  # noqa: F401 (re-exported)
from nemotron.models.hybrid import (  # noqa: F401 (re-exported: one import line for a step)
    build_hybrid_config,
    build_model,
    count_parameters,
    describe_pattern,
)

# One row per scale. An MoE layer: `n_routed_experts` experts of width `moe_intermediate_size`, the
# router picks `num_experts_per_tok`; a shared expert of width `moe_shared_expert_intermediate_size`.
# `intermediate_size` is the width of dense MLP layers ('-'); Nano 3 has none, but the dense model we
# compare against (`dense_counterpart`) uses it.
SCALES: dict[str, dict[str, Any]] = {
    # Same Mamba/attention shapes as nano2 tiny; each MoE layer is active-width 2 x 128 + 256 = 512,
    # nano2 tiny's MLP width, so the two models cost about the same per token.
    "tiny": dict(
        hybrid_override_pattern="ME*E",
        hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        mamba_num_heads=4, mamba_head_dim=64, ssm_state_size=16, n_groups=1, conv_kernel=4, chunk_size=64,
        n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
        moe_shared_expert_intermediate_size=256, routed_scaling_factor=1.0,
        max_position_embeddings=1024,
    ),
    "small": dict(
        hybrid_override_pattern="MEMEM*EMEMEM*EME",
        hidden_size=256, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
        mamba_num_heads=8, mamba_head_dim=64, ssm_state_size=32, n_groups=1, conv_kernel=4, chunk_size=64,
        n_routed_experts=16, num_experts_per_tok=4, moe_intermediate_size=192,
        moe_shared_expert_intermediate_size=384, routed_scaling_factor=1.5,
        max_position_embeddings=2048,
    ),
    "medium": dict(
        hybrid_override_pattern="MEMEM*EMEMEME",
        hidden_size=768, num_attention_heads=12, num_key_value_heads=4, head_dim=64,
        mamba_num_heads=24, mamba_head_dim=64, ssm_state_size=64, n_groups=2, conv_kernel=4, chunk_size=128,
        n_routed_experts=32, num_experts_per_tok=4, moe_intermediate_size=512,
        moe_shared_expert_intermediate_size=1024, routed_scaling_factor=2.0,
        max_position_embeddings=4096,
    ),
    # NVIDIA-Nemotron-3-Nano-30B-A3B, from Megatron-Bridge's nemotron_3_nano_pretrain_8gpu_h100_bf16_config
    # (recipes/nemotronh/h100/nemotron_3_nano.py; tests/test_nano3_model.py checks every field
    # against the facts extracted from it). Megatron names -> transformers names: kv_channels ->
    # head_dim, num_query_groups -> num_key_value_heads, mamba_state_dim -> ssm_state_size,
    # mamba_num_groups -> n_groups, moe_ffn_hidden_size -> moe_intermediate_size, moe_router_topk ->
    # num_experts_per_tok, moe_router_topk_scaling_factor -> routed_scaling_factor,
    # moe_router_num_groups / group_topk -> n_group / topk_group.
    "full": dict(
        hybrid_override_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        hidden_size=2688, num_attention_heads=32, num_key_value_heads=2, head_dim=128,
        mamba_num_heads=64, mamba_head_dim=64, ssm_state_size=128, n_groups=8, conv_kernel=4, chunk_size=128,
        n_routed_experts=128, num_experts_per_tok=6, moe_intermediate_size=1856,
        moe_shared_expert_intermediate_size=3712, routed_scaling_factor=2.5, n_group=1, topk_group=1,
        intermediate_size=1856,  # Bridge's ffn_hidden_size (no dense MLP layer uses it)
        # Not in the Bridge recipe (attention has no position embedding, so nothing fixes it): the
        # 256k-token sequences of Nano 3's long-context SFT (arXiv:2512.20848, section 3).
        max_position_embeddings=262144,
    ),
}

# Settings shared by every scale (as nano2), plus Nano 3's router: sigmoid scores (transformers'
# only choice), top-k weights normalised to sum 1.
COMMON = dict(
    tie_word_embeddings=False, use_bias=False, mlp_bias=False, attention_bias=False, use_conv_bias=True,
    mlp_hidden_act="relu2", layer_norm_epsilon=1e-5, initializer_range=0.02, rescale_prenorm_residual=True,
    residual_in_fp32=False, intermediate_size=512, n_shared_experts=1, n_group=1, topk_group=1,
    norm_topk_prob=True,
)

# Load balancing, from the Bridge recipe: the auxiliary-loss coefficient, and the expert-bias update
# rate (Megatron's default `moe_router_bias_update_rate`, which the recipe does not change).
AUX_LOSS_COEFF = 1e-4
BIAS_UPDATE_RATE = 1e-3


def build_config(scale: str, vocab_size: int, **overrides: Any) -> NemotronHConfig:
    """The NemotronHConfig of `scale` with `vocab_size`; any field can be overridden by keyword
    (NemotronHConfig names, plus `hybrid_override_pattern`); unknown names are a NemotronError."""
    return build_hybrid_config("nano3", SCALES, COMMON, scale, vocab_size, "ME*-", overrides)


def active_parameters(config: NemotronHConfig) -> int:
    """Parameters used per token: all of them minus the routed experts a token does not visit."""
    per_expert = 2 * config.hidden_size * config.moe_intermediate_size  # up and down projections
    moe_layers = config.layers_block_type.count("moe")
    idle = config.n_routed_experts - config.num_experts_per_tok
    return count_parameters(config) - moe_layers * idle * per_expert


def dense_counterpart(config: NemotronHConfig) -> NemotronHConfig:
    """The dense model with the same active shape: every MoE layer becomes one MLP as wide as the
    experts a token visits plus the shared expert (what "same active parameters" compares against)."""
    width = config.num_experts_per_tok * config.moe_intermediate_size + config.moe_shared_expert_intermediate_size
    settings = config.to_dict()
    for key in ("model_type", "transformers_version", "architectures", "layer_types", "dtype"):
        settings.pop(key, None)
    settings["layers_block_type"] = ["mlp" if kind == "moe" else kind for kind in config.layers_block_type]
    settings["intermediate_size"] = width
    return NemotronHConfig(**settings)


# ---------------------------------------------------------------------------------------------------
# Routing: what the routers chose, the load-balancing loss, the expert bias
# ---------------------------------------------------------------------------------------------------


@dataclass
class Routing:
    """One router's choice for one forward pass: `scores` (tokens x experts, sigmoid of the logits,
    with gradient) and `chosen` (tokens x top-k expert indices)."""

    scores: torch.Tensor
    chosen: torch.Tensor

    def load(self) -> torch.Tensor:
        """Share of the routed slots each expert received (sums to 1)."""
        counts = torch.bincount(self.chosen.flatten(), minlength=self.scores.shape[-1]).float()
        return counts / counts.sum()


class RoutingRecorder:
    """Records every MoE router's choice during forward passes inside `with recorder.recording():`."""

    def __init__(self, model: nn.Module) -> None:
        routers = [m for m in model.modules() if type(m).__name__ == "NemotronHTopkRouter"]
        self.routers = routers
        self.routings: list[Routing] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[Routing]]:
        self.routings = []

        def keep(module: nn.Module, inputs: Any, outputs: tuple) -> None:
            router_logits, _, chosen = outputs
            self.routings.append(Routing(router_logits.sigmoid(), chosen))

        handles = [router.register_forward_hook(keep) for router in self.routers]
        try:
            yield self.routings
        finally:
            for handle in handles:
                handle.remove()


def load_balancing_loss(routings: list[Routing], num_sequences: int, top_k: int) -> torch.Tensor:
    """Megatron's "seq_aux_loss", summed over MoE layers: per sequence, `E/(k S^2) sum_i f_i P_i` with
    f_i = slots routed to expert i, P_i = summed normalised score of expert i over the S tokens; 1.0
    per layer when the load is perfectly even. Multiply by AUX_LOSS_COEFF before adding it to the loss."""
    total = torch.zeros(())
    for routing in routings:
        experts = routing.scores.shape[-1]
        probs = routing.scores / (routing.scores.sum(-1, keepdim=True) + 1e-20)  # Megatron's sigmoid case
        probs = probs.view(num_sequences, -1, experts)
        tokens = probs.shape[1]
        counts = torch.zeros_like(probs).scatter_add_(
            -1, routing.chosen.view(num_sequences, tokens, -1), torch.ones_like(probs[..., :top_k])
        ).sum(1)  # (sequences, experts) routed slots
        per_sequence = (probs.sum(1) * counts).sum(-1) * experts / (top_k * tokens * tokens)
        total = total + per_sequence.mean()
    return total


def expert_counts(routings: list[Routing], moe_layers: int) -> torch.Tensor:
    """(MoE layers x experts) float64: the routed slots each expert received, summed over the forward
    passes recorded (Megatron's `tokens_per_expert`; the routings of one pass come in layer order)."""
    counts = torch.stack([torch.bincount(r.chosen.flatten(), minlength=r.scores.shape[-1]) for r in routings])
    return counts.double().view(-1, moe_layers, counts.shape[-1]).sum(0)


def expert_loads(routings: list[Routing], moe_layers: int) -> torch.Tensor:
    """(MoE layers x experts): each layer's share of routed slots per expert, averaged over the forward
    passes recorded (the routings of one pass come in layer order)."""
    loads = torch.stack([routing.load() for routing in routings])
    return loads.view(-1, moe_layers, loads.shape[-1]).mean(0)


@torch.no_grad()
def update_expert_bias(recorder: RoutingRecorder, loads: torch.Tensor, rate: float = BIAS_UPDATE_RATE) -> None:
    """Auxiliary-loss-free balancing: bias += rate * sign(mean load - load), per layer and expert.
    `loads`: the step's routed slots per expert, summed over its forward passes and all ranks (so every
    rank applies the same), as Megatron-Core's `get_updated_expert_bias`; shares give the same signs."""
    for router, load in zip(recorder.routers, loads):
        router.e_score_correction_bias += rate * torch.sign(load.mean() - load)
