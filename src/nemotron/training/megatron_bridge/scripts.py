"""The shell scripts of a run folder: `torchrun.sh` (one node) and `sbatch.sh` (Slurm, pyxis when a
container is given). Both stage S3 files into the run folder's cache/ first (when the plan has any), then
run `python -m nemotron.training.megatron_bridge train .` under torchrun on every GPU.
"""

from __future__ import annotations

import shlex

from nemotron.training.megatron_bridge.plan import LaunchPlan, MegatronBridgeLaunch


def torchrun_script(plan: LaunchPlan, settings: MegatronBridgeLaunch) -> str:
    stage_in = "python -m nemotron.training.megatron_bridge stage-in .\n" if plan.stage_in else ""
    return (
        "#!/usr/bin/env bash\n"
        f"# Megatron-Bridge {plan.kind} on ONE node ({settings.gpus_per_node} GPUs): {plan.recipe_function}\n"
        "# Written by nemotron.training.megatron_bridge; see plan.json. Upload the data first (plan.json 'upload').\n"
        "set -euo pipefail\n"
        'cd "$(dirname "$0")"\n'
        f"{stage_in}"
        f"torchrun --nnodes 1 --nproc-per-node {settings.gpus_per_node} "
        "-m nemotron.training.megatron_bridge train .\n"
    )


def sbatch_script(plan: LaunchPlan, settings: MegatronBridgeLaunch) -> str:
    optional = [f"#SBATCH --{flag}={value}" for flag, value in
                [("partition", settings.partition), ("account", settings.account), ("time", settings.time_limit)]
                if value]
    container = (f'CONTAINER=(--container-image={shlex.quote(settings.container_image)} '
                 '--container-mounts="$PWD:$PWD" --container-workdir="$PWD")\n'
                 if settings.container_image else "CONTAINER=()  # no --container-image: the nodes' own Python\n")
    stage_in = ('srun "${CONTAINER[@]}" --ntasks-per-node=1 python -m nemotron.training.megatron_bridge stage-in .\n'
                if plan.stage_in else "")
    return "\n".join([
        "#!/usr/bin/env bash",
        f"#SBATCH --job-name=nemotron-{plan.kind}-{plan.scale}",
        f"#SBATCH --nodes={settings.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={settings.gpus_per_node}",
        "#SBATCH --exclusive",
        *optional,
        f"# Megatron-Bridge {plan.kind}: {plan.recipe_function}; submit from this folder (sbatch sbatch.sh).",
        "set -euo pipefail",
        'cd "${SLURM_SUBMIT_DIR}"',
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        container.rstrip("\n"),
        stage_in.rstrip("\n"),
        f'srun "${{CONTAINER[@]}}" torchrun --nnodes {settings.nodes} --nproc-per-node {settings.gpus_per_node} '
        '--rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:29500" --rdzv-id "$SLURM_JOB_ID" '
        "-m nemotron.training.megatron_bridge train .",
        "",
    ]).replace("\n\n", "\n")
