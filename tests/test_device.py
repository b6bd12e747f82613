"""Where a model runs (nemotron.models.device): --device, --precision, batch placement, the Mamba note."""

from __future__ import annotations

import os
import subprocess
import sys

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


# Every step that runs a model takes --device (nemotron.models.device.DeviceSettings); on a machine without
# CUDA, `--device cuda` is one error line and exit 2 before any model loads, never a silent CPU run.
COMMANDS = {
    "serve": ["nemotron.serve", "smollm2"],
    "chat": ["nemotron.chat", "smollm2", "--prompt", "hello"],
    "evaluation": ["nemotron.evaluation", "smollm2", "--limit", "2", "--output-dir", "{out}"],
    "score": ["nemotron.recipes.post_training_data.score", "--pools-path", "{out}/pools", "--output-dir", "{out}"],
    "embed_select": ["nemotron.recipes.post_training_data.embed_select", "--scored-path", "{out}/scored",
                     "--output-dir", "{out}"],
}


@pytest.mark.slow  # a subprocess each (~3 s: the interpreter and torch)
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("command", COMMANDS)
def test_device_cuda_without_a_gpu_is_one_error_line_before_any_model_loads(command, tmp_path):
    out = tmp_path / "out"
    args = [arg.format(out=out) for arg in COMMANDS[command]]
    run = subprocess.run([sys.executable, "-m", *args, "--device", "cuda"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.strip().splitlines() == [
        "error: --device cuda, but torch sees no CUDA GPU here (torch.cuda.is_available() is False); "
        "pass --device cpu or auto, or install a CUDA build of torch"]
    assert not (out / "metadata.json").exists()
