"""The nano2 model: Nemotron Nano 2's hybrid Mamba-Transformer, sized per scale.

Nemotron Nano 2 (NVIDIA, 2025, arXiv:2508.14444) builds on Nemotron-H (arXiv:2504.03624): most
self-attention layers of a Transformer are replaced by Mamba-2 layers (Dao & Gu, 2024), whose cost
grows linearly with sequence length and whose generation state has a fixed size. Each layer of the
stack is ONE of three residual blocks (pre-RMSNorm, then the mixer, then the residual add), written as
a pattern string, one character per layer:

    M  Mamba-2 mixer       (sequence mixing with a selective state space; no positions needed)
    *  self-attention      (grouped-query attention, no position embedding at all: "NoPE",
                            the Mamba layers before it already encode order)
    -  MLP                 (up-projection, squared ReLU (So et al., 2021, Primer), down-projection)

The 9B model is `M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-`: 56 layers, 27 Mamba-2,
25 MLP and only 4 attention layers. Our smaller scales keep that character: Mamba and MLP layers
alternate and about one layer in seven is attention.

We build the model with transformers' own `NemotronHConfig` / `NemotronHForCausalLM`, so a checkpoint
is a standard Hugging Face folder (`AutoModelForCausalLM.from_pretrained` loads it). In transformers
5.23 the pattern is stored as `layers_block_type` (M -> "linear_attention" in transformers' naming,
* -> "full_attention", - -> "mlp"); the config still accepts Megatron's `hybrid_override_pattern`
string, which is what we write in the table below. The Mamba kernel is chosen automatically: the
`mamba_ssm` / `causal_conv1d` CUDA kernels when installed, otherwise the PyTorch reference code (the
CPU path used here; `use_mamba_kernels` is deprecated and has no effect in 5.23).

Training notes that matter on a CPU:
- call the model with `use_cache=False` when training: the default (`use_cache=True`, needed for
  generation) allocates a recurrent-state cache on every forward pass for nothing;
- the Mamba scan materialises (chunk_size x chunk_size) blocks per head; chunk_size 64 is the fastest
  of 32/64/128 we measured for 256-token sequences on this CPU (benchmarks/nano2_tiny_throughput.py),
  and with our training scan 32 and 64 are equal (nemotron.models.mamba2, which training uses on a CPU).

Scales (parameters counted with the vocabulary in `VOCAB_SIZES`; `count_parameters` prints them):
    tiny   ~1.5M   M-*-: one layer of each kind (plus a second MLP), trains in ~2 CPU minutes
    small  ~11M    16 layers, 2 of them attention
    medium ~100M   13 wider layers
    full   8.89B   the published NVIDIA-Nemotron-Nano-9B-v2 shape (GPU cluster only)
"""

from __future__ import annotations

from typing import Any

from transformers import NemotronHConfig

from nemotron.data_prep.tokenizer import VOCAB_SIZES  # noqa: F401 (re-exported)
from nemotron.models.hybrid import (  # noqa: F401 (re-exported: one import line for a step)
    build_hybrid_config,
    build_model,
    count_parameters,
    describe_pattern,
)

PATTERN_SYMBOLS = {"M": "Mamba-2", "*": "attention", "-": "MLP"}


# One row per scale: every NemotronHConfig field that shapes the model, spelled out.
# Mamba-2 inner width is mamba_num_heads * mamba_head_dim (2x hidden, Mamba's usual expand=2);
# ssm_state_size is the recurrent state per head channel; n_groups shares B/C projections between heads.
SCALES: dict[str, dict[str, Any]] = {
    # Chosen by measurement (300-700 step runs on Shakespeare, equal CPU time): a 4-layer M-*- stack
    # reached a lower held-out loss than 5- and 7-layer stacks, which are slower per step.
    "tiny": dict(
        hybrid_override_pattern="M-*-",
        hidden_size=128,
        intermediate_size=512,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        mamba_num_heads=4,
        mamba_head_dim=64,
        ssm_state_size=16,
        n_groups=1,
        conv_kernel=4,
        chunk_size=64,
        max_position_embeddings=1024,
    ),
    "small": dict(
        hybrid_override_pattern="M-M-M*-M-M-M*-M-",
        hidden_size=256,
        intermediate_size=1024,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=32,
        mamba_num_heads=8,
        mamba_head_dim=64,
        ssm_state_size=32,
        n_groups=1,
        conv_kernel=4,
        chunk_size=64,
        max_position_embeddings=2048,
    ),
    "medium": dict(
        hybrid_override_pattern="M-M-M*-M-M-M-",
        hidden_size=768,
        intermediate_size=3072,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=64,
        mamba_num_heads=24,
        mamba_head_dim=64,
        ssm_state_size=64,
        n_groups=2,
        conv_kernel=4,
        chunk_size=128,
        max_position_embeddings=4096,
    ),
    # NVIDIA-Nemotron-Nano-9B-v2, from its Hugging Face config.json and Megatron-Bridge's
    # NemotronNanoModelProvider9Bv2 (megatron/bridge/models/nemotronh/nemotron_h_provider.py).
    "full": dict(
        hybrid_override_pattern="M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
        hidden_size=4480,
        intermediate_size=15680,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        mamba_num_heads=128,
        mamba_head_dim=80,
        ssm_state_size=128,
        n_groups=8,
        conv_kernel=4,
        chunk_size=128,
        max_position_embeddings=131072,
    ),
}

# Settings shared by every scale, as in Nano 2: untied input/output embeddings, no biases, RMSNorm eps.
COMMON = dict(
    tie_word_embeddings=False,
    use_bias=False,
    mlp_bias=False,
    attention_bias=False,
    use_conv_bias=True,
    mlp_hidden_act="relu2",
    layer_norm_epsilon=1e-5,
    initializer_range=0.02,
    rescale_prenorm_residual=True,
    residual_in_fp32=False,
)


def build_config(scale: str, vocab_size: int, **overrides: Any) -> NemotronHConfig:
    """The NemotronHConfig of `scale` with `vocab_size`; any field can be overridden by keyword.

    `overrides` take NemotronHConfig field names (plus `hybrid_override_pattern`); an unknown name or
    an inconsistent shape is a NemotronError, never a silently ignored setting.
    """
    return build_hybrid_config("nano2", SCALES, COMMON, scale, vocab_size, "M*-", overrides)
