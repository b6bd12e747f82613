"""The hand-off to Megatron-Bridge: train our data with NVIDIA's recipe functions on a GPU cluster.

At `--scale tiny` our training steps run their own visible loop. At scale, the same steps hand their work
to the engine the real Nemotron models were trained with, Megatron-Bridge: a step writes a **run folder**
(plan.json, overrides.yaml, torchrun.sh, sbatch.sh) that starts the matching recipe function on our data.

    from nemotron.training.megatron_bridge import MegatronBridgeLaunch, Schedule, launch, preflight, write_run_folder

    settings = MegatronBridgeLaunch(data_root="s3://bucket/prefix", nodes=4, gpus_per_node=8)
    preflight(settings, dry_run)    # first: a missing flag or a missing Megatron-Bridge is one line, before any work
    schedule = Schedule(seq_length=8192, train_iters=100_000, micro_batch_size=1, global_batch_size=768,
                        lr=3e-4, min_lr=3e-5, warmup_iters=2000)
    plan = write_run_folder("pretrain", dataset, "full", schedule, settings, out=Path("runs/.../megatron_bridge"))
    launch(plan, dry_run)           # dry run: the configuration and the commands on stderr, nothing imported

A training step calls `hand_off(kind, config, dataset, steps, seq_length, family=...)`, which does all of
that from its Config. The modules, laptop side first (none imports Megatron-Bridge):

    plan.py        MegatronBridgeLaunch (data_root, nodes, gpus_per_node required), Schedule, LaunchPlan
    recipes.py     FAMILIES (which recipe trains nano2 / nano3), model_shape, the facts and check_overrides
    run_folder.py  write_run_folder: overrides checked against the facts, parallelism, the data root
    scripts.py     torchrun.sh and sbatch.sh
    step.py        preflight, launch, hand_off, DPO_AT_SCALE
    cluster.py     upload, stage-in, train, export_hf_checkpoint: Megatron-Bridge and fsspec, imported lazily
    cli.py         `python -m nemotron.training.megatron_bridge upload|stage-in|train|show RUN_FOLDER`
"""

from nemotron.training.megatron_bridge.cli import main
from nemotron.training.megatron_bridge.cluster import (
    INSTALL_HINT,
    export_hf_checkpoint,
    require_megatron_bridge,
    stage_in,
    train,
    upload,
)
from nemotron.training.megatron_bridge.plan import LaunchPlan, MegatronBridgeLaunch, Schedule, check_settings
from nemotron.training.megatron_bridge.recipes import FACTS_PATH, FAMILIES, check_overrides, facts, model_shape
from nemotron.training.megatron_bridge.run_folder import (
    checkpoint_location,
    parallelism,
    scheduler_overrides,
    write_run_folder,
)
from nemotron.training.megatron_bridge.step import DPO_AT_SCALE, hand_off, launch, preflight

__all__ = [
    "DPO_AT_SCALE", "FACTS_PATH", "FAMILIES", "INSTALL_HINT", "LaunchPlan", "MegatronBridgeLaunch", "Schedule",
    "check_overrides", "check_settings", "checkpoint_location", "export_hf_checkpoint", "facts", "hand_off",
    "launch", "main", "model_shape", "parallelism", "preflight", "require_megatron_bridge", "scheduler_overrides",
    "stage_in", "train", "upload", "write_run_folder",
]
