"""GRPO's maths on tiny inputs worked by hand, and the verifiable addition task and its rewards."""

import math

import pytest
import torch

from nemotron.data_prep import verifiable
from nemotron.data_prep.chat.nano3 import render_nano3
from nemotron.errors import NemotronError
from nemotron.training.grpo import check_group_size, group_advantages, policy_loss


def test_advantages_are_normalised_within_each_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    advantages = group_advantages(rewards, group_size=4)
    std = math.sqrt(0.25 * 0.75)  # one of four right: mean 0.25, population std
    expected = [0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std]
    assert advantages[:4].tolist() == pytest.approx(expected, rel=1e-5)
    assert advantages[4:].tolist() == [0.0] * 4  # a group that all agrees teaches nothing


@pytest.mark.parametrize("batch, group, fragment", [
    (6, 4, "a batch of 6 completions is not whole groups of --group-size 4"),
    (4, 1, "a group needs at least 2 completions"),
])
def test_group_size_that_does_not_divide_the_batch_is_one_line(batch, group, fragment):
    with pytest.raises(NemotronError, match=fragment) as error:
        check_group_size(batch, group)
    assert "\n" not in str(error.value)


def test_on_policy_loss_is_minus_the_token_mean_advantage_and_prompt_tokens_do_not_count():
    logprobs = torch.log(torch.tensor([[0.5, 0.5, 0.2], [0.4, 0.1, 0.9]]))
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])  # token 0 is the prompt; the last of row 2 is padding
    advantages = torch.tensor([2.0, -1.0])
    parts = policy_loss(logprobs, logprobs.clone(), advantages, mask)
    assert parts.loss.item() == pytest.approx(-(2 + 2 - 1) / 3)  # per token over the batch (DAPO)
    changed = logprobs.clone()
    changed[0, 0], changed[1, 2] = -9.0, -9.0  # outside the mask: no effect, even off-policy
    assert policy_loss(changed, changed.clone(), advantages, mask).loss.item() == pytest.approx(parts.loss.item())


def test_clipping_stops_the_push_only_in_the_direction_of_the_advantage():
    old = torch.zeros(2, 1)
    new = torch.full((2, 1), 0.5, requires_grad=True)  # ratio e^0.5 = 1.65 > 1.2
    parts = policy_loss(new, old, torch.tensor([1.0, -1.0]), torch.ones(2, 1), clip_eps=0.2)
    # good completion: min(1.65, 1.2) x 1 = 1.2 (clipped, no gradient);
    # bad one: min(-1.65, -1.2) = -1.65 (the pessimistic bound keeps its gradient)
    assert parts.loss.item() == pytest.approx(-(1.2 - math.exp(0.5)) / 2)
    parts.loss.backward()
    assert new.grad[0, 0].item() == 0.0 and new.grad[1, 0].item() == pytest.approx(math.exp(0.5) / 2)
    assert parts.clipped == 1.0


def test_kl_to_the_reference_is_the_k3_estimate_and_zero_at_the_reference():
    logprobs = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    parts = policy_loss(logprobs, logprobs, torch.zeros(1), torch.ones(1, 1), ref_logprobs=ref, kl_beta=0.1)
    delta = math.log(0.25) - math.log(0.5)
    assert parts.kl == pytest.approx(math.exp(delta) - delta - 1)
    assert parts.loss.item() == pytest.approx(0.1 * parts.kl)
    same = policy_loss(logprobs, logprobs, torch.zeros(1), torch.ones(1, 1), ref_logprobs=logprobs, kl_beta=0.1)
    assert same.kl == 0.0


def test_addition_problems_are_seeded_distinct_and_worked_column_by_column():
    problems = verifiable.addition_problems(50, seed=3)
    assert problems == verifiable.addition_problems(50, seed=3) != verifiable.addition_problems(50, seed=4)
    assert len({p.key for p in problems}) == 50  # distinct by the numbers asked, whatever the wording
    problem = verifiable.Addition(47, 38)
    assert problem.reasoning == "7 + 8 = 15, write 5, carry 1; 4 + 3 + 1 = 8, write 8. So 47 + 38 = 85."
    assert verifiable.Addition(95, 17).reasoning.endswith("write the carry 1. So 95 + 17 = 112.")
    text = render_nano3(problem.messages())
    assert text.endswith("<think>\n" + problem.reasoning + "\n</think>\n85<|im_end|>\n")
    train, held_out = verifiable.split_problems(problems, 0.2, seed=0)
    assert len(held_out) == 10 and not {p.key for p in train} & {p.key for p in held_out}


@pytest.mark.parametrize("completion, value", [
    ("7 + 8 = 15 ...\n</think>\n85", 1.1),  # right and well formed
    ("thinking\n</think>\n84", 0.1),  # well formed, wrong
    ("85", 0.0),  # never closed its thoughts
    ("x\n</think>\n85 or 86", 0.0),  # two answers
])
def test_reward_is_correctness_plus_a_format_bonus(completion, value):
    assert verifiable.reward(completion, "85") == pytest.approx(value)


def test_a_reward_function_that_raises_or_returns_nonsense_is_one_line():
    def broken(completion, answer):
        return int(completion)

    with pytest.raises(NemotronError, match=r"reward function .*broken raised ValueError.* completion 1") as error:
        verifiable.score(broken, ["1", "not a number"], ["1", "2"])
    assert "\n" not in str(error.value)
    with pytest.raises(NemotronError, match="returned nan"):
        verifiable.score(lambda c, a: float("nan"), ["x"], ["1"])
    assert verifiable.score(verifiable.reward, ["a\n</think>\n3"], ["3"]) == [pytest.approx(1.1)]


def test_check_reward_function_refuses_one_that_cannot_score_text_and_passes_ours():
    verifiable.check_reward_function(verifiable.reward)  # the default scores the probe: no error
    with pytest.raises(NemotronError, match=r"reward function .* raised ZeroDivisionError"):
        verifiable.check_reward_function(lambda completion, answer: 1 / 0)
    with pytest.raises(NemotronError, match="returned inf"):
        verifiable.check_reward_function(lambda completion, answer: float("inf"))
    with pytest.raises(NemotronError, match="returned '1'"):
        verifiable.check_reward_function(lambda completion, answer: "1")


def test_every_scale_asks_for_no_more_problems_than_its_digits_allow():
    from nemotron.artifact import SCALES, apply_scale
    from nemotron.recipes.nano3.stage1_sft import data_curation

    for scale in SCALES:
        digits = data_curation.DIGITS[scale]
        wanted = apply_scale(data_curation.FULL_PROBLEMS, scale)
        distinct = (10**digits - 10 ** (digits - 1)) ** 2
        assert wanted <= distinct // 2, (scale, wanted, distinct)  # room for distinct seeded draws
    assert len(verifiable.addition_problems(apply_scale(data_curation.FULL_PROBLEMS, "small"), 0, 3)) == 10_000


def test_held_out_gain_is_the_mean_paired_difference_with_its_standard_error():
    from nemotron.recipes.nano3.stage2_rl.evaluation import paired_gain

    gain, stderr = paired_gain([1.0, 1.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.0])  # differences 1, 0, 0.5, 0
    assert gain == pytest.approx(0.375)
    spread = math.sqrt(((1 - 0.375) ** 2 + 2 * 0.375**2 + 0.125**2) / 3)
    assert stderr == pytest.approx(spread / 2)
    assert paired_gain([0.5, 0.5], [0.5, 0.5]) == (0.0, 0.0)
