"""The nano2 recipe at scale: data prepared here, the models trained on a GPU cluster by Megatron-Bridge.

    python -m nemotron.recipes.nano2 --scale full --dry-run --data-root s3://bucket/prefix --nodes 4 --gpus-per-node 8
    python -m nemotron.recipes.nano2 --scale full --data-root /lustre/me/nano2 --nodes 4 --gpus-per-node 8

At `--scale full` (or with `--engine megatron-bridge` at any scale) the recipe runs the same data steps
as at tiny, and its training steps hand their work to Megatron-Bridge instead of training in-process:

  stage0_pretrain   data_curation (here) -> training: a Megatron-Bridge pretraining run folder
  stage1_sft        data_curation (here, with the stage-0 tokenizer) -> training: an SFT run folder
                    that starts from stage 0's Megatron checkpoint
  stage2_alignment  DPO at scale runs on NeMo-RL, not here: one line says what it needs

Each run folder (`<stage>/training/megatron_bridge/`) holds plan.json, overrides.yaml (keys checked
against the Megatron-Bridge reference), torchrun.sh and sbatch.sh; `--dry-run` prints them and starts
nothing. Without `--dry-run`, Megatron-Bridge must import: where it does not, the recipe stops in one
line before any work. The evaluation steps run unchanged on the Hugging Face folder exported from a
returned checkpoint (`nemotron.training.megatron_bridge.export_hf_checkpoint`).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

from nemotron.recipes.nano2.artifacts import PretrainDataset, SFTDataset
from nemotron.recipes.nano2.stage0_pretrain import data_curation as pretrain_data
from nemotron.recipes.nano2.stage0_pretrain import training as pretraining
from nemotron.recipes.nano2.stage1_sft import data_curation as sft_data
from nemotron.recipes.nano2.stage1_sft import training as sft_training
from nemotron.recipes.orchestration import run_step
from nemotron.training.artifacts import MegatronBridgeRun
from nemotron.training.megatron_bridge import DPO_AT_SCALE, MegatronBridgeLaunch, preflight


def main(config: Any) -> dict:
    """`config` is the recipe's Config (`nemotron.recipes.nano2.__main__`)."""
    settings = MegatronBridgeLaunch(data_root=config.data_root, nodes=config.nodes,
                                    gpus_per_node=config.gpus_per_node, container_image=config.container_image)
    preflight(settings, config.dry_run)  # the flags, and Megatron-Bridge unless dry-running: before any work
    cluster = dict(engine="megatron-bridge", dry_run=config.dry_run, data_root=config.data_root,
                   nodes=config.nodes, gpus_per_node=config.gpus_per_node, container_image=config.container_image)
    shared = dict(scale=config.scale, seed=config.seed)
    stage0, stage1, force = config.output_dir / "stage0_pretrain", config.output_dir / "stage1_sft", config.force

    # --- stage 0: the pretraining data here, the pretraining on the cluster ---
    dataset = run_step(pretrain_data.main,
                       replace(config.stage0.data_curation, output_dir=stage0 / "data_curation", **shared),
                       PretrainDataset, force=force)
    pretrain = run_step(pretraining.main,
                        replace(config.stage0.training, dataset_path=dataset.path, output_dir=stage0 / "training",
                                **shared, **cluster),
                        MegatronBridgeRun, inputs=[dataset], force=force)

    # --- stage 1: SFT data with the stage-0 tokenizer, SFT from stage 0's Megatron checkpoint ---
    chats = run_step(sft_data.main,
                     replace(config.stage1.data_curation, pretrain_dataset_path=dataset.path, checkpoint_path=None,
                             output_dir=stage1 / "data_curation", **shared),
                     SFTDataset, inputs=[dataset], force=force)
    sft = run_step(sft_training.main,
                   replace(config.stage1.training, dataset_path=chats.path, checkpoint_path=pretrain.path,
                           output_dir=stage1 / "training", **shared, **cluster),
                   MegatronBridgeRun, inputs=[chats, pretrain], force=force)

    # --- stage 2 and the evaluations: what happens once the checkpoints come back ---
    print(f"stage2_alignment: {DPO_AT_SCALE}", file=sys.stderr)
    print("evaluation: when a run's checkpoint comes back, turn it into a Hugging Face folder with "
          "nemotron.training.megatron_bridge.export_hf_checkpoint and run the stage's evaluation step on it",
          file=sys.stderr)
    return {"pretraindataset": dataset, "stage0_run": pretrain, "sftdataset": chats, "stage1_run": sft}
