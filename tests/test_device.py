"""Where a model runs (nemotron.models.device): --device, --precision, batch placement, the Mamba note."""

from __future__ import annotations

import pytest
import torch

from nemotron.errors import NemotronError
from nemotron.models.device import autocast_dtype, pick_device, to_device
from nemotron.models.loading import mamba_kernels_note

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)


def test_pick_device_follows_the_flag_and_refuses_what_is_not_there():
    assert pick_device("cpu") == CPU
    assert pick_device("auto") == (CUDA if torch.cuda.is_available() else CPU)
    with pytest.raises(NemotronError, match="one of auto, cpu, cuda"):
        pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(NemotronError, match="no CUDA GPU"):
            pick_device("cuda")


def test_precision_auto_is_bf16_on_a_gpu_and_fp32_on_a_cpu():
    assert autocast_dtype("auto", CUDA) is torch.bfloat16 and autocast_dtype("auto", CPU) is None
    assert autocast_dtype("bf16", CPU) is torch.bfloat16 and autocast_dtype("fp32", CUDA) is None
    with pytest.raises(NemotronError, match="--precision"):
        autocast_dtype("fp16", CPU)


def test_batches_stay_as_they_are_on_a_cpu():
    batch = torch.arange(12).reshape(3, 4)
    assert torch.equal(to_device(batch, CPU), batch) and to_device(batch, CPU).device == CPU


def test_the_mamba_note_names_the_implementation_and_what_is_missing():
    assert "nemotron.models.mamba2" in mamba_kernels_note("cpu")
    note = mamba_kernels_note("cuda")
    try:
        import causal_conv1d  # noqa: F401
        import mamba_ssm  # noqa: F401
    except ImportError:
        assert "not installed" in note and "pip install mamba-ssm causal-conv1d" in note
    else:
        assert note == "Mamba-2: the mamba_ssm / causal_conv1d CUDA kernels"

