"""Our Mamba-2 training forward (nemotron.models.mamba2) against transformers' own, on seeded random inputs.

transformers' NemotronH code is the reference: its PyTorch chunked scan (`mamba2_chunk_scan`) and its
mixer forward. Outputs and gradients must agree to float rounding over many seeds and shapes (groups
shared by heads, lengths that are not a multiple of the chunk, chunks longer than the sequence), and
a model trained with our forward must save a folder that plain transformers loads to the same logits.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM
from transformers.models.nemotron_h import modeling_nemotron_h as reference

from nemotron.models.mamba2 import CausalDepthwiseConv, Mamba2TrainingMixer, ssd_chunked_scan, use_training_scan
from nemotron.models.nano2 import build_config, build_model
from nemotron.training.losses import CausalLMLoss


def random_scan_inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    draw = lambda low, high: int(torch.randint(low, high + 1, (), generator=generator))  # noqa: E731
    groups = draw(1, 3)
    heads, batch, time, p, n = groups * draw(1, 3), draw(1, 3), draw(1, 150), draw(1, 9), draw(1, 9)
    chunk = [4, 16, 32, 64][seed % 4]
    shapes = {"x": (batch, time, heads, p), "B": (batch, time, groups, n), "C": (batch, time, groups, n)}
    tensors = {name: torch.randn(shape, generator=generator) for name, shape in shapes.items()}
    tensors["dt"] = F.softplus(torch.randn(batch, time, heads, generator=generator)) + 1e-3
    tensors["A"] = -torch.rand(heads, generator=generator) * 8  # decays up to exp(-8 dt) a step
    return {name: t.requires_grad_() for name, t in tensors.items()}, chunk


@pytest.mark.parametrize("seed", range(24))
def test_the_scan_equals_transformers_chunk_scan_forward_and_backward(seed):
    inputs, chunk = random_scan_inputs(seed)
    x, dt, A, B, C = (inputs[name] for name in ("x", "dt", "A", "B", "C"))
    ours = ssd_chunked_scan(x, dt, A, B, C, chunk)
    theirs = reference.mamba2_chunk_scan(x, dt, A, B, C, chunk)
    where = f"seed {seed}: x {tuple(x.shape)}, {B.shape[2]} groups, chunk {chunk}"
    assert ours.shape == theirs.shape, where
    assert torch.allclose(ours, theirs, rtol=1e-4, atol=1e-4 * theirs.abs().max().item()), where
    probe = torch.randn(theirs.shape, generator=torch.Generator().manual_seed(seed))
    ours_grads = torch.autograd.grad((ours * probe).sum(), list(inputs.values()))
    theirs_grads = torch.autograd.grad((theirs * probe).sum(), list(inputs.values()))
    for name, a, b in zip(inputs, ours_grads, theirs_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * b.abs().max().item()), f"{where}: d/d{name} differs"


def test_the_causal_convolution_has_exact_gradients_and_equals_conv1d():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 9, 5, dtype=torch.float64, generator=generator, requires_grad=True)
    weight = torch.randn(5, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, generator=generator, requires_grad=True)
    assert torch.autograd.gradcheck(CausalDepthwiseConv.apply, (x, weight, bias))
    conv1d = F.conv1d(x.transpose(1, 2), weight[:, None], bias, padding=3, groups=5)[..., :9].transpose(1, 2)
    assert torch.allclose(CausalDepthwiseConv.apply(x, weight, bias), conv1d, rtol=1e-12, atol=1e-12)


MIXER_SHAPES = [  # (hidden, heads, head_dim, groups, state, chunk, time)
    (32, 4, 8, 1, 4, 16, 40),
    (24, 6, 4, 3, 5, 8, 8),
    (16, 2, 16, 2, 3, 64, 13),
    (128, 4, 64, 1, 16, 64, 256),  # nano2 tiny's mixer, a full window
]


def mixer_pair(seed: int, shape):
    hidden, heads, head_dim, groups, state, chunk, _ = shape
    config = build_config("tiny", 64, hidden_size=hidden, mamba_num_heads=heads, mamba_head_dim=head_dim,
                          n_groups=groups, ssm_state_size=state, chunk_size=chunk)
    torch.manual_seed(seed)
    theirs = reference.NemotronHMamba2Mixer(config, layer_idx=0).train()
    with torch.no_grad():  # away from the initial values, so that every parameter's role shows
        for parameter in theirs.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    ours = use_training_scan(copy.deepcopy(theirs))
    return theirs, ours


@pytest.mark.parametrize("seed", range(8))
def test_the_training_mixer_equals_transformers_mixer(seed):
    shape = MIXER_SHAPES[seed % len(MIXER_SHAPES)]
    theirs, ours = mixer_pair(seed, shape)
    assert type(ours) is Mamba2TrainingMixer and type(theirs) is reference.NemotronHMamba2Mixer
    generator = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(2, shape[-1], shape[0], generator=generator)
    probe = torch.randn(2, shape[-1], shape[0], generator=generator)
    results = []
    for mixer in (theirs, ours):
        inputs = x.clone().requires_grad_()
        out = mixer(inputs)
        grads = torch.autograd.grad((out * probe).sum(), [inputs, *mixer.parameters()])
        results.append((out, grads))
    (out_t, grads_t), (out_o, grads_o) = results
    where = f"seed {seed}, shape {shape}"
    assert torch.allclose(out_o, out_t, rtol=1e-4, atol=1e-4 * out_t.abs().max().item()), where
    names = ["input", *(name for name, _ in theirs.named_parameters())]
    for name, a, b in zip(names, grads_o, grads_t, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * b.abs().max().item()), f"{where}: d/d{name} differs"


def test_with_a_padding_mask_or_on_bf16_autocast_the_mixer_still_agrees():
    theirs, ours = mixer_pair(0, MIXER_SHAPES[0])
    x = torch.randn(2, 40, 32, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 30:] = 0
    assert torch.equal(ours(x, attention_mask=mask), theirs(x, attention_mask=mask))  # transformers' own path
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours_bf16, theirs_bf16 = ours(x), theirs(x)
    assert ours_bf16.dtype == theirs_bf16.dtype == torch.bfloat16
    assert (ours_bf16.float() - theirs_bf16.float()).abs().max() < 0.05 * theirs_bf16.float().abs().max()


def test_a_model_trained_with_our_scan_saves_a_plain_transformers_folder(tmp_path):
    config = build_config("tiny", 256, hidden_size=32, intermediate_size=64, mamba_head_dim=16,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    plain, ours = build_model(config, seed=0), use_training_scan(build_model(config, seed=0))
    windows = torch.randint(0, 256, (2, 33), generator=torch.Generator().manual_seed(1))
    losses = []
    for model in (plain, ours):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = CausalLMLoss(model.train())(windows[:, :-1], windows[:, 1:])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    for (name, a), (_, b) in zip(plain.state_dict().items(), ours.state_dict().items(), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), f"{name} differs after one step"

    ours.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert all(type(m) is reference.NemotronHMamba2Mixer for m in loaded.modules() if "Mamba2" in type(m).__name__)
    with torch.no_grad():
        ours_logits = ours.eval()(input_ids=windows, use_cache=False).logits
        loaded_logits = loaded(input_ids=windows, use_cache=False).logits
    assert torch.allclose(ours_logits, loaded_logits, rtol=1e-5, atol=1e-5)
