"""The hand-off to Megatron-Bridge: train our data with NVIDIA's recipe functions on a GPU cluster.

At `--scale tiny` our training steps run their own visible loop. At scale, the same steps hand their
work to the engine the real Nemotron models were trained with, Megatron-Bridge (NVIDIA-NeMo/Megatron-
Bridge): instead of training in-process, a step writes a **run folder** that starts the matching
Megatron-Bridge recipe function on our data.

    from nemotron.training.megatron_bridge import MegatronBridgeLaunch, Schedule, write_run_folder, launch

    settings = MegatronBridgeLaunch(data_root="s3://bucket/prefix", nodes=4, gpus_per_node=8)
    preflight(settings, dry_run)     # once, first: missing flags or Megatron-Bridge are one line, before any work
    schedule = Schedule(seq_length=8192, train_iters=100_000, micro_batch_size=1, global_batch_size=768,
                        lr=3e-4, min_lr=3e-5, warmup_iters=2000)
    plan = write_run_folder("pretrain", dataset, "full", schedule, settings, out=Path("runs/.../megatron_bridge"))
    launch(plan, dry_run)           # dry run: the configuration and the commands on stderr, nothing imported

`kind` is "pretrain" (`dataset` is a PretrainDataset: `tokenizer_dir`, `train/valid/test_prefixes`,
`vocab_size`, `path`) or "sft" (an SFTDataset: `tokenizer_dir`, `train_packed`, `valid_packed`,
`pack_size`, `vocab_size`, `path`; plus `init_checkpoint`, the Megatron checkpoint of stage 0).
The run folder holds:

    plan.json       what runs: recipe function, the files to upload (local -> data root), the commands
    overrides.yaml  OmegaConf overrides for the recipe's ConfigContainer; every key exists on the
                    dataclass it targets (checked against megatron_bridge_facts.json before writing)
    torchrun.sh     one node: `bash torchrun.sh` (gpus_per_node processes)
    sbatch.sh       Slurm: `sbatch sbatch.sh` (nodes x gpus_per_node; pyxis container when given)

Then, on the cluster: `python -m nemotron.training.megatron_bridge upload RUN_FOLDER` copies our
artifacts under `--data-root` (fsspec, so `s3://bucket/prefix` works), and the scripts run
`python -m nemotron.training.megatron_bridge train RUN_FOLDER` under torchrun, which builds the
recipe's ConfigContainer, merges overrides.yaml into it with Megatron-Bridge's own OmegaConf helpers
and calls its `pretrain` / `finetune`. Checkpoints go to `<data root>/<stage>/checkpoints`
(`checkpoint_location`); `export_hf_checkpoint` turns the result into the same
Hugging Face folder the tiny path writes (Megatron-Bridge's AutoBridge export).

The recipe functions, per model family (`FAMILIES` in `nemotron.training.megatron_recipes`, with the
facts every override is checked against; from the reference commit named in megatron_bridge_facts.json):

    nano2  megatron.bridge.recipes.nemotronh.h100.nemotron_nano_v2
           nemotron_nano_9b_v2_pretrain_2gpu_h100_bf16_config, nemotron_nano_9b_v2_sft_2gpu_h100_bf16_config
           (upstream also exports them as nemotron_nano_9b_v2_pretrain_config / ..._sft_config); TP 2
    nano3  megatron.bridge.recipes.nemotronh.h100.nemotron_3_nano
           nemotron_3_nano_pretrain_8gpu_h100_bf16_config, nemotron_3_nano_sft_8gpu_h100_bf16_config;
           TP 1, expert parallel 8, sequence parallel off

The override file always sets our model shape (`nemotron.models.<family>.SCALES`, in Megatron's names:
`megatron_recipes.model_shape`); at full scale it equals the recipe's. Parallelism is the
recipe's at full and 1 below it (`parallelism`, which also checks it against the GPU count).
`write_run_folder(..., family="nano3")` and `hand_off(..., family="nano3")` pick the family.

Required, as named settings (missing ones are one NemotronError line, never a placeholder):
`data_root` (an absolute path on the cluster's shared filesystem, or `s3://bucket/prefix`), `nodes`,
`gpus_per_node`. Optional: `container_image` (sbatch runs the job in it through pyxis/enroot; without
it, on the nodes' own Python environment), `partition`, `account`, `time_limit`, `tensor_parallel`,
`expert_parallel`.

Object stores: Megatron-Core reads bin/idx straight from `s3://` (index files cached under
`cache/idx`); the tokenizer and the packed Parquet are copied to `cache/` in the run folder before
training (`stage-in`, the first command of both scripts). `gs://` and `hf://` are refused: Megatron-
Core's object-storage reader supports S3 only.

Nothing here imports Megatron-Bridge until `train`, `launch(dry_run=False)` or `export_hf_checkpoint`;
where it is missing that is one line: what to install, on a CUDA machine (`pip install
'nemotron[megatron]'`, which pins the Megatron-Bridge release matching the reference).

Stage 2 (DPO) does not go through Megatron-Bridge: see `DPO_AT_SCALE`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from nemotron import atomic
from nemotron.artifact import atomic_write_text
from nemotron.errors import NemotronError
from nemotron.training.megatron_recipes import FACTS_PATH, FAMILIES, check_overrides, facts, model_shape

INSTALL_HINT = (
    "Megatron-Bridge is not installed; on a CUDA machine with Transformer Engine run "
    "`pip install 'nemotron[megatron]'` (megatron-bridge==0.6.0), or use the NeMo container, "
    "then re-run; add --dry-run to only print the plan"
)
DPO_AT_SCALE = (
    "Stage 2 (DPO) at scale runs on NeMo-RL (its DPO algorithm with the Megatron or DTensor backend, GPU "
    "only, not installable here): it needs the stage-1 model as a Hugging Face folder "
    "(export_hf_checkpoint), our preference pairs as JSONL (prompt, chosen, rejected) and the same "
    "nodes x GPUs; our loop runs it at tiny scale."
)


# ---------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MegatronBridgeLaunch:
    """Where and on what the run happens: everything a laptop cannot know."""

    data_root: str | None = None
    """Where the cluster reads our data: an absolute shared-filesystem path or s3://bucket/prefix."""
    nodes: int | None = None
    """Number of nodes (sbatch --nodes)."""
    gpus_per_node: int | None = None
    """GPUs per node (torchrun --nproc-per-node, sbatch --gpus-per-node)."""
    container_image: str | None = None
    """Container for sbatch (pyxis --container-image); none: the nodes' own Python environment."""
    partition: str | None = None
    """Slurm partition (#SBATCH --partition), when the cluster needs one."""
    account: str | None = None
    """Slurm account (#SBATCH --account), when the cluster needs one."""
    time_limit: str | None = None
    """Slurm time limit such as 04:00:00 (#SBATCH --time)."""
    tensor_parallel: int | None = None
    """Tensor-parallel size; default the recipe's at full scale (nano2 2, nano3 1), 1 for the smaller models."""
    expert_parallel: int | None = None
    """Expert-parallel size (MoE families); default the recipe's at full scale (nano3 8), 1 for the smaller models."""


@dataclass(frozen=True)
class Schedule:
    """The step's training settings, in Megatron's terms (iterations = optimizer steps)."""

    seq_length: int
    train_iters: int
    micro_batch_size: int
    global_batch_size: int
    lr: float
    min_lr: float
    warmup_iters: int
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    eval_interval: int = 500
    eval_iters: int = 32
    save_interval: int = 1000
    seed: int = 0
    wsd_decay_iters: int | None = None
    """Warmup-stable-decay: the rate holds at `lr` and decays linearly to `min_lr` over these last
    iterations (our `--schedule wsd`); None: cosine decay over the whole run (`--schedule cosine`)."""


@dataclass
class LaunchPlan:
    """What `write_run_folder` wrote and what `launch` runs (also saved as plan.json)."""

    kind: Literal["pretrain", "sft"]
    scale: str
    run_folder: str
    recipe_module: str
    recipe_function: str
    megatron_bridge_commit: str
    overrides: dict[str, Any]
    upload: list[list[str]]  # [local file, remote path]: copy before launching (`upload` command)
    stage_in: list[list[str]]  # [remote path, run-folder path]: copied on the cluster before training
    commands: dict[str, str]  # how to start it: torchrun (one node) and sbatch
    settings: dict[str, Any] = field(default_factory=dict)
    family: str = "nano2"  # the model family (FAMILIES); export_hf_checkpoint builds its config

    def describe(self) -> str:
        """The configuration and the commands, for a human (stderr)."""
        lines = [
            f"Megatron-Bridge {self.kind} ({self.scale}): {self.recipe_module}.{self.recipe_function}() "
            f"at Megatron-Bridge {self.megatron_bridge_commit[:12]}",
            f"run folder: {self.run_folder}",
            "overrides.yaml:",
            *("  " + line for line in yaml.safe_dump(self.overrides, sort_keys=True).splitlines()),
            f"upload ({len(self.upload)} files to the data root): "
            f"python -m nemotron.training.megatron_bridge upload {shlex.quote(self.run_folder)}",
            *(f"  {local} -> {remote}" for local, remote in self.upload[:6]),
            *([f"  ... {len(self.upload) - 6} more in plan.json"] if len(self.upload) > 6 else []),
            f"one node:  {self.commands['torchrun']}",
            f"Slurm:     {self.commands['sbatch']}",
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# The run folder
# ---------------------------------------------------------------------------------------------------


def check_settings(settings: MegatronBridgeLaunch) -> None:
    """Every missing required flag in one line, then the values that cannot work."""
    missing = [flag for flag, value in [("--data-root", settings.data_root), ("--nodes", settings.nodes),
                                        ("--gpus-per-node", settings.gpus_per_node)] if value is None]
    if missing:
        raise NemotronError(
            f"the Megatron-Bridge hand-off needs {', '.join(missing)}: the data root the cluster reads "
            "(an absolute shared path or s3://bucket/prefix), the number of nodes and GPUs per node"
        )
    root = settings.data_root
    if root.startswith(("gs://", "hf://", "gcs://")):
        raise NemotronError(f"--data-root {root}: Megatron-Core reads bin/idx from a filesystem or s3:// only; "
                            "use an absolute shared path or s3://bucket/prefix")
    if not (root.startswith("s3://") or root.startswith("/")):
        raise NemotronError(f"--data-root {root}: give an absolute path on the cluster's shared filesystem "
                            "(e.g. /lustre/team/nemotron) or s3://bucket/prefix")
    if settings.nodes < 1 or settings.gpus_per_node < 1:
        raise NemotronError(f"--nodes {settings.nodes} --gpus-per-node {settings.gpus_per_node}: both must be >= 1")


def checkpoint_location(settings: MegatronBridgeLaunch, stage: str, run_folder: Path) -> str:
    """Where a stage's Megatron checkpoints go: `<data root>/<stage>/checkpoints` on a shared filesystem;
    with an S3 data root (Megatron checkpoints need a filesystem), `checkpoints/` in the run folder, which
    must then sit on the cluster's shared filesystem. SFT's `init_checkpoint` is stage 0's location."""
    if settings.data_root and settings.data_root.startswith("/"):
        return f"{settings.data_root.rstrip('/')}/{stage}/checkpoints"
    return f"{Path(run_folder).resolve()}/checkpoints"


def parallelism(family: str, scale: str, settings: MegatronBridgeLaunch) -> tuple[int, int]:
    """(tensor parallel, expert parallel) for a run: the recipe's at full scale (the published model needs
    them to fit), 1 and 1 below it (those models fit one GPU), unless the settings say otherwise; checked
    against the GPUs, one line when they do not fit together."""
    if family not in FAMILIES:
        raise NemotronError(f"unknown model family {family!r}; use one of {', '.join(FAMILIES)}")
    recipes = FAMILIES[family]
    full = scale == "full"
    tp = settings.tensor_parallel or (recipes.tensor_parallel if full else 1)
    ep = settings.expert_parallel or (recipes.expert_parallel if full else 1)
    world = settings.nodes * settings.gpus_per_node
    if world % tp:
        raise NemotronError(f"--tensor-parallel {tp} does not divide {world} GPUs (--nodes x --gpus-per-node)")
    if ep > 1 and not recipes.moe:
        raise NemotronError(f"expert parallel {ep}: {family} has no experts; leave expert_parallel unset")
    # Megatron-Core lays the experts out on a grid of their own: expert parallel x expert tensor parallel
    # (1 in the recipes) x pipeline (1) must divide the world, and each GPU holds experts / EP experts.
    if world % ep:
        raise NemotronError(f"expert parallel {ep} does not divide {world} GPUs (--nodes {settings.nodes} x "
                            f"--gpus-per-node {settings.gpus_per_node}): {family} --scale {scale} spreads each MoE "
                            f"layer's experts over {ep} GPUs; use a multiple of {ep} GPUs")
    if recipes.moe:
        experts = model_shape(family, scale)["num_moe_experts"]
        if experts % ep:
            raise NemotronError(f"expert parallel {ep} does not divide the {experts} experts per layer of {family} "
                                f"--scale {scale}; use a divisor of {experts}")
    return tp, ep


def write_run_folder(kind: Literal["pretrain", "sft"], dataset: Any, scale: str, schedule: Schedule,
                     settings: MegatronBridgeLaunch, out: Path, init_checkpoint: str | None = None,
                     family: str = "nano2", model: dict[str, Any] | None = None) -> LaunchPlan:
    """Write plan.json, overrides.yaml, torchrun.sh and sbatch.sh into `out` (atomically, each file), for
    the recipe of `family` (FAMILIES: nano2 | nano3) and `kind`. `model`: more model-provider fields in
    Megatron's names (a step's own settings, e.g. nano3's moe_aux_loss_coeff), checked like the rest."""
    if kind not in ("pretrain", "sft"):
        raise NemotronError(f"unknown Megatron-Bridge run kind {kind!r}; use 'pretrain' or 'sft'")
    check_settings(settings)
    tp, ep = parallelism(family, scale, settings)
    recipes = FAMILIES[family]
    recipe = recipes.recipes[kind]
    if recipe not in facts()["recipes"]:
        raise NemotronError(f"recipe {recipe} is not in {FACTS_PATH.name}; re-run scripts/extract_megatron_bridge_facts.py")
    world = settings.nodes * settings.gpus_per_node
    if schedule.global_batch_size % (schedule.micro_batch_size * (world // tp)):
        raise NemotronError(
            f"global batch {schedule.global_batch_size} is not a multiple of micro batch {schedule.micro_batch_size} "
            f"x {world // tp} data-parallel ranks; change the batch sizes or the number of GPUs")

    out = Path(out).resolve()
    stage = Path(dataset.path).parent.name  # stage0_pretrain / stage1_sft: keeps stages apart on the root
    data = _DataRoot(settings.data_root, stage, Path(dataset.path))
    overrides = _common_overrides(family, schedule, scale, tp, ep, dataset.vocab_size)
    overrides["model"].update(model or {})
    overrides["checkpoint"].update(save=checkpoint_location(settings, stage, out),
                                   load=checkpoint_location(settings, stage, out))
    overrides["tokenizer"].update(tokenizer_type="HuggingFaceTokenizer",
                                  tokenizer_model=data.local(dataset.tokenizer_dir, folder=True))
    if kind == "pretrain":
        splits = [dataset.train_prefixes, dataset.valid_prefixes, dataset.test_prefixes]
        # blend_per_split: one (prefixes, weights) per split, train/valid/test; weights None = by size
        overrides["dataset"] = {
            "blend": None, "split": None, "seq_length": schedule.seq_length, "random_seed": schedule.seed,
            "blend_per_split": [[[data.prefix(p) for p in prefixes], None] if prefixes else None
                                for prefixes in splits],
        }
        if data.is_object_store:
            overrides["dataset"]["object_storage_cache_path"] = "cache/idx"
    else:
        if init_checkpoint is None:
            raise NemotronError("SFT on Megatron-Bridge starts from the stage-0 Megatron checkpoint: pass "
                                "init_checkpoint=checkpoint_location(settings, 'stage0_pretrain', stage0_run_folder)")
        overrides["dataset"] = {
            "hf_dataset": None, "hf_validation_proportion": None, "dataset_root": data.root_for_stage(),
            "seq_length": dataset.pack_size, "seed": schedule.seed, "do_validation": True, "do_test": False,
            "enable_offline_packing": True,
            "offline_packing_specs": {"packed_sequence_size": dataset.pack_size,
                                      "packed_train_data_path": data.local(dataset.train_packed),
                                      "packed_val_data_path": data.local(dataset.valid_packed)},
        }
        overrides["tokenizer"]["hf_tokenizer_kwargs"] = None  # the recipe's eos "<SPECIAL_12>" is not ours
        overrides["model"]["seq_length"] = dataset.pack_size
        overrides["checkpoint"]["pretrained_checkpoint"] = init_checkpoint
    check_overrides(overrides, recipe, {"model": recipes.sft_model_class} if recipes.sft_model_class else None)

    commands = {"torchrun": f"bash {shlex.quote(str(out / 'torchrun.sh'))}",
                "sbatch": f"cd {shlex.quote(str(out))} && sbatch sbatch.sh"}
    plan = LaunchPlan(kind=kind, scale=scale, run_folder=str(out), recipe_module=recipes.recipe_module,
                      recipe_function=recipe, megatron_bridge_commit=facts()["megatron_bridge_commit"],
                      overrides=overrides, upload=data.upload, stage_in=data.stage_in, commands=commands,
                      settings=asdict(settings) | {"tensor_parallel": tp, "expert_parallel": ep}, family=family)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "overrides.yaml", yaml.safe_dump(overrides, sort_keys=True))
    atomic_write_text(out / "torchrun.sh", _torchrun_script(plan, settings))
    atomic_write_text(out / "sbatch.sh", _sbatch_script(plan, settings))
    atomic_write_text(out / "plan.json", json.dumps(asdict(plan), indent=2, sort_keys=True) + "\n")
    for script in ("torchrun.sh", "sbatch.sh"):
        (out / script).chmod(0o755)
    return plan


def scheduler_overrides(schedule: Schedule) -> dict[str, Any]:
    """Our schedule in Megatron-Core's terms: warmup, then cosine decay to min_lr over the whole run, or
    (WSD) the peak rate until the last `wsd_decay_iters`, then a linear decay to min_lr, as
    `nemotron.training.optim.WarmupStableDecay` does (Megatron's `lr_wsd_decay_style: linear` is
    min_lr + (1 - progress) x (lr - min_lr), the same line)."""
    scheduler = {"lr_warmup_iters": schedule.warmup_iters, "lr_decay_iters": schedule.train_iters}
    if schedule.wsd_decay_iters is None:
        return scheduler | {"lr_decay_style": "cosine"}
    return scheduler | {"lr_decay_style": "WSD", "lr_wsd_decay_style": "linear",
                        "lr_wsd_decay_iters": schedule.wsd_decay_iters}


def _common_overrides(family: str, schedule: Schedule, scale: str, tp: int, ep: int,
                      vocab_size: int) -> dict[str, Any]:
    # The shape is written at every scale, the full one too, where it equals the recipe's (tested), so
    # overrides.yaml alone says what model trains.
    model = {**model_shape(family, scale), "seq_length": schedule.seq_length,
             "tensor_model_parallel_size": tp, "sequence_parallel": tp > 1}
    if FAMILIES[family].moe:
        model |= {"expert_model_parallel_size": ep, "expert_tensor_parallel_size": 1}
    return {
        "model": model,
        "train": {"train_iters": schedule.train_iters, "micro_batch_size": schedule.micro_batch_size,
                  "global_batch_size": schedule.global_batch_size},
        "validation": {"eval_interval": schedule.eval_interval, "eval_iters": schedule.eval_iters},
        "optimizer": {"lr": schedule.lr, "min_lr": schedule.min_lr, "weight_decay": schedule.weight_decay,
                      "clip_grad": schedule.grad_clip, "adam_beta1": schedule.adam_beta1,
                      "adam_beta2": schedule.adam_beta2},
        "scheduler": scheduler_overrides(schedule),
        "checkpoint": {"save_interval": schedule.save_interval},
        "rng": {"seed": schedule.seed},
        "tokenizer": {"vocab_size": vocab_size},
    }


class _DataRoot:
    """Our local artifact files -> their place under the data root (and, for S3, the run-folder cache)."""

    def __init__(self, root: str, stage: str, artifact_dir: Path) -> None:
        self.root, self.stage, self.artifact_dir = root.rstrip("/"), stage, artifact_dir.resolve()
        self.is_object_store = root.startswith("s3://")
        self.upload: list[list[str]] = []
        self.stage_in: list[list[str]] = []

    def root_for_stage(self) -> str:
        return f"cache/{self.stage}" if self.is_object_store else f"{self.root}/{self.stage}"

    def remote(self, path: Path | str) -> str:
        path = Path(path).resolve()
        relative = path.relative_to(self.artifact_dir) if path.is_relative_to(self.artifact_dir) else path.name
        return f"{self.root}/{self.stage}/{self.artifact_dir.name}/{relative}"

    def _add(self, local: Path, remote: str) -> None:
        if [str(local), remote] not in self.upload:
            self.upload.append([str(local), remote])

    def prefix(self, prefix: Path | str) -> str:
        """A bin/idx prefix: Megatron-Core reads it in place, on a filesystem or on S3."""
        remote = self.remote(prefix)
        for suffix in (".bin", ".idx"):
            self._add(Path(f"{prefix}{suffix}").resolve(), remote + suffix)
        return remote

    def local(self, path: Path | str, folder: bool = False) -> str:
        """A file or folder the trainer opens with ordinary file I/O: staged into cache/ from S3."""
        path = Path(path).resolve()
        remote = self.remote(path)
        files = ([(file, f"{remote}/{file.relative_to(path).as_posix()}")
                  for file in sorted(p for p in path.rglob("*") if p.is_file())] if folder else [(path, remote)])
        for file, remote_file in files:
            self._add(file, remote_file)
            if self.is_object_store:
                self.stage_in.append([remote_file, self._cached(remote_file)])
        return self._cached(remote) if self.is_object_store else remote

    def _cached(self, remote: str) -> str:
        return "cache/" + remote.removeprefix(self.root + "/")


def _torchrun_script(plan: LaunchPlan, settings: MegatronBridgeLaunch) -> str:
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


def _sbatch_script(plan: LaunchPlan, settings: MegatronBridgeLaunch) -> str:
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


# ---------------------------------------------------------------------------------------------------
# Launch, train, export: the only places that import Megatron-Bridge
# ---------------------------------------------------------------------------------------------------


def preflight(settings: MegatronBridgeLaunch, dry_run: bool) -> None:
    """Call once before any stage runs: the flags are complete and, unless dry-running, Megatron-Bridge
    imports; so `--scale full` without it fails in one line before doing any work."""
    check_settings(settings)
    if not dry_run:
        require_megatron_bridge()


def require_megatron_bridge() -> None:
    """Import Megatron-Bridge or fail in one line saying what to install."""
    try:
        import megatron.bridge  # noqa: F401
    except ImportError as error:
        raise NemotronError(f"{INSTALL_HINT} ({error})") from None


def launch(plan: LaunchPlan, dry_run: bool) -> None:
    """Dry run: print the configuration and the commands (stderr). Otherwise start it: torchrun on this
    node when the plan has one node, sbatch otherwise. Megatron-Bridge is checked before anything runs."""
    print(plan.describe(), file=sys.stderr)
    if dry_run:
        return
    require_megatron_bridge()
    import subprocess

    nodes = plan.settings["nodes"]
    command = (["bash", "torchrun.sh"] if nodes == 1 else ["sbatch", "sbatch.sh"])
    if nodes > 1 and shutil.which("sbatch") is None:
        raise NemotronError(f"{nodes} nodes need Slurm but sbatch is not on PATH; run this on the cluster's "
                            f"login node, or start each node yourself (see {plan.run_folder}/torchrun.sh)")
    subprocess.run(command, cwd=plan.run_folder, check=True)


def hand_off(kind: Literal["pretrain", "sft"], config: Any, dataset: Any, steps: int, seq_length: int,
             init_checkpoint: str | None = None, family: str = "nano2", model: dict[str, Any] | None = None) -> Any:
    """What a training step does instead of its loop at scale: write the run folder, launch it (or, with
    `--dry-run`, print it), and save a `MegatronBridgeRun` artifact in the step's output folder.

    `config` is the step's Config (`TrainingSettings` fields, schedule and decay_fraction among them,
    plus micro_batch_size, grad_accum_steps, lr, min_lr_ratio, warmup_steps, weight_decay, grad_clip);
    the global batch is the step's micro batch x accumulation x the data-parallel ranks of the cluster.
    `family` picks the recipes (FAMILIES) and the model shape; `model` adds model-provider fields (see
    `write_run_folder`).
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
                            family, model)
    launch(plan, config.dry_run)
    return MegatronBridgeRun(
        path=out, config=asdict(config), scale=config.scale, seed=config.seed, inputs=[dataset],
        run_dir=out / "megatron_bridge", recipe=f"{plan.recipe_module}.{plan.recipe_function}",
        checkpoint_location=plan.overrides["checkpoint"]["save"], launched=not config.dry_run,
        metrics={"train_iters": steps, "global_batch_size": schedule.global_batch_size,
                 "tensor_parallel": tp, "expert_parallel": ep, "gpus": settings.nodes * settings.gpus_per_node},
    ).save()


def train(run_folder: Path) -> None:
    """Under torchrun on the cluster: the recipe's ConfigContainer + overrides.yaml -> pretrain/finetune."""
    require_megatron_bridge()
    import importlib

    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.utils.omegaconf_utils import apply_overrides, create_omegaconf_dict_config
    from omegaconf import OmegaConf

    plan = json.loads((run_folder / "plan.json").read_text())
    config = getattr(importlib.import_module(plan["recipe_module"]), plan["recipe_function"])()
    merged, excluded = create_omegaconf_dict_config(config)  # Megatron-Bridge's own YAML-override path
    merged = OmegaConf.merge(merged, OmegaConf.load(run_folder / "overrides.yaml"))
    apply_overrides(config, OmegaConf.to_container(merged, resolve=True), excluded)
    if plan["kind"] == "pretrain":
        from megatron.bridge.training.pretrain import pretrain

        pretrain(config=config, forward_step_func=forward_step)
    else:
        from megatron.bridge.training.finetune import finetune

        finetune(config=config, forward_step_func=forward_step)


def _copy(source: str, target: str) -> None:
    try:
        import fsspec
    except ImportError:
        raise NemotronError("copying to or from the data root needs fsspec: pip install fsspec s3fs") from None
    try:
        with fsspec.open(source, "rb") as reader, fsspec.open(target, "wb", auto_mkdir=True) as writer:
            shutil.copyfileobj(reader, writer, length=16 << 20)
    except ImportError as error:  # e.g. s3fs missing for s3://
        raise NemotronError(f"cannot open {target}: {error}; pip install s3fs for s3://") from None


def upload(run_folder: Path) -> None:
    """Copy our artifact files to the data root (skips files already there with the same size)."""
    plan = json.loads((run_folder / "plan.json").read_text())
    import fsspec

    for local, remote in plan["upload"]:
        filesystem, path = fsspec.core.url_to_fs(remote)
        if filesystem.exists(path) and filesystem.size(path) == os.path.getsize(local):
            continue
        print(f"upload {local} -> {remote}", file=sys.stderr)
        _copy(local, remote)


def stage_in(run_folder: Path) -> None:
    """On the cluster: copy what the trainer opens as plain files from S3 into the run folder's cache/."""
    plan = json.loads((run_folder / "plan.json").read_text())
    for remote, cached in plan["stage_in"]:
        target = run_folder / cached
        if not target.exists():
            _copy(remote, str(target))


def export_hf_checkpoint(megatron_checkpoint: Path, out_dir: Path, scale: str, vocab_size: int,
                         tokenizer_dir: Path, family: str = "nano2") -> Path:
    """A returned Megatron checkpoint -> the Hugging Face folder the tiny path writes (model + tokenizer),
    via Megatron-Bridge's AutoBridge export. Built in a temp folder and renamed into place."""
    require_megatron_bridge()
    import importlib

    from megatron.bridge import AutoBridge

    build_config = importlib.import_module(FAMILIES[family].model_module).build_config
    out_dir = Path(out_dir)
    with atomic.output_folder(out_dir) as staging:
        bridge = AutoBridge.from_hf_config(build_config(scale, vocab_size))
        bridge.export_ckpt(str(megatron_checkpoint), str(staging))
        for file in Path(tokenizer_dir).iterdir():
            if file.is_file():
                shutil.copy2(file, staging / file.name)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nemotron.training.megatron_bridge",
                                     description="Run a Megatron-Bridge run folder written by write_run_folder.")
    parser.add_argument("command", choices=["upload", "stage-in", "train", "show"])
    parser.add_argument("run_folder", type=Path)
    args = parser.parse_args(argv)
    if not (args.run_folder / "plan.json").is_file():
        raise NemotronError(f"{args.run_folder}/plan.json not found; pass a run folder written by write_run_folder")
    {"upload": upload, "stage-in": stage_in, "train": train,
     "show": lambda folder: print(LaunchPlan(**json.loads((folder / "plan.json").read_text())).describe(),
                                  file=sys.stderr)}[args.command](args.run_folder)


if __name__ == "__main__":
    try:
        main()
    except NemotronError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
