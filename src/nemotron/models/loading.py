"""Loading a saved model, and the one check that data fits it.

- `load_model(model_dir)` -> (model, tokenizer): the Hugging Face folder a training step saved, loaded
  the way any user would load it (`AutoModelForCausalLM.from_pretrained`, `AutoTokenizer`), in float32
  and eval mode. Evaluating through the public loading path is the point: a number we report is a
  number anyone gets from the folder alone, with nothing of ours in between.
- `ModelLimits`: what a model can take: its vocabulary (embedding rows) and its context
  (`max_position_embeddings`), read from a loaded config or from a folder's config.json alone (no
  torch, no transformers: data curation uses it).
- `quiet_cuda_kernel_notes()`: on a machine without CUDA, drop transformers' notes that the Mamba CUDA
  kernels (mamba_ssm, causal_conv1d) are not installed: they cannot run on a CPU anyway.
- `mamba_kernels_note(device_type)`: the log line naming which Mamba-2 implementation runs (CUDA kernels,
  or our compiled chunked scan, and why).
- `check_fits(limits, largest_id=..., longest=..., where=..., fix=...)`: refuse token ids beyond the
  embedding table (they crash mid-step on a CPU and read garbage on a GPU) and sequences longer than
  the context, before any work, naming the data and the fix.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemotron.errors import NemotronError


@dataclass(frozen=True)
class ModelLimits:
    vocab_size: int
    context: int | None  # max_position_embeddings; None if the model has no fixed limit

    @classmethod
    def of(cls, model_config: Any) -> ModelLimits:
        """From a transformers config object (or anything with `vocab_size`)."""
        return cls(model_config.vocab_size, getattr(model_config, "max_position_embeddings", None))

    @classmethod
    def from_folder(cls, model_dir: Path | str) -> ModelLimits:
        """From `model_dir/config.json`, without loading the model."""
        config_path = Path(model_dir) / "config.json"
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
            return cls(int(config["vocab_size"]), config.get("max_position_embeddings"))
        except (OSError, ValueError, KeyError) as error:
            raise NemotronError(
                f"cannot read the model limits from {config_path} ({type(error).__name__}: {error}); "
                "pass a Hugging Face model folder that a training step saved"
            ) from None


def check_fits(
    limits: ModelLimits, *, where: str, fix: str, largest_id: int | None = None, longest: int | None = None
) -> None:
    """Refuse token ids at or beyond `limits.vocab_size` and sequences longer than `limits.context`."""
    if largest_id is not None and not 0 <= largest_id < limits.vocab_size:
        raise NemotronError(
            f"{where}: token id {largest_id} is outside the model's vocabulary of {limits.vocab_size}; {fix}"
        )
    if longest is not None and limits.context is not None and longest > limits.context:
        raise NemotronError(
            f"{where}: sequences of {longest} tokens exceed the model's max_position_embeddings="
            f"{limits.context}; {fix}"
        )


class _DropKernelFallbackNotes(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "falling back to its reference PyTorch implementation" not in record.getMessage()


def quiet_cuda_kernel_notes() -> None:
    """Without CUDA, say nothing about missing CUDA kernels (transformers says it once per kernel, loudly)."""
    import torch

    logger = logging.getLogger("transformers.integrations.hub_kernels")
    if not torch.cuda.is_available() and not any(isinstance(f, _DropKernelFallbackNotes) for f in logger.filters):
        logger.addFilter(_DropKernelFallbackNotes())


def mamba_kernels_note(device_type: str) -> str:
    """One log line naming the Mamba-2 implementation a training step on `device_type` runs (the choice is
    `nemotron.models.mamba2.Mamba2TrainingMixer`'s, for models switched by `use_training_scan`): on a GPU
    the mamba_ssm and causal_conv1d CUDA kernels when both import, else our compiled chunked scan; on a CPU
    our chunked scan."""
    from nemotron.models.mamba2 import MAMBA_SSM_KERNELS

    if device_type == "cuda" and MAMBA_SSM_KERNELS:
        return "Mamba-2: the mamba_ssm / causal_conv1d CUDA kernels"
    if device_type == "cuda":
        return ("Mamba-2: mamba_ssm and causal_conv1d not installed, so the compiled chunked SSD scan of "
                "nemotron.models.mamba2 runs on the GPU (pip install mamba-ssm causal-conv1d for the CUDA kernels)")
    return "Mamba-2: the chunked SSD scan of nemotron.models.mamba2 in training (the CUDA kernels need a GPU)"


def load_model(model_dir: Path | str) -> tuple[Any, Any]:
    """(model in float32 eval mode, tokenizer) from a Hugging Face folder, offline."""
    import torch  # imported here: torch and transformers take seconds to import
    from transformers import AutoModelForCausalLM

    from nemotron.data_prep.tokenizer import load_tokenizer

    quiet_cuda_kernel_notes()
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise NemotronError(
            f"{model_dir}: no config.json, so this is not a Hugging Face model folder; pass the checkpoint "
            "artifact a training step saved"
        )
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
    except (OSError, ValueError) as error:
        raise NemotronError(f"{model_dir}: cannot load the model: {str(error).splitlines()[0]}") from None
    tokenizer = load_tokenizer(model_dir)
    check_fits(
        ModelLimits.of(model.config), largest_id=len(tokenizer) - 1, where=str(model_dir),
        fix="the folder mixes a tokenizer and a model that do not belong together",
    )
    return model.eval(), tokenizer

