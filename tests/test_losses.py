"""linear_cross_entropy (nemotron.training.losses) against F.cross_entropy over full logits, seeded."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nemotron.models.nano2 import build_config, build_model
from nemotron.training.losses import BLOCK_LOGITS, IGNORE_INDEX, CausalLMLoss, block_tokens, linear_cross_entropy


def plain_and_blocked(seed: int, block_size: int, ignored: float):
    generator = torch.Generator().manual_seed(seed)
    tokens, width, vocab = int(torch.randint(1, 300, (), generator=generator)), 24, 97
    hidden = torch.randn(tokens, width, generator=generator, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(vocab, width, generator=generator, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,), generator=generator)
    targets[torch.rand(tokens, generator=generator) < ignored] = IGNORE_INDEX
    plain = F.cross_entropy(hidden @ weight.t(), targets, ignore_index=IGNORE_INDEX)
    blocked = linear_cross_entropy(hidden, weight, targets, block_size=block_size)
    return plain, blocked, hidden, weight


@pytest.mark.parametrize("seed", range(12))
def test_same_loss_and_gradients_as_the_plain_loss(seed):
    block_size = [1, 7, 64, 1024][seed % 4]
    plain, blocked, hidden, weight = plain_and_blocked(seed, block_size, ignored=[0.0, 0.3][seed % 2])
    plain_grads = torch.autograd.grad(plain * 3.0, [hidden, weight])
    blocked_grads = torch.autograd.grad(blocked * 3.0, [hidden, weight])  # grad_output scales the stored grads
    assert torch.allclose(plain, blocked, rtol=1e-12, atol=1e-12), f"seed {seed}: {plain} vs {blocked}"
    for name, a, b in zip(("hidden", "weight"), plain_grads, blocked_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), f"seed {seed}: d loss / d {name} differs"


def test_the_model_loss_is_the_plain_loss_of_its_logits():
    model = build_model(build_config("tiny", 256, hidden_size=32, intermediate_size=64, mamba_head_dim=16,
                                     num_attention_heads=2, num_key_value_heads=1, head_dim=16), seed=0)
    windows = torch.randint(0, 256, (2, 33), generator=torch.Generator().manual_seed(1))
    plain = F.cross_entropy(model(input_ids=windows[:, :-1], use_cache=False).logits.flatten(0, 1),
                            windows[:, 1:].flatten())
    blocked = CausalLMLoss(model, block_size=16)(windows[:, :-1], windows[:, 1:])
    assert torch.allclose(plain, blocked, rtol=1e-6)
    blocked.backward()
    assert model.lm_head.weight.grad is not None and model.model.embeddings.weight.grad is not None


def test_under_bf16_autocast_the_loss_is_close_and_fp32():
    plain, _, hidden, weight = plain_and_blocked(3, 64, ignored=0.0)
    targets = torch.randint(0, 97, (hidden.shape[0],), generator=torch.Generator().manual_seed(3))
    hidden32, weight32 = hidden.detach().float().requires_grad_(), weight.detach().float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        blocked = linear_cross_entropy(hidden32, weight32, targets, block_size=64)
    exact = F.cross_entropy(hidden32 @ weight32.t(), targets)
    blocked.backward()
    assert blocked.dtype == torch.float32 and weight32.grad.dtype == torch.float32
    assert abs(blocked.item() - exact.item()) < 0.05 * exact.item()  # bf16 products: ~3 significant digits


def test_all_targets_ignored_gives_zero_not_nan():
    hidden, weight = torch.randn(4, 8, requires_grad=True), torch.randn(10, 8)
    loss = linear_cross_entropy(hidden, weight, torch.full((4,), IGNORE_INDEX))
    loss.backward()
    assert loss.item() == 0.0 and torch.all(hidden.grad == 0)


@pytest.mark.parametrize("seed", range(6))
def test_a_target_far_below_the_largest_logit_keeps_an_exact_finite_loss(seed):
    # fp32, hidden states scaled so that some targets' logits sit 100-1,000 below their row's largest:
    # p(target) underflows to 0 there, and -log p(target) would be inf.
    generator = torch.Generator().manual_seed(seed)
    tokens, width, vocab = 64 + seed * 37, 16, 211
    hidden = (torch.randn(tokens, width, generator=generator) * 60).requires_grad_()
    weight = torch.randn(vocab, width, generator=generator).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,), generator=generator)
    targets[::5] = IGNORE_INDEX
    logits = (hidden @ weight.t()).double()
    kept = targets != IGNORE_INDEX
    gaps = logits.amax(-1) - logits.gather(1, targets.clamp(min=0)[:, None]).squeeze(1)
    assert (gaps[kept] > 104).any(), f"seed {seed}: no target underflows, the test would not test the fix-up"
    exact = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
    blocked = linear_cross_entropy(hidden, weight, targets, block_size=[16, 1000][seed % 2])
    assert torch.isfinite(blocked), f"seed {seed}"
    assert torch.allclose(blocked.double(), exact, rtol=1e-5), f"seed {seed}: {blocked.item()} vs {exact.item()}"
    plain = F.cross_entropy(hidden @ weight.t(), targets, ignore_index=IGNORE_INDEX)
    for name, a, b in zip(("hidden", "weight"), torch.autograd.grad(blocked, [hidden, weight]),
                          torch.autograd.grad(plain, [hidden, weight]), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6 * b.abs().max().item()), f"seed {seed}: d/d{name}"


def test_the_default_block_holds_at_most_block_logits():
    assert block_tokens(4096) == 1024 and block_tokens(131072) == 32 and block_tokens(1 << 30) == 1
    assert block_tokens(4096) * 4096 <= BLOCK_LOGITS < (block_tokens(4096) + 1) * 4096
