"""Completion-only NLL and multiple-choice scores vs lm-eval 0.4.13's `loglikelihood`, on random requests.

`test_post_training_score.py` checks our completion NLL against lm-eval on the shipped demo records;
this widens it to seeded random contexts and continuations (unicode, punctuation, newlines, leading
and trailing spaces, pieces that merge across the boundary) scored by lm-eval's own `HFLM.loglikelihood`
on the same model object, and to multiple-choice items whose acc / acc_norm picks are recomputed from
lm-eval's log-likelihoods with its rules (argmax of the sum; of the sum over the choice's characters).

Our two documented differences from lm-eval are checked as such, not skipped:
- a context ending in whitespace: lm-eval moves that whitespace into the continuation, we keep it in the
  context (a chat prompt's final newline stays in the prompt); ours then equals lm-eval's score of the
  request with the whitespace moved by hand;
- an empty context: lm-eval conditions on its prefix token, we refuse with a clear error (so do we for a
  continuation that adds no token of its own, where lm-eval scores nothing).

Fast tier: LM_EVAL_CASES_FAST requests (default 200). Deep tier (slow): LM_EVAL_CASES (default 2,000).
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer
from nemotron.errors import NemotronError
from nemotron.evaluation.multiple_choice import MCItem, mc_accuracy
from nemotron.training.logprobs import encode_pair, loglikelihood
from randomized import check_every_seed, deep_count

WORDS = ["the", "king", "Hamlet", "answer", "ice", "water", "über", "naïve", "東京", "😀", "—", "42", "3.14",
         "don't", "<|im_end|>", "\n", "\t", "a", "is", "(", ")", ":", "?", "!", ",", "''"]


def random_text(rng: random.Random, words: int) -> str:
    parts = [rng.choice(WORDS) if rng.random() < 0.8 else chr(rng.randint(33, 0x2FF)) for _ in range(words)]
    return "".join(part + rng.choice(["", " ", " ", " ", "  ", "\n"]) for part in parts)


def random_request(rng: random.Random) -> tuple[str, str]:
    context = random_text(rng, rng.randint(0, 30))
    continuation = rng.choice(["", " ", "\n"]) + random_text(rng, rng.randint(1, 12)).rstrip()
    return context, continuation if continuation.strip() else continuation + "x"


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    """A random tiny Llama with a tokenizer trained on the word list, and lm-eval's HFLM around the same objects."""
    from lm_eval.models.huggingface import HFLM

    rng = random.Random(0)
    folder = train_tokenizer([random_text(rng, 40) for _ in range(300)], 400, tmp_path_factory.mktemp("tok") / "tok")
    tokenizer = load_tokenizer(folder)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=1024, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id)).eval()
    return model, tokenizer, HFLM(pretrained=model, tokenizer=tokenizer, batch_size=16, device="cpu")


def lm_eval_loglikelihoods(lm, requests: list[tuple[str, str]]) -> list[float]:
    from lm_eval.api.instance import Instance

    instances = [Instance(request_type="loglikelihood", doc={}, arguments=request, idx=i)
                 for i, request in enumerate(requests)]
    return [logprob for logprob, _ in lm.loglikelihood(instances, disable_tqdm=True)]


def moved_whitespace(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's rule: trailing whitespace of the context goes to the front of the continuation."""
    spaces = len(context) - len(context.rstrip())
    return (context[:-spaces], context[-spaces:] + continuation) if spaces else (context, continuation)


def check_requests(seeds, peer) -> None:
    model, tokenizer, lm = peer
    requests = {seed: random_request(random.Random(seed)) for seed in seeds}
    for seed, (context, continuation) in list(requests.items()):
        if context.strip() == "":  # empty once lm-eval moves its whitespace: lm-eval uses its prefix token
            with pytest.raises(NemotronError, match="context rendered to no tokens"):
                loglikelihood(model, tokenizer, [moved_whitespace(context, continuation)])
            del requests[seed]
            continue
        try:
            encode_pair(tokenizer, context, continuation)
        except NemotronError:  # a continuation that merges wholly into the context's last token: refused
            assert lm._encode_pair(*moved_whitespace(context, continuation))[1] == [] or context[-1:].isspace()
            del requests[seed]
    ours = dict(zip(requests, loglikelihood(model, tokenizer, list(requests.values()), batch_size=16), strict=True))
    theirs = dict(zip(requests, lm_eval_loglikelihoods(lm, [moved_whitespace(*r) for r in requests.values()]),
                      strict=True))

    def check(seed: int) -> None:
        if seed not in requests:
            return
        context, continuation = requests[seed]
        ours_context, ours_continuation = moved_whitespace(context, continuation)
        if (ours_context, ours_continuation) != (context, continuation):  # the documented difference
            [(logprob, _)] = loglikelihood(model, tokenizer, [(ours_context, ours_continuation)])
        else:
            logprob = ours[seed][0]
        assert logprob == pytest.approx(theirs[seed], rel=1e-5, abs=1e-4), (
            f"context {context!r}, continuation {continuation!r}: ours {logprob:.6f}, lm-eval {theirs[seed]:.6f}")

    check_every_seed("LM_EVAL", len(seeds), lambda index: check(seeds[index]))


def check_multiple_choice(count: int, peer) -> None:
    """acc and acc_norm picks: ours vs argmaxes of lm-eval's log-likelihoods (unambiguous items only)."""
    model, tokenizer, lm = peer
    rng = random.Random(count)
    items = []
    for _ in range(max(1, count // 4)):
        choices = tuple(dict.fromkeys(" " + random_text(rng, rng.randint(1, 5)).strip() or " x" for _ in range(4)))
        items.append(MCItem(question=random_text(rng, rng.randint(1, 20)).rstrip() or "Q",
                            choices=choices, answer_index=rng.randrange(len(choices))))
    result = mc_accuracy(model, tokenizer, items, render_context=lambda question: question, batch_size=16)
    logprobs = iter(lm_eval_loglikelihoods(lm, [(item.question, choice) for item in items for choice in item.choices]))
    for index, (item, ours) in enumerate(zip(items, result.items, strict=True)):
        theirs = np.array([next(logprobs) for _ in item.choices])
        normalised = theirs / np.array([len(choice) for choice in item.choices])
        for scores, picked, name in ((theirs, ours.predicted, "acc"), (normalised, ours.predicted_norm, "acc_norm")):
            top = np.sort(scores)[::-1]
            if len(top) > 1 and top[0] - top[1] < 1e-3:
                continue  # a near tie: float noise between two batchings may pick either
            assert picked == int(np.argmax(scores)), f"item {index} ({item}): {name} ours {picked}, lm-eval {scores}"


def test_loglikelihood_matches_lm_eval_on_random_requests(peer):
    count = int(os.environ.get("LM_EVAL_CASES_FAST", 200))
    check_requests(list(range(count)), peer)
    check_multiple_choice(count, peer)


@pytest.mark.slow
def test_loglikelihood_matches_lm_eval_on_random_requests_deep(peer):
    count = deep_count("LM_EVAL", 2000)
    check_requests(list(range(count)), peer)
    check_multiple_choice(count, peer)
