"""Sequence log-probabilities: what a causal LM gives each token of a sequence, and of a completion.

- `next_token_logprobs(model, sequences)`: for every token sequence, the log-probability the model
  gives each token after the first, given all tokens before it. Sequences are batched longest first
  with right padding, so a real token never sees a pad token (causal attention and the Mamba scan
  both only look backwards) and batching does not change the numbers beyond float rounding.
- `completion_logprobs(model, prompts_ids, completions_ids)`: log p(completion | prompt) summed over
  the completion tokens only (the prompt is context, never scored). Gradients flow when they are
  enabled, so DPO training uses the same function for the policy.
- `pair_logprobs(model, prompts, chosen, rejected)`: both sides of every pair, without gradients, in
  eval mode: what evaluation and the frozen DPO reference need.
- `loglikelihood(model, tokenizer, [(context, continuation), ...])`: lm-eval-harness's loglikelihood
  request (sum of log p(continuation | context), and its token count), with `encode_pair` splitting the
  two strings from one encoding of the joined text the way lm-eval does. Multiple-choice evaluation and
  the post-training data scorer both use it.
- `evaluation_mode(model)`: eval mode and no autograd inside a block, the caller's mode restored.

Training (DPO) and evaluation (held-out loss, multiple choice, preference accuracy) both build on these,
so they live here, below `nemotron.evaluation`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

from nemotron.errors import NemotronError

# Any id works as padding: with right padding a padded position is never an input to a real token's
# prediction and its own prediction is dropped. 0 is `<pad>` in every tokenizer we train.
PAD_FOR_SCORING = 0

TokenSequence = Sequence[int] | np.ndarray | torch.Tensor
Rendered = str | Sequence[int]  # text, or token ids used exactly as given


@contextmanager
def evaluation_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Eval mode (no dropout) and no autograd graph inside; the caller's train/eval mode is restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def as_token_tensor(sequence: TokenSequence, where: str) -> torch.Tensor:
    """One sequence of token ids as a 1-D int64 tensor; `where` names it in the error message."""
    tokens = torch.as_tensor(np.asarray(sequence, dtype=np.int64))
    if tokens.dim() != 1:
        raise NemotronError(f"{where} has shape {tuple(tokens.shape)}; pass a 1-D list of token ids")
    return tokens


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def next_token_logprobs(
    model: torch.nn.Module, sequences: Sequence[TokenSequence], *, batch_size: int = 8
) -> Iterator[torch.Tensor]:
    """For each sequence s (length L >= 2) yield float32 log p(s[t+1] | s[:t+1]) for t = 0..L-2.

    Sequences are batched longest first (lm-evaluation-harness orders its requests the same way), so each
    batch holds sequences of similar length and little compute goes into padding; results are yielded in
    the input order. Same sequences and batch size -> same batches -> bit-identical numbers.

    This does not switch off gradients: DPO training calls it (through `completion_logprobs`) to get
    differentiable policy log-probs. Evaluation callers wrap it in `evaluation_mode(model)`.
    """
    if batch_size < 1:
        raise NemotronError(f"batch_size={batch_size} must be at least 1")
    tensors = [as_token_tensor(s, f"sequence {i}") for i, s in enumerate(sequences)]
    for i, tokens in enumerate(tensors):
        if len(tokens) < 2:
            raise NemotronError(
                f"sequence {i} has {len(tokens)} token(s); scoring needs at least 2 (one input and one target)"
            )
    device = model_device(model)
    order = sorted(range(len(tensors)), key=lambda i: -len(tensors[i]))  # stable: ties keep input order
    finished: dict[int, torch.Tensor] = {}
    next_to_yield = 0
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        input_ids, attention_mask = right_pad([tensors[i] for i in rows])
        # use_cache=False: scoring is one pass, a generation cache would be allocated for nothing.
        logits = model(
            input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), use_cache=False
        ).logits
        # NLL of each target is cross-entropy against it; float32 so bf16 models do not round the sum.
        targets = input_ids[:, 1:].to(device)
        nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), targets, reduction="none")
        for row, i in zip(-nll, rows):
            finished[i] = row[: len(tensors[i]) - 1]
        while next_to_yield in finished:
            yield finished.pop(next_to_yield)
            next_to_yield += 1


def right_pad(batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack 1-D token tensors into (input_ids, attention_mask), padding on the right."""
    length = max(len(tokens) for tokens in batch)
    input_ids = torch.full((len(batch), length), PAD_FOR_SCORING, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), length), dtype=torch.long)
    for row, tokens in enumerate(batch):
        input_ids[row, : len(tokens)] = tokens
        attention_mask[row, : len(tokens)] = 1
    return input_ids, attention_mask


def left_pad(batch: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack prompts padded on the left, so every row's next token is predicted at the same last column."""
    length = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), length), dtype=torch.long)
    for row, ids in enumerate(batch):
        input_ids[row, length - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, length - len(ids) :] = 1
    return input_ids, attention_mask


def cut_at_stop(new_ids: list[int], stop_token_ids: Sequence[int]) -> list[int]:
    """The generated ids before the first stop token (generate pads finished rows after their stop)."""
    for position, token in enumerate(new_ids):
        if token in stop_token_ids:
            return new_ids[:position]
    return new_ids


def completion_logprobs(
    model: torch.nn.Module,
    prompts_ids: Sequence[TokenSequence],
    completions_ids: Sequence[TokenSequence],
    *,
    batch_size: int = 8,
) -> torch.Tensor:
    """Float32 tensor [N]: sum over completion tokens of log p(token | prompt, earlier completion tokens).

    Differentiable when called with gradients enabled (DPO policy); wrap in `evaluation_mode(model)` or use
    `pair_logprobs` to evaluate.
    """
    if len(prompts_ids) != len(completions_ids):
        raise NemotronError(
            f"got {len(prompts_ids)} prompts and {len(completions_ids)} completions; "
            "pass one completion per prompt"
        )
    if not prompts_ids:
        raise NemotronError("no prompt/completion pairs to score")
    sequences, completion_lengths = [], []
    for i, (prompt, completion) in enumerate(zip(prompts_ids, completions_ids)):
        prompt, completion = list(map(int, prompt)), list(map(int, completion))
        if not prompt or not completion:
            raise NemotronError(
                f"pair {i} has an empty prompt or completion; both need at least one token "
                "(the first completion token is predicted from the prompt)"
            )
        sequences.append(prompt + completion)
        completion_lengths.append(len(completion))
    scored = next_token_logprobs(model, sequences, batch_size=batch_size)
    # Completion-only mask: the last len(completion) predictions of a row are the completion tokens.
    return torch.stack([logprobs[-n:].sum() for logprobs, n in zip(scored, completion_lengths)])


def pair_logprobs(
    model: torch.nn.Module,
    prompts_ids: Sequence[TokenSequence],
    chosen_ids: Sequence[TokenSequence],
    rejected_ids: Sequence[TokenSequence],
    *,
    batch_size: int = 8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen log-probs, rejected log-probs), each [N], summed over completion tokens, no gradients."""
    with evaluation_mode(model):
        chosen = completion_logprobs(model, prompts_ids, chosen_ids, batch_size=batch_size)
        rejected = completion_logprobs(model, prompts_ids, rejected_ids, batch_size=batch_size)
    return chosen, rejected


def encode_pair(tokenizer, context: Rendered, continuation: Rendered) -> tuple[list[int], list[int]]:
    """Context and continuation token ids.

    Two strings are split from one encoding of the joined text (lm-eval's way). Token ids pass through
    unchanged, which lets a caller score exactly the tokenization its model was trained on (stage1 passes
    `tokenize_prompt(...)` ids and `answer ids + [<|im_end|>]`); a string next to ids is encoded alone.
    """
    if isinstance(context, str) and isinstance(continuation, str):
        whole = tokenizer.encode(context + continuation, add_special_tokens=False)
        context_ids = tokenizer.encode(context, add_special_tokens=False)
        continuation_ids = whole[len(context_ids) :]
    else:
        context_ids, continuation_ids = (
            tokenizer.encode(part, add_special_tokens=False)
            if isinstance(part, str)
            else [int(t) for t in part]
            for part in (context, continuation)
        )
    if not context_ids:
        raise NemotronError(
            "a multiple-choice context rendered to no tokens; render_context must return text or ids"
        )
    if not continuation_ids:
        raise NemotronError(f"the continuation {continuation!r} rendered to no tokens after its context")
    return list(context_ids), list(continuation_ids)


def loglikelihood(
    model: torch.nn.Module, tokenizer, requests: Sequence[tuple[Rendered, Rendered]], *, batch_size: int = 8
) -> list[tuple[float, int]]:
    """For each (context, continuation): (sum of log p(continuation tokens | context), number of tokens)."""
    encoded = [encode_pair(tokenizer, context, continuation) for context, continuation in requests]
    sequences = [context_ids + continuation_ids for context_ids, continuation_ids in encoded]
    results = []
    with evaluation_mode(model):
        for logprobs, (_, continuation_ids) in zip(
            next_token_logprobs(model, sequences, batch_size=batch_size), encoded
        ):
            # The last len(continuation) predictions are exactly the continuation tokens.
            results.append((float(logprobs[-len(continuation_ids) :].double().sum()), len(continuation_ids)))
    return results
