"""Training checkpoints: a Hugging Face model folder plus everything needed to resume bit for bit.

Layout of one checkpoint (`save_checkpoint(run_dir, step=50, ...)`):

    run_dir/checkpoints/step_000050/
        config.json, generation_config.json, model.safetensors    # model.save_pretrained
        tokenizer.json, tokenizer_config.json, ...                # tokenizer.save_pretrained (if given)
        trainer_state.pt                                          # what a resume needs besides weights

The folder alone is a usable model: `AutoModelForCausalLM.from_pretrained(folder)` and
`AutoTokenizer.from_pretrained(folder)` load it offline, so evaluation, the next stage (SFT starts
from the pretrained folder) and any Hugging Face tool can use it without our code.

`trainer_state.pt` holds the optimizer moments, the LR scheduler position, the Python / NumPy / torch
random generator states, the data position (`data_state`, e.g. `TokenWindows.state_dict()`), the step
and any `extra` numbers. Restoring all of them is what makes "train 6 steps" and "train 3, stop,
resume, train 3" end with identical weights (tested).

Atomicity: a checkpoint is written into a hidden temp folder (`.step_000050.<random>.tmp`, by
`nemotron.atomic.output_folder`) beside its final place and renamed into place only when every file
is complete; a rename within one filesystem is atomic, so a crash mid-save leaves a temp folder that
`latest_checkpoint` never picks up (and the next save removes). Only the newest `keep_last` checkpoints are kept.

With several processes (DDP), call `save_checkpoint` on the main rank only (all ranks hold the same
weights and optimizer state); every rank calls `load_checkpoint`.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nemotron import atomic
from nemotron.errors import NemotronError

CHECKPOINTS_DIR = "checkpoints"
TRAINER_STATE = "trainer_state.pt"
STATE_FORMAT_VERSION = 2  # 2: extra = {"run", "loop"} (training.run.LoopState)
_STEP_FOLDER = re.compile(r"^step_(\d+)$")

# The config fields that decide the shapes and wiring of a Nemotron-H (or any decoder) model. Two
# configs that agree on all of these can exchange weights; resuming across a difference is refused.
ARCHITECTURE_FIELDS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "layers_block_type",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "n_groups",
    "conv_kernel",
    "tie_word_embeddings",
    "mlp_hidden_act",
    "use_bias",
    "mlp_bias",
    "use_conv_bias",
)


def checkpoint_dir(run_dir: Path | str, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / f"step_{step:06d}"


def save_checkpoint(
    run_dir: Path | str,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    data_state: dict,
    extra: dict | None = None,
    tokenizer: Any = None,
    keep_last: int = 3,
) -> Path:
    """Write checkpoint `step` atomically and prune older ones; returns the checkpoint folder."""
    if keep_last < 1:
        raise NemotronError(f"keep_last must be at least 1, got {keep_last}; pass e.g. --keep-last 3")
    final = checkpoint_dir(run_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    with atomic.output_folder(final) as temp:  # an existing `final` (same step saved again) is swapped out
        with _quiet_progress_bars():
            _unwrap(model).save_pretrained(temp)
        if tokenizer is not None:
            tokenizer.save_pretrained(temp)
        trainer_state = {
            "format_version": STATE_FORMAT_VERSION,
            "step": step,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": _capture_rng_states(),
            "data_state": data_state,
            "extra": extra or {},
        }
        torch.save(trainer_state, temp / TRAINER_STATE)
    _prune(final.parent, keep_last)
    return final


def latest_checkpoint(run_dir: Path | str) -> Path | None:
    """The newest `step_*` checkpoint folder of a run, or None. Temp folders never count."""
    folder = Path(run_dir) / CHECKPOINTS_DIR
    if not folder.is_dir():
        return None
    steps = _step_folders(folder)
    return steps[-1][1] if steps else None


def load_checkpoint(
    path: Path | str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    restore_rng: bool = True,
) -> dict:
    """Restore weights (and optimizer, scheduler, RNG states when given) from a checkpoint folder.

    Returns the trainer state: `{"step", "data_state", "extra", ...}`. Raises NemotronError if the
    folder is incomplete or was made for a different architecture than `model`.
    """
    folder = Path(path)
    _check_complete(folder)
    target = _unwrap(model)
    check_same_architecture(folder, target.config)

    # Load through from_pretrained, exactly as any user of the folder would: it undoes the renaming
    # save_pretrained applies for the published checkpoint layout (e.g. Nemotron-H's `backbone.`).
    from transformers import AutoModelForCausalLM

    with _quiet_progress_bars():
        saved = AutoModelForCausalLM.from_pretrained(folder, dtype=next(target.parameters()).dtype)
    target.load_state_dict(saved.state_dict(), strict=True)
    del saved

    try:
        state = torch.load(folder / TRAINER_STATE, map_location="cpu", weights_only=True)
    except Exception as error:
        raise NemotronError(
            f"cannot read {folder / TRAINER_STATE} ({type(error).__name__}: {error}); the checkpoint "
            "is damaged: delete the folder and resume from an older one"
        ) from error
    if state.get("format_version") != STATE_FORMAT_VERSION:
        raise NemotronError(
            f"{folder / TRAINER_STATE} has format version {state.get('format_version')}, this code reads "
            f"version {STATE_FORMAT_VERSION}; resume with the nemotron version that wrote it"
        )
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    if restore_rng:
        _restore_rng_states(state["rng"])
    return state


def check_same_architecture(folder: Path | str, config: Any) -> None:
    """Refuse a checkpoint whose config.json differs from `config` in any `ARCHITECTURE_FIELDS`."""
    config_path = Path(folder) / "config.json"
    try:
        saved = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise NemotronError(f"cannot read {config_path} ({error}); the checkpoint is incomplete or damaged") from None
    current = config.to_dict()
    differences = [
        f"{field}: checkpoint {saved.get(field)!r} vs model {current.get(field)!r}"
        for field in ARCHITECTURE_FIELDS
        if saved.get(field) != current.get(field)
    ]
    if differences:
        raise NemotronError(
            f"checkpoint {folder} was made for a different architecture ({'; '.join(differences)}); "
            "resume with the same model settings (scale, vocab) or start a new run folder"
        )


# --------------------------------------------------------------------------------------------------
# internals
# --------------------------------------------------------------------------------------------------


def _unwrap(model: nn.Module) -> nn.Module:
    """The model itself, also when it is wrapped by DistributedDataParallel (which adds `.module`)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


@contextmanager
def _quiet_progress_bars() -> Iterator[None]:
    """Hide transformers' per-save/per-load shard bars, which would interleave with the training bar."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _check_complete(folder: Path) -> None:
    if not folder.is_dir():
        raise NemotronError(f"checkpoint folder not found: {folder}; pass a run's checkpoints/step_* folder")
    has_weights = (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file()
    missing = [name for name in ("config.json", TRAINER_STATE) if not (folder / name).is_file()]
    missing += [] if has_weights else ["model.safetensors"]
    if missing:
        raise NemotronError(
            f"checkpoint {folder} is incomplete (missing {', '.join(missing)}); delete it and resume "
            "from an older checkpoint"
        )


def _capture_rng_states() -> dict:
    numpy_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        # As plain lists/ints, so torch.load(weights_only=True) can read it back without pickling numpy.
        "numpy": {
            "bit_generator": numpy_state["bit_generator"],
            "key": numpy_state["state"]["key"].tolist(),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _restore_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    numpy = states["numpy"]
    np.random.set_state(
        {
            "bit_generator": numpy["bit_generator"],
            "state": {"key": np.asarray(numpy["key"], dtype=np.uint32), "pos": numpy["pos"]},
            "has_gauss": numpy["has_gauss"],
            "gauss": numpy["gauss"],
        }
    )
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _step_folders(folder: Path) -> list[tuple[int, Path]]:
    found = []
    for child in folder.iterdir():
        match = _STEP_FOLDER.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def _prune(folder: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` checkpoints, and temp folders left by crashed saves."""
    for _, old in _step_folders(folder)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    for child in folder.iterdir():
        if child.name.startswith(".step_") and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
