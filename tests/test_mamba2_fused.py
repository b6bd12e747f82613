"""The fused (compiled) Mamba-2 scan against its specification, the eager `ssd_chunked_scan`.

`fused_chunked_scan` must give the reference scan's values and every gradient (x, dt, A, B, C) in fp32 to
float rounding, over seeded random shapes: batch, lengths that are not a multiple of the chunk, heads,
head dim, state size, groups shared by heads, chunk sizes 8, 16 and 32. Sizes start at 2: torch.compile
specializes a size of 1; the eager scan's own test (tests/test_mamba2.py) covers sizes of 1 against
transformers.

Where each device runs it: the compiled scan is what a GPU trains with (`Mamba2TrainingMixer`), and there
the test takes six shapes through what training meets, one compile for the first shapes and one
recompile with symbolic sizes after it (a command of scripts/gpu_check.sh). On the CPU the same compiled
function is checked on three shapes (one per chunk size), each compiled for its own sizes: measured on
two idle cores with a cold compile cache, a static compile of the scan and its backward takes ~21 s and
the symbolic recompile ~150-175 s, which would be a quarter of `make test`'s budget for a path no CPU run
takes (on the CPU `--compile` compiles the scan inside the model's own graph, the second test below).
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from nemotron.models.mamba2 import compiled_scan, fused_chunked_scan, ssd_chunked_scan

SEEDS = {"cuda": range(6), "cpu": range(3)}  # the docstring says why the CPU checks fewer


def random_scan_inputs(seed: int, device: str):
    generator = torch.Generator().manual_seed(seed)
    draw = lambda low, high: int(torch.randint(low, high + 1, (), generator=generator))  # noqa: E731
    chunk = [8, 16, 32][seed % 3]
    groups = draw(2, 3)
    heads, batch, p, n = groups * draw(2, 3), draw(2, 3), draw(2, 17), draw(2, 17)
    time = draw(2, 4) * chunk - draw(1, chunk - 1)  # never a whole number of chunks: the padded tail
    shapes = {"x": (batch, time, heads, p), "B": (batch, time, groups, n), "C": (batch, time, groups, n)}
    tensors = {name: torch.randn(shape, generator=generator) for name, shape in shapes.items()}
    tensors["dt"] = F.softplus(torch.randn(batch, time, heads, generator=generator)) + 1e-3
    tensors["A"] = -torch.rand(heads, generator=generator) * 8  # decays up to exp(-8 dt) a step
    probe = torch.randn(batch, time, heads, p, generator=generator)
    inputs = {name: t.to(device).requires_grad_() for name, t in tensors.items()}
    return inputs, probe.to(device), chunk


def check_equal(seed: int, device: str) -> None:
    inputs, probe, chunk = random_scan_inputs(seed, device)
    args = [inputs[name] for name in ("x", "dt", "A", "B", "C")]
    groups, state = args[3].shape[2:]
    where = f"seed {seed} on {device}: x {tuple(args[0].shape)}, {groups} groups, state {state}, chunk {chunk}"
    fused, reference = fused_chunked_scan(*args, chunk), ssd_chunked_scan(*args, chunk)
    assert fused.shape == reference.shape and fused.dtype == reference.dtype == torch.float32, where
    scale = reference.abs().max().item()
    assert torch.allclose(fused, reference, rtol=1e-5, atol=1e-5 * scale), \
        f"{where}: values differ by {(fused - reference).abs().max().item():.3g} (largest {scale:.3g})"
    fused_grads = torch.autograd.grad((fused * probe).sum(), args)
    reference_grads = torch.autograd.grad((reference * probe).sum(), args)
    for name, a, b in zip(inputs, fused_grads, reference_grads, strict=True):
        scale = b.abs().max().item()
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * scale), \
            f"{where}: d/d{name} differs by {(a - b).abs().max().item():.3g} (largest {scale:.3g})"


@pytest.mark.slow  # compiles of the scan's forward and backward: ~1 minute on two cores
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU here: the scan compiles to Triton kernels only on one"))])
def test_the_fused_scan_equals_the_reference_scan_values_and_every_gradient(device):
    torch._dynamo.reset()
    compiled_scan.cache_clear()
    # Never a silent fall-back to the eager scan (which would compare the reference with itself): past the
    # recompile limit torch.compile would run the function eagerly; here it raises instead.
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, automatic_dynamic_shapes=device == "cuda"):
        for seed in SEEDS[device]:
            check_equal(seed, device)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert graphs >= (2 if device == "cuda" else len(SEEDS["cpu"])), graphs  # compiled, not run eagerly


def test_inside_a_compiled_model_the_fused_scan_is_the_plain_scan_that_model_compiles():
    """Under `--compile` the model's own graph takes the scan in: no second compiled function nested in it."""
    inputs, _, chunk = random_scan_inputs(0, "cpu")
    seen = []

    def traced(x, dt, A, B, C):
        seen.append(torch.compiler.is_compiling())
        return fused_chunked_scan(x, dt, A, B, C, chunk)

    torch._dynamo.reset()
    explained = torch._dynamo.explain(traced)(*(inputs[name].detach() for name in ("x", "dt", "A", "B", "C")))
    assert seen == [True] and explained.graph_count == 1 and explained.graph_break_count == 0
