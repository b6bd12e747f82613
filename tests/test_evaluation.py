"""Tests for nemotron.evaluation: every score is checked against a plain, unbatched log_softmax of a real
tiny model (Nemotron-H hybrid Mamba and Llama, randomly initialised, CPU), every formula against numbers
worked out by hand, and a tiny model trained here for a second must prefer the answers it memorised."""

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    NemotronHConfig,
    NemotronHForCausalLM,
    PreTrainedTokenizerFast,
)

from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE, tokenize_conversation, tokenize_prompt
from nemotron.data_prep.tokenizer import EOS_ID, IM_END_ID, load_tokenizer, train_tokenizer
from nemotron.errors import NemotronError
from nemotron.evaluation.generation import greedy_samples
from nemotron.evaluation.language_modeling import (
    UnigramBaseline,
    bits_per_byte,
    heldout_loss,
    perplexity,
    target_utf8_bytes,
)
from nemotron.evaluation.multiple_choice import MCItem, build_mc_items, mc_accuracy
from nemotron.evaluation.preference import preference_accuracy
from nemotron.training.dpo import dpo_loss, reward_metrics
from nemotron.training.logprobs import completion_logprobs, encode_pair, loglikelihood, pair_logprobs

QA = [
    ("What is the capital of France?", "Paris"),
    ("What color is the sky?", "Blue, mostly."),
    ("How many legs does a spider have?", "Eight legs."),
    ("Who wrote Hamlet?", "William Shakespeare"),
    ("What do bees make?", "Honey"),
    ("What is frozen water called?", "Ice"),
    ("Which planet is red?", "Mars, the red planet"),
    ("What do cows drink?", "Water"),
]
UNICODE_TEXT = "café naïve — 日本語 🙂 done"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matmuls are dominated by thread hand-offs; one thread is several times faster on 2 cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    texts = [f"{q} {a}" for q, a in QA] * 5 + [UNICODE_TEXT] * 3
    folder = train_tokenizer(
        texts, 320, tmp_path_factory.mktemp("tok") / "tokenizer", chat_template=NANO2_CHAT_TEMPLATE
    )
    return load_tokenizer(folder)


def tiny_nemotron_h(vocab_size: int, seed: int = 0) -> NemotronHForCausalLM:
    torch.manual_seed(seed)
    config = NemotronHConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        layers_block_type=["linear_attention", "full_attention", "mlp"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=64,
        ssm_state_size=8,
        mamba_num_heads=4,
        mamba_head_dim=16,
        n_groups=1,
        chunk_size=16,
        max_position_embeddings=256,
    )
    return NemotronHForCausalLM(config).eval()


def tiny_llama(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module", params=["nemotron_h", "llama"])
def model(request, tokenizer):
    build = tiny_nemotron_h if request.param == "nemotron_h" else tiny_llama
    return build(len(tokenizer))


def chat_prompt(tokenizer, question: str) -> list[int]:
    return tokenize_prompt(tokenizer, [{"role": "user", "content": question}])


def answer_ids(tokenizer, answer: str) -> list[int]:
    return tokenizer.encode(answer, add_special_tokens=False) + [IM_END_ID]


@pytest.fixture(scope="module")
def memorised(tokenizer):
    """A Nemotron-H trained on the QA conversations (assistant tokens only) until it knows them."""
    model = tiny_nemotron_h(len(tokenizer), seed=0)
    conversations = [
        tokenize_conversation(
            tokenizer, [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        )
        for q, a in QA
    ]
    length = max(len(ids) for ids, _ in conversations)
    input_ids = torch.zeros(len(QA), length, dtype=torch.long)
    labels = torch.full((len(QA), length), -100)
    for row, (ids, mask) in enumerate(conversations):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(ids)] = torch.where(torch.tensor(mask) == 1, torch.tensor(ids), -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    model.train()
    for _ in range(100):
        loss = model(input_ids=input_ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def reference_logprobs(model, sequence) -> torch.Tensor:
    """Independent computation: one unpadded sequence, full log_softmax, pick each next token."""
    ids = torch.tensor([list(sequence)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].double()
    return torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None]).squeeze(1)


def random_windows(vocab_size: int, lengths, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab_size, size=n) for n in lengths]


# --------------------------------------------------------------------------------------------------
# language modeling
# --------------------------------------------------------------------------------------------------


def test_heldout_loss_matches_unbatched_log_softmax(model, tokenizer):
    windows = random_windows(len(tokenizer), [9, 17, 5, 12, 2])
    mean_nll, count = heldout_loss(model, windows, batch_size=3)
    reference = torch.cat([reference_logprobs(model, w) for w in windows])
    assert count == sum(len(w) - 1 for w in windows) == len(reference)
    assert mean_nll == pytest.approx(-reference.mean().item(), abs=1e-5)


def test_heldout_loss_scores_only_masked_targets(model, tokenizer):
    windows = random_windows(len(tokenizer), [10, 7], seed=1)
    masks = [np.array([0, 0, 1, 1, 1, 0, 1, 0, 0]), np.array([1, 0, 0, 0, 0, 1])]
    mean_nll, count = heldout_loss(model, windows, loss_masks=masks, batch_size=2)
    reference = torch.cat(
        [reference_logprobs(model, w)[torch.tensor(m, dtype=torch.bool)] for w, m in zip(windows, masks)]
    )
    assert count == 6
    assert mean_nll == pytest.approx(-reference.mean().item(), abs=1e-5)


def test_heldout_loss_is_deterministic_batch_independent_and_restores_train_mode(tokenizer):
    model = tiny_nemotron_h(len(tokenizer), seed=3).train()
    windows = random_windows(len(tokenizer), [20, 33, 8, 15], seed=2)
    first = heldout_loss(model, windows, batch_size=4)
    assert heldout_loss(model, windows, batch_size=4) == first  # bit-identical
    assert heldout_loss(model, windows, batch_size=1)[0] == pytest.approx(first[0], abs=1e-6)
    assert model.training  # the caller's mode is back
    assert all(p.grad is None for p in model.parameters())


def test_heldout_loss_rejects_bad_windows_and_masks(model):
    with pytest.raises(NemotronError, match="window 1 has 1 token"):
        heldout_loss(model, [[1, 2, 3], [4]])
    with pytest.raises(NemotronError, match="loss mask 0 has shape"):
        heldout_loss(model, [[1, 2, 3]], loss_masks=[[1, 1, 1]])
    with pytest.raises(NemotronError, match="no target tokens"):
        heldout_loss(model, [[1, 2, 3]], loss_masks=[[0, 0]])


def test_bits_per_byte_and_perplexity_hand_values():
    # 100 bits of information (100 ln 2 nats) over 50 bytes is 2 bits per byte.
    assert bits_per_byte(100 * math.log(2), 50) == pytest.approx(2.0)
    assert bits_per_byte(3.0, 4) == pytest.approx(3.0 / (4 * 0.6931471805599453))
    assert perplexity(math.log(7.0)) == pytest.approx(7.0)
    with pytest.raises(NemotronError, match="total_utf8_bytes=0"):
        bits_per_byte(1.0, 0)


def test_target_utf8_bytes_counts_exactly_the_scored_text(tokenizer):
    texts = [UNICODE_TEXT, "What do bees make? Honey", "🙂🙂 x"]
    windows = [[EOS_ID] + tokenizer.encode(t, add_special_tokens=False) + [EOS_ID] for t in texts]
    # The first token is context only and the EOS tokens stand for no text: bytes = the texts' bytes.
    assert target_utf8_bytes(tokenizer, windows) == sum(len(t.encode("utf-8")) for t in texts)

    # Cut one text's tokens into two windows at every position, even inside a multi-byte character:
    # the second window repeats the last token of the first as its (unscored) context token.
    ids = tokenizer.encode(UNICODE_TEXT, add_special_tokens=False)
    assert any(tokenizer.decode([t]) == "\ufffd" for t in ids)  # some character really is split
    for cut in range(1, len(ids)):
        halves = [[EOS_ID] + ids[:cut], ids[cut - 1 :]]
        assert target_utf8_bytes(tokenizer, halves) == len(UNICODE_TEXT.encode("utf-8"))

    # With a loss mask only the scored targets count.
    question_ids = tokenizer.encode("What do bees make?", add_special_tokens=False)
    answer = tokenizer.encode(" Honey", add_special_tokens=False)
    window = [EOS_ID] + question_ids + answer
    mask = [0] * len(question_ids) + [1] * len(answer)
    assert target_utf8_bytes(tokenizer, [window], loss_masks=[mask]) == len(" Honey")


def test_target_utf8_bytes_decodes_runs_for_other_tokenizers():
    """A SentencePiece-style (Metaspace) word tokenizer takes the decode path."""
    vocab = {"<s>": 0, "<unk>": 1, "▁hello": 2, "▁wörld": 3, "▁and": 4}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", unk_token="<unk>")
    window = [0, 2, 3, 4, 3]  # <s> ▁hello ▁wörld ▁and ▁wörld
    assert target_utf8_bytes(tokenizer, [window]) == len("hello wörld and wörld".encode())
    # Two runs, "hello wörld" and "wörld": each decoded on its own.
    assert target_utf8_bytes(tokenizer, [window], loss_masks=[[1, 1, 0, 1]]) == 12 + 6


def test_unigram_baseline_hand_values():
    # Training tokens 0, 0, 1 over a vocabulary of 4 with add-one smoothing: counts 3, 2, 1, 1 out of 7.
    baseline = UnigramBaseline.fit([[0, 0], [1]], vocab_size=4, add_k=1.0)
    assert np.exp(baseline.log_probs) == pytest.approx([3 / 7, 2 / 7, 1 / 7, 1 / 7])
    # Window [3, 0, 2]: targets 0 and 2 (the first token is context).
    mean_nll, count = baseline.heldout_loss([[3, 0, 2]])
    assert count == 2
    assert mean_nll == pytest.approx(-(math.log(3 / 7) + math.log(1 / 7)) / 2)
    assert baseline.heldout_loss([[3, 0, 2]], loss_masks=[[0, 1]]) == pytest.approx((-math.log(1 / 7), 1))
    with pytest.raises(NemotronError, match="outside the vocabulary"):
        UnigramBaseline.fit([[0, 4]], vocab_size=4)


def test_trained_model_beats_the_unigram_baseline(memorised, tokenizer):
    conversations = [
        tokenize_conversation(
            tokenizer, [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        )
        for q, a in QA
    ]
    windows = [ids for ids, _ in conversations]
    masks = [mask[1:] for _, mask in conversations]  # unshifted mask -> aligned with targets
    baseline = UnigramBaseline.fit(windows, vocab_size=len(tokenizer))
    model_nll, count = heldout_loss(memorised, windows, loss_masks=masks)
    baseline_nll, baseline_count = baseline.heldout_loss(windows, loss_masks=masks)
    assert count == baseline_count
    assert model_nll < baseline_nll / 2


# --------------------------------------------------------------------------------------------------
# multiple choice
# --------------------------------------------------------------------------------------------------


def test_build_mc_items_never_offers_a_correct_answer_as_distractor():
    pairs = QA + [
        ("Where is the Louvre?", " Paris "),  # same answer text as another pair, with spaces
        ("What is the capital of France?", "It is Paris."),  # a second correct answer to one question
        ("Name a city.", "Paris"),
    ]
    for seed in range(25):
        items = build_mc_items(pairs, num_distractors=3, seed=seed)
        assert len(items) == len(pairs)
        for (question, answer), item in zip(pairs, items):
            assert item.question == question and item.choices[item.answer_index] == answer
            correct = {a.strip() for q, a in pairs if q == question}
            distractors = [c for i, c in enumerate(item.choices) if i != item.answer_index]
            assert len(distractors) == 3
            assert not {d.strip() for d in distractors} & correct
            assert len({c.strip() for c in item.choices}) == 4


def test_build_mc_items_is_seeded():
    assert build_mc_items(QA, seed=7) == build_mc_items(QA, seed=7)
    assert build_mc_items(QA, seed=7) != build_mc_items(QA, seed=8)
    positions = {item.answer_index for seed in range(5) for item in build_mc_items(QA, seed=seed)}
    assert positions == {0, 1, 2, 3}  # the answer is not always in the same slot
    with pytest.raises(NemotronError, match="only 2 possible distractors"):
        build_mc_items(QA[:3], num_distractors=3)


def test_encode_pair_matches_lm_eval(tokenizer):
    lm_eval_model = pytest.importorskip("lm_eval.api.model")

    class TokenizerOnlyLM:  # the two attributes TemplateLM._encode_pair reads
        backend = "causal"

        def tok_encode(self, text, **_):
            return tokenizer.encode(text, add_special_tokens=False)

    for context, continuation in [
        ("Who wrote Hamlet? Answer:", " William Shakespeare"),
        ("Bees make", "honey."),
    ]:
        expected = lm_eval_model.TemplateLM._encode_pair(TokenizerOnlyLM(), context, continuation)
        assert encode_pair(tokenizer, context, continuation) == tuple(map(list, expected))


def test_loglikelihood_matches_unbatched_log_softmax(model, tokenizer):
    requests = [
        ("Who wrote Hamlet? Answer:", " William Shakespeare"),
        ("Bees make", " honey"),
        (chat_prompt(tokenizer, "What is frozen water called?"), answer_ids(tokenizer, "Ice")),
    ]
    results = loglikelihood(model, tokenizer, requests, batch_size=2)
    for (context, continuation), (logprob, num_tokens) in zip(requests, results):
        context_ids, continuation_ids = encode_pair(tokenizer, context, continuation)
        expected = reference_logprobs(model, context_ids + continuation_ids)[-len(continuation_ids) :].sum()
        assert num_tokens == len(continuation_ids)
        assert logprob == pytest.approx(expected.item(), abs=1e-5)


def test_mc_accuracy_picks_argmax_and_normalises_by_characters(model, tokenizer):
    items = build_mc_items(QA, seed=1)
    result = mc_accuracy(
        model,
        tokenizer,
        items,
        render_context=lambda q: f"Question: {q}\nAnswer:",
        render_choice=lambda a: " " + a,
        batch_size=5,
    )
    for detail in result.items:
        context = f"Question: {detail.item.question}\nAnswer:"
        sums = []
        for choice in detail.item.choices:
            context_ids, continuation_ids = encode_pair(tokenizer, context, " " + choice)
            sums.append(
                reference_logprobs(model, context_ids + continuation_ids)[-len(continuation_ids) :]
                .sum()
                .item()
            )
        assert detail.logprobs == pytest.approx(sums, abs=1e-5)
        assert detail.predicted == int(np.argmax(sums))
        assert detail.predicted_norm == int(np.argmax(np.array(sums) / [len(c) for c in detail.item.choices]))
    assert result.accuracy == np.mean([d.predicted == d.item.answer_index for d in result.items])
    assert result.accuracy_norm == np.mean([d.predicted_norm == d.item.answer_index for d in result.items])
    assert result.chance == 0.25
    assert result.metrics("qa")["qa_accuracy"] == result.accuracy
    assert result.accuracy_mutual_info is None and "qa_accuracy_mutual_info" not in result.metrics("qa")


def test_mc_accuracy_mutual_info_subtracts_the_unconditional_score(model, tokenizer):
    items = build_mc_items(QA, seed=1)
    result = mc_accuracy(
        model, tokenizer, items, lambda q: f"Question: {q}\nAnswer:", lambda a: " " + a,
        unconditional_context="Answer:", batch_size=5,
    )
    for detail in result.items:
        priors = []
        for choice in detail.item.choices:
            context_ids, continuation_ids = encode_pair(tokenizer, "Answer:", " " + choice)
            logprobs = reference_logprobs(model, context_ids + continuation_ids)[-len(continuation_ids) :]
            priors.append(logprobs.sum().item())
        assert detail.predicted_mutual_info == int(np.argmax(np.array(detail.logprobs) - priors))
    expected = np.mean([d.predicted_mutual_info == d.item.answer_index for d in result.items])
    assert result.accuracy_mutual_info == expected == result.metrics("qa")["qa_accuracy_mutual_info"]


def test_mc_accuracy_of_a_model_that_learned_the_answers(memorised, tokenizer):
    items = build_mc_items(QA, seed=0)
    result = mc_accuracy(
        memorised,
        tokenizer,
        items,
        render_context=lambda q: chat_prompt(tokenizer, q),
        render_choice=lambda a: answer_ids(tokenizer, a),
    )
    assert result.accuracy == 1.0 and result.accuracy_norm == 1.0
    untrained = mc_accuracy(
        tiny_nemotron_h(len(tokenizer)),
        tokenizer,
        items,
        render_context=lambda q: chat_prompt(tokenizer, q),
        render_choice=lambda a: answer_ids(tokenizer, a),
    )
    assert untrained.accuracy < 1.0


def test_mc_accuracy_rejects_broken_items(model, tokenizer):
    with pytest.raises(NemotronError, match="answer_index 4 outside"):
        mc_accuracy(model, tokenizer, [MCItem("q", ("a", "b"), 4)], render_context=lambda q: q)


# --------------------------------------------------------------------------------------------------
# preference / DPO
# --------------------------------------------------------------------------------------------------


def test_completion_logprobs_score_only_the_completion(model, tokenizer):
    prompts = [chat_prompt(tokenizer, q) for q, _ in QA[:5]]
    completions = [answer_ids(tokenizer, a) for _, a in QA[:5]]
    with torch.no_grad():
        scores = completion_logprobs(model, prompts, completions, batch_size=2)
    expected = [
        reference_logprobs(model, p + c)[-len(c) :].sum().item() for p, c in zip(prompts, completions)
    ]
    assert scores.shape == (5,)
    assert scores.tolist() == pytest.approx(expected, abs=1e-5)
    # Changing the prompt changes the score (it conditions), but the prompt itself is never scored.
    assert completion_logprobs(model, [prompts[0][-3:]], [completions[0]]).item() != pytest.approx(
        expected[0]
    )


def test_completion_logprobs_carry_gradients_and_pair_logprobs_do_not(tokenizer):
    model = tiny_llama(len(tokenizer))
    prompts, completions = [[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14]]
    completion_logprobs(model, prompts, completions).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    chosen, rejected = pair_logprobs(model, prompts, completions, [[15], [16]])
    assert not chosen.requires_grad and not rejected.requires_grad
    assert chosen.tolist() == pytest.approx(
        completion_logprobs(model, prompts, completions).tolist(), abs=1e-6
    )


def test_dpo_loss_hand_values():
    # policy chosen -1, rejected -3; reference -2 for both; beta 0.5.
    # log-ratios: chosen +1, rejected -1, h = 2, beta*h = 1; rewards +0.5 and -0.5.
    args = [torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0])]
    loss, chosen, rejected = dpo_loss(*args, beta=0.5)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1)))  # -log sigmoid(1) = 0.3132617
    assert loss.item() == pytest.approx(0.3132617, abs=1e-6)
    assert chosen.tolist() == [0.5] and rejected.tolist() == [-0.5]
    # cDPO, eps 0.1: 0.9 * -log sigmoid(1) + 0.1 * -log sigmoid(-1) = 0.9*0.3132617 + 0.1*1.3132617
    loss, _, _ = dpo_loss(*args, beta=0.5, variant="conservative", label_smoothing=0.1)
    assert loss.item() == pytest.approx(0.4132617, abs=1e-6)
    # IPO: (h - 1/(2 beta))^2 = (2 - 1)^2
    loss, _, _ = dpo_loss(*args, beta=0.5, variant="ipo")
    assert loss.item() == pytest.approx(1.0)
    # A batch is averaged: second pair has h = 0, so its DPO loss is log 2.
    batch = [
        torch.tensor([-1.0, -4.0]),
        torch.tensor([-3.0, -4.0]),
        torch.tensor([-2.0, -5.0]),
        torch.tensor([-2.0, -5.0]),
    ]
    loss, _, _ = dpo_loss(*batch, beta=0.5)
    assert loss.item() == pytest.approx((0.3132617 + math.log(2)) / 2, abs=1e-6)


def test_dpo_loss_gradient_raises_chosen_and_lowers_rejected():
    chosen = torch.tensor([-4.0], requires_grad=True)
    rejected = torch.tensor([-4.0], requires_grad=True)
    loss, chosen_rewards, _ = dpo_loss(chosen, rejected, torch.tensor([-4.0]), torch.tensor([-4.0]), beta=0.1)
    loss.backward()
    # d/dchosen of -log sigmoid(beta h) at h = 0 is -beta/2.
    assert chosen.grad.item() == pytest.approx(-0.05) and rejected.grad.item() == pytest.approx(0.05)
    assert not chosen_rewards.requires_grad


def test_dpo_loss_rejects_bad_settings():
    t = torch.zeros(2)
    with pytest.raises(NemotronError, match="--beta 0 must be > 0"):
        dpo_loss(t, t, t, t, beta=0)
    with pytest.raises(NemotronError, match="needs 0 < label_smoothing < 0.5"):
        dpo_loss(t, t, t, t, beta=0.1, variant="conservative")
    with pytest.raises(NemotronError, match="only applies"):
        dpo_loss(t, t, t, t, beta=0.1, label_smoothing=0.1)
    with pytest.raises(NemotronError, match="unknown DPO --loss-variant"):
        dpo_loss(t, t, t, t, beta=0.1, variant="kto")
    with pytest.raises(NemotronError, match="one shape per pair"):
        dpo_loss(t, torch.zeros(3), t, t, beta=0.1)
    # A pair the reference pass did not score (NaN) must never turn into a NaN loss and NaN weights.
    with pytest.raises(NemotronError, match="no reference log-probs"):
        dpo_loss(t, t, t, torch.tensor([0.0, float("nan")]), beta=0.1)


def test_reward_metrics_hand_values():
    metrics = reward_metrics(
        policy_chosen_logps=torch.tensor([-1.0, -5.0, -2.0]),
        policy_rejected_logps=torch.tensor([-3.0, -4.0, -2.0]),
        reference_chosen_logps=torch.tensor([-2.0, -5.0, -2.0]),
        reference_rejected_logps=torch.tensor([-2.0, -5.0, -2.0]),
        beta=0.5,
    )
    # chosen rewards 0.5, 0, 0; rejected rewards -0.5, 0.5, 0; margins 1, -0.5, 0 (the tie is not a win).
    assert metrics == pytest.approx(
        {"reward_accuracy": 1 / 3, "reward_margin": 0.5 / 3, "chosen_reward": 0.5 / 3, "rejected_reward": 0.0}
    )


def test_preference_accuracy_normalises_by_length():
    # Chosen: -6 over 6 tokens (-1 per token). Rejected: -4 over 2 tokens (-2 per token).
    chosen, rejected = torch.tensor([-6.0, -1.0]), torch.tensor([-4.0, -3.0])
    assert preference_accuracy(chosen, rejected, [6, 1], [2, 1]) == 1.0
    assert preference_accuracy(chosen, rejected, [6, 1], [2, 1], length_normalized=False) == 0.5
    with pytest.raises(NemotronError, match="positive"):
        preference_accuracy(chosen, rejected, [0, 1], [2, 1])


def test_learned_answers_are_preferred(memorised, tokenizer):
    prompts, chosen, rejected = preference_pairs(tokenizer)
    policy_chosen, policy_rejected = pair_logprobs(memorised, prompts, chosen, rejected)
    chosen_n, rejected_n = [len(c) for c in chosen], [len(r) for r in rejected]
    assert preference_accuracy(policy_chosen, policy_rejected, chosen_n, rejected_n) == 1.0
    untrained_chosen, untrained_rejected = pair_logprobs(
        tiny_nemotron_h(len(tokenizer)), prompts, chosen, rejected
    )
    assert preference_accuracy(untrained_chosen, untrained_rejected, chosen_n, rejected_n) < 1.0


def test_a_few_dpo_steps_raise_reward_accuracy_and_margin(tokenizer):
    """completion_logprobs + dpo_loss as a DPO training loop uses them, against a frozen reference."""
    prompts, chosen, rejected = preference_pairs(tokenizer)
    reference = tiny_nemotron_h(len(tokenizer), seed=5)
    policy = tiny_nemotron_h(len(tokenizer), seed=5)  # starts equal to the reference
    reference_chosen, reference_rejected = pair_logprobs(reference, prompts, chosen, rejected)
    before = reward_metrics(
        *pair_logprobs(policy, prompts, chosen, rejected), reference_chosen, reference_rejected, beta=0.1
    )
    assert before["reward_accuracy"] == 0.0 and before["reward_margin"] == 0.0  # identical models: all ties
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    for _ in range(10):
        loss, _, _ = dpo_loss(
            completion_logprobs(policy, prompts, chosen),
            completion_logprobs(policy, prompts, rejected),
            reference_chosen,
            reference_rejected,
            beta=0.1,
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = reward_metrics(
        *pair_logprobs(policy, prompts, chosen, rejected), reference_chosen, reference_rejected, beta=0.1
    )
    assert after["reward_accuracy"] == 1.0 and after["reward_margin"] > 0
    assert loss.item() < math.log(2)  # below the loss of a policy equal to its reference


def preference_pairs(tokenizer):
    """Prompt, correct answer (chosen), another question's answer (rejected), as chat token ids."""
    prompts = [chat_prompt(tokenizer, q) for q, _ in QA]
    chosen = [answer_ids(tokenizer, a) for _, a in QA]
    rejected = [answer_ids(tokenizer, QA[(i + 3) % len(QA)][1]) for i in range(len(QA))]
    return prompts, chosen, rejected


# --------------------------------------------------------------------------------------------------
# generation
# --------------------------------------------------------------------------------------------------


def argmax_loop(model, prompt_ids: list[int], steps: int) -> list[int]:
    """Independent greedy decoding: a full forward pass per token, no cache, no padding."""
    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt_ids) :]


def test_greedy_samples_match_a_plain_argmax_loop(model, tokenizer):
    prompts = [
        "What do bees make?",
        "Who",
        chat_prompt(tokenizer, "Which planet is red?"),
        "café 🙂 and more words",
    ]
    texts = greedy_samples(model, tokenizer, prompts, max_new_tokens=8, batch_size=3)
    for prompt, text in zip(prompts, texts):
        ids = tokenizer.encode(prompt, add_special_tokens=False) if isinstance(prompt, str) else prompt
        assert text == tokenizer.decode(argmax_loop(model, ids, 8))
    assert greedy_samples(model, tokenizer, prompts, max_new_tokens=8, batch_size=3) == texts


def test_greedy_samples_stop_before_the_stop_token(model, tokenizer):
    prompt = tokenizer.encode("What is the capital", add_special_tokens=False)
    reference = argmax_loop(model, prompt, 12)
    # The first position whose token did not occur before it: generation must stop right there.
    stop_at = next(k for k in range(1, len(reference)) if reference[k] not in reference[:k])
    [text] = greedy_samples(
        model, tokenizer, [prompt], max_new_tokens=12, stop_token_ids=[reference[stop_at]]
    )
    assert text == tokenizer.decode(reference[:stop_at])


def test_greedy_samples_rejects_empty_prompts(model, tokenizer):
    with pytest.raises(NemotronError, match="prompt 1 is empty"):
        greedy_samples(model, tokenizer, ["hi", ""], max_new_tokens=4)
