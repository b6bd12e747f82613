"""nano3 at scale: stage-0 pretraining and stage-1 SFT hand their work to Nemotron 3 Nano's Megatron-Bridge
recipes, with our MoE shape and the recipes' expert parallelism.

Megatron-Bridge cannot be installed on these CPU machines, so these are dry runs: real data made here (a
PretrainDataset from two plays at --scale full with the nano3 chat template, a few SFT problems), run
folders whose overrides are checked against the facts extracted from Megatron-Bridge's source
(`megatron_bridge_facts.json`, never the reference itself), and the one-line refusals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from builders import curate_two_plays_nano3  # tests/ is on sys.path under pytest
from nemotron.errors import NemotronError
from nemotron.recipes.nano3.stage0_pretrain import training
from nemotron.recipes.nano3.stage1_sft import data_curation as sft_curation
from nemotron.recipes.nano3.stage1_sft import training as sft_training
from nemotron.training import megatron_bridge as mb
from nemotron.training.megatron_bridge.recipes import HYBRID_PROVIDER

FACTS = json.loads(mb.FACTS_PATH.read_text())
PRETRAIN = "nemotron_3_nano_pretrain_8gpu_h100_bf16_config"
SFT = "nemotron_3_nano_sft_8gpu_h100_bf16_config"
CLUSTER = {"data_root": "/lustre/nemotron", "nodes": 2, "gpus_per_node": 8, "dry_run": True}
FEW = {"steps": 100, "micro_batch_size": 1, "grad_accum_steps": 4}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """nano2's stage-0 curation of two plays, at --scale full (the corpus is small at every scale)."""
    out = tmp_path_factory.mktemp("runs") / "stage0_pretrain" / "data_curation"
    return curate_two_plays_nano3(tmp_path_factory.mktemp("blend"), out, scale="full")


@pytest.fixture(scope="module")
def stage0(dataset):
    out = Path(dataset.path).parent / "training"
    return training.main(training.Config(dataset_path=dataset.path, scale="full", output_dir=out, **FEW, **CLUSTER))


def overrides_of(run) -> dict:
    return yaml.safe_load((Path(run.run_dir) / "overrides.yaml").read_text())


def test_stage0_dry_run_at_full_writes_the_nano3_recipe_with_its_moe_shape_and_expert_parallelism(stage0):
    assert stage0.type_name() == "megatronbridgerun" and stage0.launched is False
    assert stage0.recipe == f"{FACTS['recipes'][PRETRAIN]['module']}.{PRETRAIN}"
    folder = Path(stage0.run_dir)
    assert {p.name for p in folder.iterdir()} >= {"plan.json", "overrides.yaml", "torchrun.sh", "sbatch.sh"}
    plan = json.loads((folder / "plan.json").read_text())
    assert plan["recipe_module"] == "megatron.bridge.recipes.nemotronh.h100.nemotron_3_nano"
    assert plan["family"] == "nano3" and plan["settings"]["expert_parallel"] == 8
    overrides = overrides_of(stage0)
    mb.check_overrides(overrides, PRETRAIN)  # every key exists on the dataclass it targets

    # At full our shape IS the recipe's: every model field we write that the recipe sets has its value
    # (the MoE fields, tensor parallel 1, expert parallel 8, sequence parallel off, the aux-loss weight).
    recipe = FACTS["model_arguments"][PRETRAIN]["arguments"]
    model = overrides["model"]
    for name in ("num_moe_experts", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_router_topk",
                 "moe_router_topk_scaling_factor", "moe_router_num_groups", "moe_router_group_topk",
                 "hybrid_layer_pattern", "num_layers", "hidden_size", "expert_model_parallel_size",
                 "expert_tensor_parallel_size", "tensor_model_parallel_size", "sequence_parallel",
                 "moe_aux_loss_coeff", "seq_length"):
        assert model[name] == recipe[name], name
    unset = set(model) - set(recipe)
    # not set by the recipe: the provider's defaults (chunk 128) and Megatron's bias rate 1e-3, ours too
    assert unset == {"mamba_chunk_size", "moe_router_bias_update_rate"}
    assert model["mamba_chunk_size"] == 128 and model["moe_router_bias_update_rate"] == 1e-3
    # the global batch: micro 1 x accumulation 4 x 16 data-parallel ranks (TP 1 over 2 x 8 GPUs)
    assert overrides["train"]["global_batch_size"] == 64
    assert overrides["dataset"]["blend_per_split"][0][0][0].startswith("/lustre/nemotron/stage0_pretrain/")
    assert (stage0.checkpoint_location == overrides["checkpoint"]["save"]
            == "/lustre/nemotron/stage0_pretrain/checkpoints")
    assert "#SBATCH --nodes=2" in (folder / "sbatch.sh").read_text()
    assert not any(name == "megatron.bridge" or name.startswith("megatron.bridge.") for name in sys.modules)


@pytest.mark.parametrize("nodes, gpus", [(1, 4), (3, 4)])
def test_a_gpu_count_expert_parallelism_does_not_divide_is_one_line_before_anything_is_written(dataset, tmp_path,
                                                                                               nodes, gpus):
    settings = CLUSTER | {"nodes": nodes, "gpus_per_node": gpus}
    with pytest.raises(NemotronError, match=f"expert parallel 8 does not divide {nodes * gpus} GPUs") as error:
        training.main(training.Config(dataset_path=dataset.path, scale="full", output_dir=tmp_path / "run",
                                      **FEW, **settings))
    assert "\n" not in str(error.value) and "multiple of 8" in str(error.value)
    assert not (tmp_path / "run" / "megatron_bridge").exists()


def test_expert_parallelism_must_divide_the_experts_and_needs_experts():
    settings = mb.MegatronBridgeLaunch(data_root="/data", nodes=2, gpus_per_node=8, expert_parallel=16)
    assert mb.parallelism("nano3", "full", settings) == (1, 16)
    with pytest.raises(NemotronError, match="does not divide the 8 experts per layer of nano3 --scale tiny"):
        mb.parallelism("nano3", "tiny", mb.MegatronBridgeLaunch(data_root="/data", nodes=2, gpus_per_node=8,
                                                                expert_parallel=16))
    with pytest.raises(NemotronError, match="nano2 has no experts"):
        mb.parallelism("nano2", "full", settings)
    assert mb.parallelism("nano2", "full", mb.MegatronBridgeLaunch("/data", 1, 8)) == (2, 1)
    assert mb.parallelism("nano3", "small", mb.MegatronBridgeLaunch("/data", 1, 3)) == (1, 1)  # below full: 1 and 1


def test_the_run_folder_is_deterministic(dataset, tmp_path):
    def folder_bytes():
        run = training.main(training.Config(dataset_path=dataset.path, scale="full", output_dir=tmp_path / "run",
                                            **FEW, **CLUSTER))
        return {p.name: p.read_bytes() for p in sorted(Path(run.run_dir).iterdir())}

    assert folder_bytes() == folder_bytes()


def test_dense_or_model_overrides_with_the_hand_off_are_refused_in_one_line(dataset, tmp_path):
    for extra in ({"dense": True}, {"model_overrides": ("n_routed_experts=16",)}):
        with pytest.raises(NemotronError, match="drop --dense .* and --model-overrides") as error:
            training.main(training.Config(dataset_path=dataset.path, scale="full", output_dir=tmp_path / "run",
                                          **FEW, **CLUSTER, **extra))
        assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()


def test_sft_at_full_fine_tunes_the_stage0_checkpoint_on_our_packed_data(dataset, stage0):
    sft_data = sft_curation.main(sft_curation.Config(
        pretrain_dataset_path=dataset.path, scale="full", num_problems=60,
        output_dir=Path(dataset.path).parents[1] / "stage1_sft" / "data_curation"))
    assert sft_data.vocab_size == dataset.vocab_size and sft_data.pack_size == 4096
    run = sft_training.main(sft_training.Config(dataset_path=sft_data.path, checkpoint_path=stage0.path, scale="full",
                                                output_dir=Path(sft_data.path).parent / "training", **FEW, **CLUSTER))
    assert run.recipe.endswith(SFT) and run.launched is False
    overrides = overrides_of(run)
    # The SFT recipe builds its model through AutoBridge (cast to HybridModelProvider), which the facts
    # cannot follow: the model section is checked against HybridModelProvider, the rest as usual.
    assert "model" not in FACTS["recipes"][SFT]["sections"]
    mb.check_overrides(overrides, SFT, {"model": HYBRID_PROVIDER})
    assert overrides["checkpoint"]["pretrained_checkpoint"] == stage0.checkpoint_location
    assert overrides["checkpoint"]["save"] == "/lustre/nemotron/stage1_sft/checkpoints"
    specs = overrides["dataset"]["offline_packing_specs"]
    assert specs["packed_train_data_path"].startswith("/lustre/nemotron/stage1_sft/data_curation/")
    assert specs["packed_sequence_size"] == overrides["model"]["seq_length"] == 4096
    recipe = FACTS["model_arguments"][PRETRAIN]["arguments"]  # the SFT recipe fine-tunes the same model
    assert all(overrides["model"][name] == recipe[name] for name in
               ("num_moe_experts", "moe_router_topk", "expert_model_parallel_size", "hybrid_layer_pattern"))


def test_sft_refuses_a_stage0_run_of_another_recipe(dataset, tmp_path):
    from nemotron.recipes.nano2.stage0_pretrain import training as nano2_training

    nano2_run = nano2_training.main(nano2_training.Config(dataset_path=dataset.path, scale="full",
                                                          output_dir=tmp_path / "nano2", **FEW, **CLUSTER))
    sft_data = sft_curation.main(sft_curation.Config(pretrain_dataset_path=dataset.path, scale="full", num_problems=60,
                                                     output_dir=tmp_path / "sft_data"))
    with pytest.raises(NemotronError, match="nano3 SFT starts from nano3's stage-0 run") as error:
        sft_training.main(sft_training.Config(dataset_path=sft_data.path, checkpoint_path=nano2_run.path, scale="full",
                                              output_dir=tmp_path / "sft", **FEW, **CLUSTER))
    assert "\n" not in str(error.value)
    assert not (tmp_path / "sft").exists()
