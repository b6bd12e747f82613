"""No NaN where a learner meets one: empty micro-batches, very short sequences and batches of one.

A micro-batch with no trained tokens (every position loss-masked), a sequence of one or two tokens and a
batch of a single example are where a hand-written loss divides by zero or takes a mean of nothing. Each
test builds the real loss of a training step (SFT's `sft_backward`, DPO's `completion_logprobs` and `dpo_loss`,
GRPO's `policy_loss` on `sampled_logprobs`) on the recipes' own tiny models (nano2's hybrid Mamba
model, nano3's MoE), and checks the loss is finite and the gradients are right: zero for a batch that
trains nothing, and equal to a plain per-token computation (log-softmax of one forward pass per example)
otherwise.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nemotron.data_prep.packing import PackedRow
from nemotron.models import nano2, nano3
from nemotron.training.dpo import dpo_loss
from nemotron.training.grpo import group_advantages, policy_loss, sampled_logprobs
from nemotron.training.logprobs import completion_logprobs
from nemotron.training.packed_batches import collate_packed, masked_token_loss, sft_backward

VOCAB = 96


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(family: str) -> torch.nn.Module:
    module = nano2 if family == "nano2" else nano3
    return module.build_model(module.build_config("tiny", VOCAB), seed=0).train()


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient (zeros where backward left none), then cleared for the next pass."""
    grads = {name: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
             for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


def assert_same_gradients(actual: dict, expected: dict) -> None:
    """Equal to float32 rounding. The two sides sum the same terms in another order (a batched pass against
    one pass per example), so an element's error scales with the largest gradient of its tensor, not with
    the element: an embedding entry of -0.00203 against a largest entry of 2.0 differed by 1.6e-6 on an AMD
    EPYC machine, 8e-4 of itself. A wrong gradient is off by a share of the largest entry, far above this."""
    for name, grad in actual.items():
        assert torch.isfinite(grad).all(), name
        scale = float(expected[name].abs().max())
        torch.testing.assert_close(grad, expected[name], rtol=1e-4, atol=max(1e-6, 1e-5 * scale), msg=name)


def plain_token_logprobs(model, ids: list[int]) -> torch.Tensor:
    """log p(ids[t+1] | ids[:t+1]) for every t, from one forward pass of this sequence alone."""
    logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double()
    return torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def row(ids: list[int], trained: list[int]) -> PackedRow:
    """One conversation; `trained[i]` = 1 when predicting ids[i + 1] is trained (the last is never)."""
    return PackedRow(input_ids=np.array(ids, dtype=np.int32), loss_mask=np.array(trained, dtype=np.int8),
                     seq_start_id=np.zeros(1, dtype=np.int32))


def sft_step(model, micro_batches) -> torch.Tensor:
    batches = [collate_packed(rows, pad_id=0) for rows in micro_batches]
    return sft_backward(model, None, contextlib.nullcontext(), batches)


# --- SFT ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["nano2", "nano3"])
def test_sft_all_masked_micro_batch_gives_zero_loss_and_zero_gradient(family):
    model = build(family)
    loss = sft_step(model, [[row([5, 6, 7, 8, 9], [0, 0, 0, 0, 0])]])
    assert torch.isfinite(loss) and float(loss) == 0.0
    assert all(float(g.abs().max()) == 0.0 for g in gradients(model).values())


@pytest.mark.parametrize("family", ["nano2", "nano3"])
def test_sft_masked_micro_batch_beside_a_trained_one_changes_nothing(family):
    model = build(family)
    trained = [row([3, 4, 5, 6, 7, 8], [0, 1, 1, 1, 1, 0])]
    empty = [row([9, 10, 11], [0, 0, 0])]
    alone = sft_step(model, [trained])
    expected = gradients(model)
    with_empty = sft_step(model, [empty, trained])
    assert torch.isfinite(with_empty)
    torch.testing.assert_close(with_empty, alone)
    if family == "nano2":  # nano3's MoE balancing loss is not passed here; the token loss is what is tested
        assert_same_gradients(gradients(model), expected)


@pytest.mark.parametrize("family", ["nano2", "nano3"])
@pytest.mark.parametrize("ids", [[7, 8], [7, 8, 9]], ids=["two_tokens", "three_tokens"])
def test_sft_very_short_sequence_and_batch_of_one_equal_the_plain_per_token_loss(family, ids):
    model = build(family)
    trained = [1] * (len(ids) - 1) + [0]
    loss = sft_step(model, [[row(ids, trained)]])
    actual = gradients(model)
    reference = -plain_token_logprobs(model, ids).mean()  # every target trained: the plain mean
    reference.backward()
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss.double(), reference.detach().double(), rtol=1e-5, atol=1e-6)
    assert_same_gradients(actual, gradients(model))


def test_sft_one_token_sequence_has_nothing_to_train_and_is_finite():
    model = build("nano2")
    batch = collate_packed([row([7], [0])], pad_id=0)
    logits = model(**batch.model_inputs(), use_cache=False).logits
    loss = masked_token_loss(logits, batch)
    assert torch.isfinite(loss) and float(loss) == 0.0
    assert float(sft_step(model, [[row([7], [0])]])) == 0.0


# --- DPO ---------------------------------------------------------------------------------------


def test_dpo_batch_of_one_with_one_token_answers_equals_the_plain_loss():
    model = build("nano2")
    prompts, chosen, rejected = [[4]], [[11]], [[12]]  # the shortest pair there is: 2 tokens per answer
    reference = (torch.tensor([-4.0], dtype=torch.float64), torch.tensor([-4.5], dtype=torch.float64))
    # what the DPO step computes (its loop writes this out): both answers in one forward, then the loss
    policy = completion_logprobs(model, prompts * 2, chosen + rejected, batch_size=2)
    loss, _, _ = dpo_loss(policy[:1], policy[1:], *reference, beta=0.1)
    loss.backward()
    actual = gradients(model)
    chosen_logp = plain_token_logprobs(model, [4, 11])[-1]
    rejected_logp = plain_token_logprobs(model, [4, 12])[-1]
    h = (chosen_logp - reference[0][0]) - (rejected_logp - reference[1][0])
    plain = -F.logsigmoid(0.1 * h)
    plain.backward()
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss.double(), plain.detach().double(), rtol=1e-5, atol=1e-6)
    assert_same_gradients(actual, gradients(model))


@pytest.mark.parametrize("variant, smoothing", [("sigmoid", 0.0), ("conservative", 0.1), ("ipo", 0.0)])
def test_dpo_loss_stays_finite_for_extreme_log_ratios(variant, smoothing):
    """A pair the policy already separates by thousands of nats (or gets wrong by as much): logsigmoid,
    not log(sigmoid), keeps the loss and its gradient finite."""
    policy = torch.tensor([0.0, -5000.0, -1e-3], dtype=torch.float64, requires_grad=True)
    rejected = torch.tensor([-5000.0, 0.0, -1e-3], dtype=torch.float64, requires_grad=True)
    zeros = torch.zeros(3, dtype=torch.float64)
    loss, chosen_rewards, rejected_rewards = dpo_loss(policy, rejected, zeros, zeros, 0.1, variant, smoothing)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(policy.grad).all() and torch.isfinite(rejected.grad).all()
    assert torch.isfinite(chosen_rewards).all() and torch.isfinite(rejected_rewards).all()


# --- GRPO --------------------------------------------------------------------------------------


def test_grpo_group_with_equal_rewards_teaches_nothing_and_stays_finite():
    """All completions of a group equally rewarded: zero advantages (not 0/0), so zero gradient."""
    advantages = group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), group_size=2)
    assert torch.equal(advantages, torch.zeros(4))
    model = build("nano3")
    prompts, completions = [[4, 5], [4, 5], [6], [6]], [[7], [8, 9], [10], [11]]
    with torch.no_grad():
        old, mask = sampled_logprobs(model, prompts, completions)
    logprobs, _ = sampled_logprobs(model, prompts, completions)
    parts = policy_loss(logprobs, old, advantages, mask)
    parts.loss.backward()
    assert torch.isfinite(parts.loss) and float(parts.loss) == 0.0
    assert all(float(g.abs().max()) == 0.0 for g in gradients(model).values())


def test_grpo_all_masked_batch_gives_zero_loss_and_zero_gradient():
    model = build("nano3")
    prompts, completions = [[4, 5, 6]], [[7, 8]]
    logprobs, mask = sampled_logprobs(model, prompts, completions)
    parts = policy_loss(logprobs, logprobs.detach(), torch.tensor([1.0], dtype=torch.float64), torch.zeros_like(mask))
    parts.loss.backward()
    assert torch.isfinite(parts.loss) and float(parts.loss) == 0.0 and parts.clipped == 0.0
    assert all(float(g.abs().max()) == 0.0 for g in gradients(model).values())


@pytest.mark.parametrize("completion", [[7], [7, 8, 9]], ids=["one_token", "three_tokens"])
def test_grpo_batch_of_one_short_completion_equals_the_plain_per_token_loss(completion):
    """One prompt token, one completion: GRPO's loss at ratio 1 is -A x the mean completion log-prob's
    gradient direction; its value and gradient equal the plain per-token surrogate."""
    model = build("nano3")
    prompt, advantage = [4], torch.tensor([0.7], dtype=torch.float64)
    with torch.no_grad():
        old, mask = sampled_logprobs(model, [prompt], [completion])
    logprobs, _ = sampled_logprobs(model, [prompt], [completion])
    parts = policy_loss(logprobs, old, advantage, mask)
    parts.loss.backward()
    actual = gradients(model)
    token_logprobs = plain_token_logprobs(model, prompt + completion)[-len(completion):]
    ratio = torch.exp(token_logprobs - token_logprobs.detach())
    plain = -(ratio * 0.7).mean()
    plain.backward()
    assert torch.isfinite(parts.loss) and parts.clipped == 0.0
    torch.testing.assert_close(parts.loss.double(), plain.detach().double(), rtol=1e-5, atol=1e-6)
    assert_same_gradients(actual, gradients(model))
