"""The same answer whatever else is running: `nemotron.serve.engine` decodes every running request in one
forward pass, and a request's greedy tokens and log-probs must not depend on what shares that pass.

Seeded prompts of different lengths are decoded alone (one after another), then all at once, then joining a
long request mid-stream; greedy tokens must be identical and each token's log-prob within 1e-4 of the
alone run's. Where a greedy token flips under batching, the failure names the prompt, the position, the two
tokens and the gap between them in the alone run (a near-tie broken by float rounding, or a real bug when
the gap is large). nano2 and nano3 run as untrained tiny models (seconds); SmolLM2 is the real 135M model.
"""

from __future__ import annotations

import random
import time

import pytest
import torch

from builders import chatterbot_texts
from nemotron.serve.engine import Engine, GenerationRequest, GenerationResult

TOLERANCE = 1e-4  # log-prob agreement between a row decoded alone and in a batch (float32 rounding: ~1e-6)
MAX_TOKENS = 10


def seeded_prompts(vocab: int, count: int, seed: int = 0) -> list[list[int]]:
    """`count` prompts of 3 to 40 random token ids (above the special tokens), of different lengths but the last
    two (prefilled together, padded or not)."""
    rng = random.Random(seed)
    lengths = rng.sample(range(3, 41), count - 1)
    lengths.append(lengths[-1])
    return [[rng.randrange(8, vocab) for _ in range(n)] for n in lengths]


def request(prompt: list[int], max_tokens: int = MAX_TOKENS) -> GenerationRequest:
    return GenerationRequest(prompt_ids=prompt, max_tokens=max_tokens, temperature=0.0, logprobs=2)


def alone(engine: Engine, prompts: list[list[int]]) -> list[GenerationResult]:
    return [engine.submit(request(p)).result(timeout=300) for p in prompts]


def together(engine: Engine, prompts: list[list[int]]) -> list[GenerationResult]:
    futures = [engine.submit(request(p)) for p in prompts]
    return [f.result(timeout=300) for f in futures]


def joining_mid_stream(engine: Engine, prompts: list[list[int]]) -> list[GenerationResult]:
    """A long request starts; the others are sent once it has decoded a few steps, so they join its batch."""
    steps = engine.stats["steps"]
    long = engine.submit(request(prompts[0], max_tokens=60))
    while engine.stats["steps"] < steps + 3 and not long.done():
        time.sleep(0.001)
    futures = [engine.submit(request(p)) for p in prompts[1:]]
    results = [long.result(timeout=300)] + [f.result(timeout=300) for f in futures]
    results[0] = GenerationResult(results[0].text, results[0].completion_ids[:MAX_TOKENS], "",
                                  results[0].logprobs[:MAX_TOKENS])
    return results


def assert_same_answers(reference: list[GenerationResult], batched: list[GenerationResult], how: str) -> None:
    for i, (one, many) in enumerate(zip(reference, batched, strict=True)):
        for position, (a, b) in enumerate(zip(one.logprobs, many.logprobs, strict=False)):
            if a.token != b.token:
                alternatives = dict(a.top)
                gap = a.logprob - alternatives.get(b.token, float("-inf"))
                pytest.fail(f"{how}: prompt {i}, completion token {position}: alone chose {a.token}, batched chose "
                            f"{b.token}; their log-probs were {gap:.2e} apart when decoded alone"
                            f"{' (a near-tie)' if gap < 1e-3 else ''}")
            assert abs(a.logprob - b.logprob) <= TOLERANCE, (
                f"{how}: prompt {i}, completion token {position} ({a.token}): log-prob {b.logprob} batched, "
                f"{a.logprob} alone ({abs(a.logprob - b.logprob):.1e} apart, more than {TOLERANCE})")
            for (_, x), (_, y) in zip(a.top, b.top, strict=True):
                assert abs(x - y) <= TOLERANCE, f"{how}: prompt {i}, position {position}: top log-probs differ"
        assert one.completion_ids == many.completion_ids, f"{how}: prompt {i} ended at another length"


def check_batch_invariance(model, tokenizer, count: int = 5) -> None:
    torch.set_num_threads(1)
    engine = Engine(model.eval(), tokenizer, max_batch_size=8)
    prompts = seeded_prompts(engine.vocab_size, count)
    reference = alone(engine, prompts)
    assert engine.stats["max_batch"] == 1
    prefills = engine.stats["prefills"]
    assert_same_answers(reference, together(engine, prompts), "all at once")
    assert engine.stats["max_batch"] >= 2, "the requests sent together never ran in one batch"
    assert_same_answers(reference, joining_mid_stream(engine, prompts), "joining mid-stream")
    assert engine.stats["max_batch"] == count
    # prompts that arrive together are prefilled in one pass, left-padded (the engine may take its waiting
    # requests between two sends, so a run may need more passes than one; never one per prompt in both)
    assert engine.stats["prefills"] - prefills < 2 * count, "the prompts sent together were prefilled one by one"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from nemotron.data_prep.chat.templates import chat_template_named
    from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(chatterbot_texts(), 1024, folder, chat_template=chat_template_named("nano2").jinja)
    return load_tokenizer(folder)


@pytest.mark.parametrize("family", ["nano2", "nano3"])
def test_greedy_tokens_and_logprobs_do_not_depend_on_the_batch(family, tokenizer):
    """nano2 (Mamba-2 + attention) and nano3 (+ MoE), untrained tiny models: alone, together, joining."""
    from nemotron.models import nano2, nano3
    from nemotron.models.hybrid import build_model

    config = (nano2 if family == "nano2" else nano3).build_config("tiny", len(tokenizer))
    check_batch_invariance(build_model(config, seed=0), tokenizer)


@pytest.mark.slow
def test_smollm2_greedy_tokens_and_logprobs_do_not_depend_on_the_batch():
    """SmolLM2-135M-Instruct (Llama: rotary positions, so each row's own position ids matter)."""
    from nemotron.models.reference import SMOLLM2, load_reference_model

    check_batch_invariance(*load_reference_model(SMOLLM2), count=5)  # 5 rows: steps on oneDNN's packed weights


def test_a_request_whose_cache_would_not_fit_is_refused_with_the_figure(tokenizer):
    """A full batch padded to this request's length must fit the memory the server keeps for caches."""
    from nemotron.errors import NemotronError
    from nemotron.models import nano2
    from nemotron.models.hybrid import build_model

    model = build_model(nano2.build_config("tiny", len(tokenizer)), seed=0).eval()
    probe = Engine(model, tokenizer, max_batch_size=4)
    assert probe.row_bytes > 0 and probe.token_bytes_per_row > 0  # Mamba states; attention keys and values
    budget = probe.batch_bytes(100)
    engine = Engine(model, tokenizer, max_batch_size=4, cache_memory=budget)
    assert engine.submit(request([9] * 50, max_tokens=50)).result(timeout=60).completion_ids
    with pytest.raises(NemotronError, match=r"\(101 tokens\) needs .* MiB of cache per row, .* batch of 4 rows"):
        engine.submit(request([9] * 51, max_tokens=50))


def test_the_attention_buffers_write_in_place_and_grow_past_their_room():
    """`RoomyLayer` holds what `DynamicLayer`'s concatenation would: two blocks left-padded with zeros, then the
    steps' columns, written into the room and, past it, into a grown buffer; `keep` drops rows."""
    from torch.nn.functional import pad

    from nemotron.serve.stacked import RoomyLayer

    a, b = torch.randn(1, 2, 3, 4), torch.randn(2, 2, 5, 4)
    layer = RoomyLayer([a, b], [-a, -b], width=5, room=1)
    keys, values = torch.cat([pad(a, (0, 0, 2, 0)), b]), torch.cat([pad(-a, (0, 0, 2, 0)), -b])
    first_buffer = layer.key_buffer
    for _ in range(3):
        step = torch.randn(3, 2, 1, 4)
        keys, values = torch.cat([keys, step], dim=-2), torch.cat([values, -step], dim=-2)
        assert all(torch.equal(x, y) for x, y in zip(layer.update(step, -step), (keys, values), strict=True))
    assert layer.key_buffer is not first_buffer  # the second step passed the one spare column
    layer.keep(torch.tensor([0]), cut=2)  # row 0 alone: the two leading columns were its padding only
    assert torch.equal(layer.keys, keys[:1, :, 2:]) and torch.equal(layer.values, values[:1, :, 2:])
