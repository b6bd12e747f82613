"""The nano3 model: the published Nano 3 shape against Megatron-Bridge's recipe facts, sizes per scale,
the routing recorder, the load-balancing loss and the expert-bias update."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from nemotron.errors import NemotronError
from nemotron.models import nano3
from nemotron.models.nano3 import Routing

FACTS = Path(nano3.__file__).parents[1] / "training" / "megatron_bridge" / "megatron_bridge_facts.json"
RECIPE = "nemotron_3_nano_pretrain_8gpu_h100_bf16_config"

# Megatron-Bridge HybridModelProvider argument -> our NemotronHConfig field.
BRIDGE_TO_HF = {
    "hybrid_layer_pattern": "hybrid_override_pattern",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_query_groups": "num_key_value_heads",
    "kv_channels": "head_dim",
    "mamba_num_heads": "mamba_num_heads",
    "mamba_head_dim": "mamba_head_dim",
    "mamba_state_dim": "ssm_state_size",
    "mamba_num_groups": "n_groups",
    "num_moe_experts": "n_routed_experts",
    "moe_ffn_hidden_size": "moe_intermediate_size",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "moe_router_topk": "num_experts_per_tok",
    "moe_router_topk_scaling_factor": "routed_scaling_factor",
    "moe_router_num_groups": "n_group",
    "moe_router_group_topk": "topk_group",
    "ffn_hidden_size": "intermediate_size",
}


def test_full_scale_is_the_published_nano3_shape_of_the_megatron_bridge_recipe():
    bridge = json.loads(FACTS.read_text())["model_arguments"][RECIPE]["arguments"]
    config = nano3.build_config("full", nano3.VOCAB_SIZES["full"])
    for bridge_name, hf_name in BRIDGE_TO_HF.items():
        assert getattr(config, hf_name) == bridge[bridge_name], (bridge_name, hf_name)
    assert config.num_hidden_layers == bridge["num_layers"] == 52
    assert config.mlp_hidden_act == "relu2" and bridge["activation_func"] == {"source": "squared_relu"}
    # the router and its balancing, as the recipe sets them
    assert bridge["moe_router_score_function"] == "sigmoid" and bridge["moe_router_enable_expert_bias"] is True
    assert bridge["moe_router_load_balancing_type"] == "seq_aux_loss"
    assert nano3.AUX_LOSS_COEFF == bridge["moe_aux_loss_coeff"]


def test_full_scale_has_31_6b_parameters_and_3_6b_active_with_embeddings():
    config = nano3.build_config("full", nano3.VOCAB_SIZES["full"])
    assert 31.5e9 < nano3.count_parameters(config) < 31.7e9  # "31.6B total" (arXiv:2512.20848)
    assert 3.5e9 < nano3.active_parameters(config) < 3.7e9  # "3.6B including embeddings"


@pytest.mark.parametrize("scale", ["tiny", "small", "medium"])
def test_dense_counterpart_has_the_active_parameters_of_the_moe_model(scale):
    config = nano3.build_config(scale, nano3.VOCAB_SIZES[scale])
    dense = nano3.dense_counterpart(config)
    assert "moe" not in dense.layers_block_type and dense.layers_block_type.count("mlp") == \
        config.layers_block_type.count("moe")
    routers = config.layers_block_type.count("moe") * config.n_routed_experts * config.hidden_size
    assert nano3.count_parameters(dense) == nano3.active_parameters(config) - routers
    assert nano3.count_parameters(config) > 1.2 * nano3.active_parameters(config)


def test_pattern_symbols_and_router_groups_are_checked_by_name():
    with pytest.raises(NemotronError, match=r"unknown layer symbol.*E \(MoE\)"):
        nano3.build_config("tiny", 512, hybrid_override_pattern="ME*X")
    with pytest.raises(NemotronError, match="n_routed_experts=8 is not divisible by n_group=3"):
        nano3.build_config("tiny", 512, n_group=3)


def _tiny():
    config = nano3.build_config("tiny", 300)
    return config, nano3.build_model(config, seed=0)


def test_recorder_sees_every_router_and_the_loss_trains_the_router():
    config, model = _tiny()
    recorder = nano3.RoutingRecorder(model)
    ids = torch.randint(0, 300, (3, 16), generator=torch.Generator().manual_seed(0))
    with recorder.recording() as routings:
        model(input_ids=ids, use_cache=False)
    assert len(routings) == 2 and routings[0].chosen.shape == (48, 2)
    loads = nano3.expert_loads(routings, moe_layers=2)
    assert loads.shape == (2, 8) and torch.allclose(loads.sum(-1), torch.ones(2))
    loss = nano3.load_balancing_loss(routings, num_sequences=3, top_k=2)
    loss.backward()
    assert recorder.routers[0].weight.grad.abs().sum() > 0
    # outside `recording()` nothing is kept
    model(input_ids=ids, use_cache=False)
    assert len(recorder.routings) == 2


def test_load_balancing_loss_is_one_when_even_and_grows_when_concentrated():
    tokens, experts = 8, 4
    even = Routing(torch.full((tokens, experts), 0.5), torch.tensor([[i % 4, (i + 1) % 4] for i in range(tokens)]))
    assert nano3.load_balancing_loss([even], num_sequences=1, top_k=2).item() == pytest.approx(1.0)
    scores = torch.tensor([[0.9, 0.9, 0.1, 0.1]]).repeat(tokens, 1)
    skewed = Routing(scores, torch.tensor([[0, 1]]).repeat(tokens, 1))
    # f = (1/2, 1/2, 0, 0), P = (0.45, 0.45, 0.05, 0.05) -> E * sum f_i P_i = 4 * 0.45 = 1.8
    assert nano3.load_balancing_loss([skewed], num_sequences=1, top_k=2).item() == pytest.approx(1.8)
    # per sequence: two sequences, each even on its own, stay at 1 per layer; two layers sum
    assert nano3.load_balancing_loss([even, even], num_sequences=2, top_k=2).item() == pytest.approx(2.0)


def test_expert_bias_moves_towards_the_under_loaded_experts_and_is_saved(tmp_path):
    config, model = _tiny()
    recorder = nano3.RoutingRecorder(model)
    loads = torch.tensor([[0.5, 0.2, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025]] * 2)
    nano3.update_expert_bias(recorder, loads, rate=0.01)
    bias = recorder.routers[0].e_score_correction_bias
    assert bias[0].item() == pytest.approx(-0.01) and bias[-1].item() == pytest.approx(0.01)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(nano3.RoutingRecorder(loaded).routers[0].e_score_correction_bias, bias)


def test_the_expert_bias_follows_the_routed_slots_summed_over_the_passes_of_a_step():
    # As Megatron-Core's get_updated_expert_bias: counts summed over micro-batches (and ranks), so a pass
    # that routes more tokens weighs more, and an expert exactly at the mean count is left alone.
    from nemotron.training.moe import ExpertBalance

    _, model = _tiny()
    balance = ExpertBalance(model, top_k=2, aux_loss_coeff=1e-4, bias_update_rate=0.01)
    few = Routing(torch.full((2, 8), 0.5), torch.tensor([[0, 1]] * 2))  # 2 tokens to experts 0 and 1
    many = Routing(torch.full((6, 8), 0.5), torch.tensor([[2, 3]] * 6))  # 6 tokens to experts 2 and 3
    balance.loss([few, few], num_sequences=1)  # one pass: both MoE layers
    balance.loss([many, many], num_sequences=1)
    balance.after_step()
    # 16 slots over 8 experts: a mean of 2. Experts 0 and 1 got 2 (no move; averaging the passes' shares
    # would have lowered them with 2 and 3), 2 and 3 got 6 (lowered), the idle ones are raised.
    bias = balance.recorder.routers[0].e_score_correction_bias
    assert bias.tolist() == pytest.approx([0.0, 0.0, -0.01, -0.01, 0.01, 0.01, 0.01, 0.01])
    assert balance.log()["expert_load"][0] == pytest.approx([0.125, 0.125, 0.375, 0.375, 0, 0, 0, 0])
