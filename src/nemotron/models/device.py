"""Where a model computes: the one `--device` of every step that runs one, and what follows from it.

- `DeviceSettings`: the `--device auto|cpu|cuda` field, declared once; training, scoring, embedding,
  serving and evaluation Configs take it from here.
- `pick_device(name, local_rank)`: the flag -> a `torch.device`; auto is the GPU when CUDA is available
  (under torchrun the local rank's), else the CPU; `cuda` on a machine without one is refused in one line.
- `device_name(device)`: what metrics call it ("cpu", "cuda:0 NVIDIA H100 80GB HBM3").
- `autocast_dtype(precision, device)`: bf16 autocast on a GPU by default, fp32 on a CPU.
- `to_device(batch, device)`: a batch on the device, through pinned memory on a GPU.

Importing this module does not load torch (each function imports it), so a step's `--help` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from nemotron.artifact.fields import bookkeeping
from nemotron.errors import NemotronError

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda")


@dataclass
class DeviceSettings:
    # bookkeeping: where a step ran changes only rounding and speed (a training run saved on a GPU resumes on a
    # CPU), so it is recorded but never refuses a resume
    device: Literal["auto", "cpu", "cuda"] = bookkeeping("auto")
    """Where the model runs: auto is the GPU when CUDA is available (under torchrun one per process), else the
    CPU; cuda on a machine without a usable GPU is refused."""


def pick_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """`--device auto|cpu|cuda` -> the device this process computes on: auto is the local rank's GPU when
    CUDA is available, else the CPU; `cuda` without a usable GPU is refused, not silently run on the CPU."""
    import torch

    if name not in DEVICES:
        raise NemotronError(f"--device {name!r} is not one of {', '.join(DEVICES)}")
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise NemotronError("--device cuda, but torch sees no CUDA GPU here (torch.cuda.is_available() is False); "
                            "pass --device cpu or auto, or install a CUDA build of torch")
    return torch.device("cuda", local_rank)


def device_name(device: torch.device) -> str:
    """What a run's metrics call its device: "cpu", or the GPU's index and model ("cuda:0 NVIDIA H100 80GB
    HBM3"), so a measured wall time or tokens/s always says what it was measured on."""
    import torch

    if device.type != "cuda":
        return device.type
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} {torch.cuda.get_device_name(index)}"


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """`--precision` on `device` -> the autocast dtype, or None for plain fp32: auto is bf16 on a GPU
    (its tensor cores' fast dtype; the weights and AdamW state stay fp32) and fp32 on a CPU, where bf16
    matmuls are no faster on most cores and round more."""
    import torch

    if precision not in ("auto", "fp32", "bf16"):
        raise NemotronError(f"--precision {precision!r} is not one of auto, fp32, bf16")
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A batch on the training device: on a GPU through pinned (page-locked) memory, so the copy runs
    without an extra staging copy and does not block the host (`non_blocking`); on a CPU, as it is."""
    if device.type != "cuda":
        return batch.to(device)
    return batch.pin_memory().to(device, non_blocking=True)
