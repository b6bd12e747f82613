"""The nano2 model table: sizes per scale, config checks, HF round trip, deterministic training."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from transformers import AutoModelForCausalLM, NemotronHForCausalLM

from nemotron.errors import NemotronError
from nemotron.models.nano2 import (
    SCALES,
    VOCAB_SIZES,
    build_config,
    build_model,
    count_parameters,
    describe_pattern,
)

PARAMETER_RANGES = {
    "tiny": (1e6, 3e6),
    "small": (10e6, 20e6),
    "medium": (80e6, 130e6),
    "full": (8.8e9, 9.0e9),  # NVIDIA-Nemotron-Nano-9B-v2 has 8.89B parameters
}


@pytest.mark.parametrize("scale", list(SCALES))
def test_parameter_count_of_each_scale_is_in_its_range(scale):
    config = build_config(scale, VOCAB_SIZES[scale])
    low, high = PARAMETER_RANGES[scale]
    assert low <= count_parameters(config) <= high


@pytest.mark.parametrize("scale", list(SCALES))
def test_every_scale_is_hybrid(scale):
    kinds = set(build_config(scale, VOCAB_SIZES[scale]).layers_block_type)
    assert kinds == {"linear_attention", "full_attention", "mlp"}  # Mamba-2, attention, MLP


def test_full_scale_is_the_published_nano_9b_v2_shape():
    config = build_config("full", 131072)
    assert config.hybrid_override_pattern == "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
    assert describe_pattern(config.hybrid_override_pattern) == "56 layers: 27 Mamba-2, 25 MLP, 4 attention"
    assert (config.hidden_size, config.intermediate_size, config.num_hidden_layers) == (4480, 15680, 56)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (40, 8, 128)
    assert (config.mamba_num_heads, config.mamba_head_dim, config.ssm_state_size, config.n_groups) == (128, 80, 128, 8)
    assert config.tie_word_embeddings is False
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 1, 2)


def test_overrides_change_the_model_and_count_matches_a_built_model():
    config = build_config("tiny", 300, hidden_size=64, intermediate_size=128, hybrid_override_pattern="M*-")
    assert config.num_hidden_layers == 3 and config.hidden_size == 64 and config.vocab_size == 300
    model = build_model(config, seed=0)
    assert count_parameters(model) == count_parameters(config)
    assert model.lm_head.weight.shape == (300, 64)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"hiden_size": 64}, "unknown model setting"),
        ({"hybrid_override_pattern": "M-X"}, "unknown layer symbol"),
        ({"mamba_num_heads": 6, "n_groups": 4}, "not divisible"),
    ],
)
def test_bad_settings_are_named_errors(overrides, message):
    with pytest.raises(NemotronError, match=message):
        build_config("tiny", 300, **overrides)


def test_unknown_scale_is_an_error():
    with pytest.raises(NemotronError, match="unknown model scale 'huge'"):
        build_config("huge", 300)


def test_save_pretrained_reloads_with_auto_class_and_identical_logits(tmp_path):
    model = build_model(build_config("tiny", 300), seed=3).eval()
    tokens = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(input_ids=tokens, use_cache=False).logits
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert isinstance(reloaded, NemotronHForCausalLM)
    with torch.no_grad():
        actual = reloaded(input_ids=tokens, use_cache=False).logits
    assert torch.equal(expected, actual)


def _train_losses(seed: int, steps: int = 3) -> tuple[list[float], dict]:
    model = build_model(build_config("tiny", 300), seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 300, (steps, 4, 65), generator=torch.Generator().manual_seed(seed))
    losses = []
    for batch in data:
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 300), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, model.state_dict()


def test_same_seed_trains_bit_identically_and_another_seed_does_not():
    losses_a, weights_a = _train_losses(seed=0)
    losses_b, weights_b = _train_losses(seed=0)
    assert losses_a == losses_b
    assert all(torch.equal(weights_a[name], weights_b[name]) for name in weights_a)
    losses_c, _ = _train_losses(seed=1)
    assert losses_c != losses_a


def test_build_model_does_not_disturb_the_callers_random_state():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_model(build_config("tiny", 300), seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_generation_runs_through_the_recurrent_cache():
    model = build_model(build_config("tiny", 300), seed=0).eval()
    prompt = torch.tensor([[1, 17, 42, 99]])
    output = model.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert output.shape == (1, 9) and torch.equal(output[:, :4], prompt)
