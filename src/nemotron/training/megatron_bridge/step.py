"""What a training step calls at scale: `preflight` once, then `hand_off` instead of its own loop.

`hand_off` turns the step's Config into a `Schedule` and cluster settings, writes the run folder
(`run_folder.write_run_folder`), starts it (`launch`: torchrun on one node, sbatch on more; with
`--dry-run` it only prints the plan) and saves a `MegatronBridgeRun` artifact in the step's output folder.
Stage 2 (DPO) does not go through Megatron-Bridge: see `DPO_AT_SCALE`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from nemotron.errors import NemotronError
from nemotron.training.megatron_bridge.cluster import require_megatron_bridge
from nemotron.training.megatron_bridge.plan import LaunchPlan, MegatronBridgeLaunch, Schedule, check_settings
from nemotron.training.megatron_bridge.run_folder import parallelism, write_run_folder

DPO_AT_SCALE = (
    "Stage 2 (DPO) at scale runs on NeMo-RL (its DPO algorithm with the Megatron or DTensor backend, GPU "
    "only, not installable here): it needs the stage-1 model as a Hugging Face folder "
    "(export_hf_checkpoint), our preference pairs as JSONL (prompt, chosen, rejected) and the same "
    "nodes x GPUs; our loop runs it at tiny scale."
)


def preflight(settings: MegatronBridgeLaunch, dry_run: bool) -> None:
    """Call once before any stage runs: the flags are complete and, unless dry-running, Megatron-Bridge
    imports; so `--scale full` without it fails in one line before doing any work."""
    check_settings(settings)
    if not dry_run:
        require_megatron_bridge()


def launch(plan: LaunchPlan, dry_run: bool) -> None:
    """Dry run: print the configuration and the commands (stderr). Otherwise start it: torchrun on this
    node when the plan has one node, sbatch otherwise. Megatron-Bridge is checked before anything runs."""
    print(plan.describe(), file=sys.stderr)
    if dry_run:
        return
    require_megatron_bridge()
    nodes = plan.settings["nodes"]
    command = (["bash", "torchrun.sh"] if nodes == 1 else ["sbatch", "sbatch.sh"])
    if nodes > 1 and shutil.which("sbatch") is None:
        raise NemotronError(f"{nodes} nodes need Slurm but sbatch is not on PATH; run this on the cluster's "
                            f"login node, or start each node yourself (see {plan.run_folder}/torchrun.sh)")
    subprocess.run(command, cwd=plan.run_folder, check=True)


def hand_off(kind: Literal["pretrain", "sft"], config: Any, dataset: Any, steps: int, seq_length: int,
             init_checkpoint: str | None = None, family: str = "nano2",
             provider_overrides: dict[str, Any] | None = None) -> Any:
    """What a training step does instead of its loop at scale: write the run folder, launch it (or, with
    `--dry-run`, print it), and save a `MegatronBridgeRun` artifact in the step's output folder.

    `config` is the step's Config (`HandOffSettings`: the cluster flags, `OptimizerSettings`: lr,
    min_lr_ratio, warmup_steps, weight_decay, grad_clip, schedule, decay_fraction, and micro_batch_size,
    grad_accum_steps);
    the global batch is the step's micro batch x accumulation x the data-parallel ranks of the cluster.
    `family` picks the recipes (FAMILIES) and the model shape; `provider_overrides` adds model-provider
    fields in Megatron's names (see `write_run_folder`).
    """
    from nemotron.training.artifacts import MegatronBridgeRun
    from nemotron.training.optim import wsd_decay_steps

    settings = MegatronBridgeLaunch(data_root=config.data_root, nodes=config.nodes,
                                    gpus_per_node=config.gpus_per_node, container_image=config.container_image)
    preflight(settings, config.dry_run)
    tp, ep = parallelism(family, config.scale, settings)
    data_parallel = max(1, settings.nodes * settings.gpus_per_node // tp)
    schedule = Schedule(
        seq_length=seq_length, train_iters=steps, micro_batch_size=config.micro_batch_size,
        global_batch_size=config.micro_batch_size * config.grad_accum_steps * data_parallel, lr=config.lr,
        min_lr=config.lr * config.min_lr_ratio,
        warmup_iters=steps // 10 if config.warmup_steps is None else config.warmup_steps,
        weight_decay=config.weight_decay, grad_clip=config.grad_clip, eval_interval=config.eval_every,
        save_interval=config.checkpoint_every, seed=config.seed,
        wsd_decay_iters=wsd_decay_steps(config.decay_fraction, steps) if config.schedule == "wsd" else None,
    )
    out = Path(config.output_dir)
    plan = write_run_folder(kind, dataset, config.scale, schedule, settings, out / "megatron_bridge", init_checkpoint,
                            family, provider_overrides)
    launch(plan, config.dry_run)
    return MegatronBridgeRun(
        path=out, config=asdict(config), scale=config.scale, seed=config.seed, inputs=[dataset],
        run_dir=out / "megatron_bridge", recipe=f"{plan.recipe_module}.{plan.recipe_function}",
        checkpoint_location=plan.overrides["checkpoint"]["save"], launched=not config.dry_run,
        metrics={"train_iters": steps, "global_batch_size": schedule.global_batch_size,
                 "tensor_parallel": tp, "expert_parallel": ep, "gpus": settings.nodes * settings.gpus_per_node},
    ).save()
