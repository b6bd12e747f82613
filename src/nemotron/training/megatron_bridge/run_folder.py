"""Planning a Megatron-Bridge run: from our dataset artifact and a schedule to a run folder. No engine import.

`write_run_folder(kind, dataset, scale, schedule, settings, out)` writes

    plan.json       what runs: recipe function, the files to upload (local -> data root), the commands
    overrides.yaml  OmegaConf overrides for the recipe's ConfigContainer; every key exists on the
                    dataclass it targets and every value fits its Literal (checked against the facts)
    torchrun.sh     one node: `bash torchrun.sh`
    sbatch.sh       Slurm: `sbatch sbatch.sh` (nodes x gpus_per_node; pyxis container when given)

`kind` is "pretrain" (a PretrainDataset: `tokenizer_dir`, `train/valid/test_prefixes`, `vocab_size`) or
"sft" (an SFTDataset: `tokenizer_dir`, `train_packed`, `valid_packed`, `pack_size`, `vocab_size`; plus
`init_checkpoint`, stage 0's Megatron checkpoint). The overrides always set our model shape
(`recipes.model_shape`; at full scale it equals the recipe's). Parallelism is the recipe's at full and 1
below it (`parallelism`). Megatron-Core reads bin/idx straight from `s3://` (index files cached under
`cache/idx`); the tokenizer and the packed Parquet are staged into `cache/` on the cluster. `gs://` and
`hf://` are refused: Megatron-Core's object-storage reader supports S3 only.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import yaml

from nemotron import atomic
from nemotron.errors import NemotronError
from nemotron.training.megatron_bridge.plan import LaunchPlan, MegatronBridgeLaunch, Schedule, check_settings
from nemotron.training.megatron_bridge.recipes import FACTS_PATH, FAMILIES, check_overrides, facts, model_shape
from nemotron.training.megatron_bridge.scripts import sbatch_script, torchrun_script


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
                     family: str = "nano2", provider_overrides: dict[str, Any] | None = None) -> LaunchPlan:
    """Write plan.json, overrides.yaml, torchrun.sh and sbatch.sh into `out` (atomically, each file), for
    the recipe of `family` (FAMILIES: nano2 | nano3) and `kind`. `provider_overrides`: more model-provider
    fields in Megatron's names (a step's own settings, e.g. nano3's moe_aux_loss_coeff), checked like the
    rest."""
    if kind not in ("pretrain", "sft"):
        raise NemotronError(f"unknown Megatron-Bridge run kind {kind!r}; use 'pretrain' or 'sft'")
    check_settings(settings)
    tp, ep = parallelism(family, scale, settings)
    recipes = FAMILIES[family]
    recipe = recipes.recipes[kind]
    if recipe not in facts()["recipes"]:
        raise NemotronError(f"recipe {recipe} is not in {FACTS_PATH.name}; "
                            "re-run scripts/extract_megatron_bridge_facts.py")
    world = settings.nodes * settings.gpus_per_node
    if schedule.global_batch_size % (schedule.micro_batch_size * (world // tp)):
        raise NemotronError(
            f"global batch {schedule.global_batch_size} is not a multiple of micro batch {schedule.micro_batch_size} "
            f"x {world // tp} data-parallel ranks; change the batch sizes or the number of GPUs")

    out = Path(out).resolve()
    stage = Path(dataset.path).parent.name  # stage0_pretrain / stage1_sft: keeps stages apart on the root
    data = _DataRoot(settings.data_root, stage, Path(dataset.path))
    overrides = _common_overrides(family, schedule, scale, tp, ep, dataset.vocab_size)
    overrides["model"].update(provider_overrides or {})
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
    atomic.write_text(out / "overrides.yaml", yaml.safe_dump(overrides, sort_keys=True))
    atomic.write_text(out / "torchrun.sh", torchrun_script(plan, settings))
    atomic.write_text(out / "sbatch.sh", sbatch_script(plan, settings))
    atomic.write_text(out / "plan.json", json.dumps(asdict(plan), indent=2, sort_keys=True) + "\n")
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
