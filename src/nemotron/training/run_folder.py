"""A training step's output folder: which run it belongs to, and the final model folder.

Every nano2 training step writes into one `output_dir` and resumes from it when re-run:

    output_dir/checkpoints/step_000020/   checkpoints (nemotron.training.checkpoint), kept for resume
    output_dir/model/                     the final Hugging Face folder: weights, config, tokenizer
    output_dir/metrics.jsonl              per-step numbers (nemotron.training.metrics)
    output_dir/metadata.json              the artifact

- `run_settings(config)`: the settings that define a run's trajectory (not paths, not how often it
  logs or saves). Stored in every checkpoint with the inputs' digests as the run's identity.
- `check_same_run(saved, current, where)`: refuse to resume a checkpoint of another run. Continuing
  run A's optimizer state with run B's learning rate, data or base model would give a model that is
  neither A nor B, silently; the error names the settings that changed.
- `save_model_folder(model, tokenizer, folder)`: `save_pretrained` of both into a temp folder that is
  swapped into place, so `model/` is either complete or absent (a kill mid-save leaves no half model).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from torch import nn

from nemotron.errors import NemotronError

# Settings that only change what is logged or saved, or how fast: a resumed run may change them.
NOT_PART_OF_THE_RUN = ("eval_every", "checkpoint_every", "keep_last", "num_threads")


def run_settings(config: Any, not_part_of_the_run: tuple[str, ...] = NOT_PART_OF_THE_RUN) -> dict:
    """The fields of a step's Config dataclass that a resumed run must share with the run it continues."""
    return {
        name: value
        for name, value in asdict(config).items()
        if not name.endswith(("_path", "_artifact", "_dir")) and name not in not_part_of_the_run
    }


def check_same_run(saved: dict, current: dict, where: Path | str) -> None:
    """Refuse to resume from `where` when its run identity (`{"config", "inputs"}`) differs from ours."""
    if saved == current:
        return
    changed = sorted(
        name
        for name in set(saved["config"]) | set(current["config"])
        if saved["config"].get(name) != current["config"].get(name)
    )
    what = f"settings {', '.join(changed)}" if changed else "inputs (dataset or base checkpoint digest)"
    raise NemotronError(
        f"{where} was written by a run with other {what}; re-run with the same ones to resume, "
        "or pass a new --output-dir to start over"
    )


def save_model_folder(model: nn.Module, tokenizer: Any, folder: Path | str) -> Path:
    """Save the final Hugging Face folder (weights, config, tokenizer) atomically; returns it."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
