"""The cluster side: the only code that imports Megatron-Bridge (and fsspec), each inside the function.

    python -m nemotron.training.megatron_bridge upload RUN_FOLDER    our artifacts -> the data root (fsspec)
    python -m nemotron.training.megatron_bridge stage-in RUN_FOLDER  S3 -> the run folder's cache/ (the scripts)
    python -m nemotron.training.megatron_bridge train RUN_FOLDER     under torchrun (the scripts)

`train` builds the recipe's ConfigContainer, merges overrides.yaml into it with Megatron-Bridge's own
OmegaConf helpers and calls its `pretrain` / `finetune`. `export_hf_checkpoint` turns the result into the
Hugging Face folder the tiny path writes (Megatron-Bridge's AutoBridge export). Without Megatron-Bridge,
each is one line saying what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from nemotron import atomic
from nemotron.errors import NemotronError
from nemotron.training.megatron_bridge.recipes import FAMILIES

INSTALL_HINT = (
    "Megatron-Bridge is not installed; on a CUDA machine with Transformer Engine run "
    "`pip install 'nemotron[megatron]'` (megatron-bridge==0.6.0), or use the NeMo container, "
    "then re-run; add --dry-run to only print the plan"
)


def require_megatron_bridge() -> None:
    """Import Megatron-Bridge or fail in one line saying what to install."""
    try:
        import megatron.bridge  # noqa: F401
    except ImportError as error:
        raise NemotronError(f"{INSTALL_HINT} ({error})") from None


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


def copy_file(source: str, target: str) -> None:
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
        copy_file(local, remote)


def stage_in(run_folder: Path) -> None:
    """On the cluster: copy what the trainer opens as plain files from S3 into the run folder's cache/."""
    plan = json.loads((run_folder / "plan.json").read_text())
    for remote, cached in plan["stage_in"]:
        target = run_folder / cached
        if not target.exists():
            copy_file(remote, str(target))


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
