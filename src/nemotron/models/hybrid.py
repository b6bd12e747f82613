"""What every Nemotron-H-style model family shares: a layer pattern, a checked config, a seeded build.

A family module (`nano2`, `nano3`) holds a table of shapes per scale and the settings common to its
scales; this module turns one row of such a table into transformers' `NemotronHConfig` with every
setting checked by name, builds the model with a seed, counts parameters and describes the pattern.
One character per layer, Megatron's `hybrid_override_pattern` alphabet:

    M  Mamba-2 mixer       *  self-attention (no position embedding)
    -  MLP                 E  mixture-of-experts MLP (router, routed experts, shared expert)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from transformers import NemotronHConfig, NemotronHForCausalLM

from nemotron.data_prep.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nemotron.errors import NemotronError

PATTERN_SYMBOLS = {"M": "Mamba-2", "*": "attention", "-": "MLP", "E": "MoE"}


def build_hybrid_config(
    family: str, scales: Mapping[str, dict[str, Any]], common: dict[str, Any], scale: str, vocab_size: int,
    symbols: str, overrides: dict[str, Any],
) -> NemotronHConfig:
    """The NemotronHConfig of `scales[scale]` over `common`, with `overrides` (NemotronHConfig field
    names plus `hybrid_override_pattern`); `symbols` are the layer kinds this family allows."""
    if scale not in scales:
        raise NemotronError(f"unknown model scale {scale!r} for {family}; use one of {', '.join(scales)}")
    if vocab_size <= EOS_ID:
        raise NemotronError(f"vocab_size={vocab_size} is too small: it must hold the special tokens 0..{EOS_ID}")
    known = {field.name for field in dataclasses.fields(NemotronHConfig)} | {"hybrid_override_pattern"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise NemotronError(
            f"unknown model setting(s) {', '.join(unknown)} for scale {scale!r}; use NemotronHConfig field names "
            "(e.g. hidden_size, hybrid_override_pattern, mamba_num_heads)"
        )
    settings = {**common, **scales[scale], **overrides}
    if "layers_block_type" in overrides:  # an explicit list wins over the table's pattern string
        settings.pop("hybrid_override_pattern", None)
    else:
        check_pattern(settings["hybrid_override_pattern"], symbols)
    check_shapes(settings)
    try:
        return NemotronHConfig(vocab_size=vocab_size, pad_token_id=PAD_ID, bos_token_id=BOS_ID,
                               eos_token_id=EOS_ID, **settings)
    except (ValueError, TypeError) as error:
        raise NemotronError(f"invalid model settings for scale {scale!r}: {error}") from None


def build_model(config: NemotronHConfig, seed: int) -> NemotronHForCausalLM:
    """A freshly initialised model; the same config and seed give bit-identical weights.

    The seed is used in a forked RNG, so building a model does not disturb the caller's random state.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = NemotronHForCausalLM(config)
    return model


def count_parameters(model_or_config: nn.Module | NemotronHConfig) -> int:
    """Number of parameters of a model, or of the model a config describes (built on the meta
    device, so even a 30B shape is counted without allocating memory)."""
    if isinstance(model_or_config, NemotronHConfig):
        with torch.device("meta"):
            model_or_config = NemotronHForCausalLM(model_or_config)
    return sum(parameter.numel() for parameter in model_or_config.parameters())


def describe_pattern(pattern: str) -> str:
    """'M-M*-M-' -> '7 layers: 3 Mamba-2, 3 MLP, 1 attention' (for logs and READMEs)."""
    counts = {name: pattern.count(symbol) for symbol, name in PATTERN_SYMBOLS.items()}
    parts = ", ".join(f"{n} {name}" for name, n in sorted(counts.items(), key=lambda item: -item[1]) if n)
    return f"{len(pattern)} layers: {parts}"


def check_pattern(pattern: Any, symbols: str) -> None:
    if not isinstance(pattern, str) or not pattern:
        raise NemotronError(f"hybrid_override_pattern must be a non-empty string like 'M-M*-M-', got {pattern!r}")
    bad = sorted(set(pattern) - set(symbols))
    if bad:
        allowed = ", ".join(f"{symbol} ({PATTERN_SYMBOLS[symbol]})" for symbol in symbols)
        raise NemotronError(f"hybrid_override_pattern {pattern!r} has unknown layer symbol(s) {''.join(bad)!r}; "
                            f"use {allowed}")


def check_shapes(settings: dict[str, Any]) -> None:
    """The divisibility rules the Mamba-2, attention and router layers assume, checked up front with names."""
    rules = [
        ("mamba_num_heads", "n_groups", "Mamba-2 heads are split evenly between B/C groups"),
        ("num_attention_heads", "num_key_value_heads", "query heads share key/value heads evenly (GQA)"),
    ]
    if "E" in settings.get("hybrid_override_pattern", ""):
        rules.append(("n_routed_experts", "n_group", "the router picks groups of experts of equal size"))
    for numerator, denominator, why in rules:
        if settings[numerator] % settings[denominator]:
            raise NemotronError(
                f"{numerator}={settings[numerator]} is not divisible by {denominator}={settings[denominator]} "
                f"({why}); change one of them"
            )
