"""Language-modeling metrics: held-out loss, perplexity, bits-per-byte, and a unigram baseline.

What this module does:
- `next_token_logprobs(model, sequences)` (from `nemotron.training.logprobs`) is the one scoring
  primitive the whole evaluation package builds on.
- `heldout_loss(model, windows)` -> (mean next-token NLL in nats, number of scored tokens), evaluated in
  batches under `torch.no_grad()` with the model in eval mode (restored afterwards).
- `perplexity(mean_nll)` and `bits_per_byte(total_nll_nats, total_utf8_bytes)`.
- `target_utf8_bytes(tokenizer, windows)`: how many bytes of text the scored target tokens stand for.
- `UnigramBaseline`: a bag-of-tokens model fitted on training token counts with add-k smoothing, scored
  on exactly the same targets, so a recipe can show that the trained model learned more than token
  frequencies.

Conventions: a *window* is a 1-D sequence of token ids of length L >= 2; its inputs are `window[:-1]` and
its targets are `window[1:]` (L - 1 predictions). An optional loss mask has length L - 1 and lines up
with the targets (the Megatron convention: the mask is aligned with the labels, not the inputs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import decoders

from nemotron.errors import NemotronError
from nemotron.progress import progress_bar
from nemotron.training.logprobs import TokenSequence, as_token_tensor, evaluation_mode, next_token_logprobs


def target_masks(
    windows: Sequence[TokenSequence], loss_masks: Sequence[TokenSequence] | None
) -> list[np.ndarray]:
    """Boolean mask over each window's targets (all True when no loss masks are given), validated."""
    for i, window in enumerate(windows):
        if len(window) < 2:
            raise NemotronError(
                f"window {i} has {len(window)} token(s); scoring needs at least 2 (one input, one target)"
            )
    if loss_masks is None:
        return [np.ones(len(w) - 1, dtype=bool) for w in windows]
    if len(loss_masks) != len(windows):
        raise NemotronError(
            f"got {len(loss_masks)} loss masks for {len(windows)} windows; pass one mask per window"
        )
    masks = []
    for i, (window, mask) in enumerate(zip(windows, loss_masks)):
        mask = np.asarray(mask).astype(bool)
        if mask.shape != (len(window) - 1,):
            raise NemotronError(
                f"loss mask {i} has shape {mask.shape} but window {i} has {len(window) - 1} targets; "
                "a loss mask lines up with window[1:] (length len(window) - 1)"
            )
        masks.append(mask)
    return masks


def heldout_loss(
    model: torch.nn.Module,
    windows: Sequence[TokenSequence],
    *,
    loss_masks: Sequence[TokenSequence] | None = None,
    batch_size: int = 8,
) -> tuple[float, int]:
    """Mean next-token negative log-likelihood (nats) over all scored targets, and how many were scored.

    The mean is over tokens, not windows (every token weighs the same), accumulated in float64.
    """
    return mean_nll(*window_nll(model, windows, loss_masks=loss_masks, batch_size=batch_size))


def mean_nll(sums: np.ndarray, counts: np.ndarray) -> tuple[float, int]:
    """(mean NLL per token, tokens) from per-window summed NLLs and counts, summed in window order."""
    total_nll = 0.0
    for value in sums:
        total_nll += float(value)
    num_tokens = int(counts.sum())
    if num_tokens == 0:
        raise NemotronError("no target tokens were scored: the windows are empty or every loss mask is 0")
    return total_nll / num_tokens, num_tokens


def window_nll(
    model: torch.nn.Module,
    windows: Sequence[TokenSequence],
    *,
    loss_masks: Sequence[TokenSequence] | None = None,
    batch_size: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """Per window: the summed NLL (nats, float64) of its scored targets, and how many targets were scored.

    The per-item numbers behind `heldout_loss`, for a paired comparison of two models on the same windows
    (`nemotron.evaluation.lessons`).
    """
    masks = target_masks(windows, loss_masks)
    sums, counts = np.zeros(len(windows)), np.zeros(len(windows), dtype=np.int64)
    with evaluation_mode(model):
        scored = next_token_logprobs(model, windows, batch_size=batch_size)
        progress = progress_bar(scored, total=len(windows), desc="held-out loss", leave=False)
        for i, (logprobs, mask) in enumerate(zip(progress, masks)):
            selected = logprobs.double().cpu().numpy()[mask]
            sums[i] = -float(selected.sum())
            counts[i] = int(mask.sum())
    return sums, counts


def perplexity(mean_nll_nats: float) -> float:
    """exp(mean NLL): the effective number of equally likely tokens the model hesitates between."""
    return math.exp(mean_nll_nats)


def bits_per_byte(total_nll_nats: float, total_utf8_bytes: int) -> float:
    """Total NLL converted to bits (divide by ln 2), per UTF-8 byte of the text the targets cover.

    Why bytes: loss per token depends on the tokenizer. A tokenizer with longer tokens has fewer, harder
    predictions, so two models with different vocabularies cannot be ranked by per-token loss or
    perplexity. The total information needed to encode a text does not depend on how it was cut into
    tokens, and the byte count of the text does not either, so bits per byte compares any two models
    (and a compressor) on the same text. This is the metric of the Pile paper (Gao et al., 2020,
    "The Pile: An 800GB Dataset of Diverse Text for Language Modeling", Section 5.1) and of
    lm-evaluation-harness' `bits_per_byte`.
    """
    if total_utf8_bytes <= 0:
        raise NemotronError(
            f"total_utf8_bytes={total_utf8_bytes}: bits per byte needs the positive byte count of the "
            "scored text (see target_utf8_bytes)"
        )
    return total_nll_nats / (math.log(2) * total_utf8_bytes)


def target_utf8_bytes(
    tokenizer, windows: Sequence[TokenSequence], *, loss_masks: Sequence[TokenSequence] | None = None
) -> int:
    """UTF-8 bytes of text that the scored targets (window[1:], masked) stand for; special tokens count 0.

    For a byte-level BPE (ours, GPT-2's) this is exact: every character of a byte-level token string stands
    for exactly one byte, so a token's byte count is the length of its string and counts simply add up,
    even when one multi-byte character is split over two tokens (or two windows). For other tokenizers
    each contiguous run of scored targets is decoded and its UTF-8 length taken.
    """
    masks = target_masks(windows, loss_masks)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and isinstance(backend.decoder, decoders.ByteLevel):
        lengths = byte_level_token_lengths(tokenizer)
        total = 0
        for i, (window, mask) in enumerate(zip(windows, masks)):
            targets = as_token_tensor(window, f"window {i}").numpy()[1:][mask]
            check_token_range(targets, len(lengths), f"window {i}")
            total += int(lengths[targets].sum())
        return total
    return sum(
        len(tokenizer.decode(run, skip_special_tokens=True).encode("utf-8"))
        for window, mask in zip(windows, masks)
        for run in scored_runs(as_token_tensor(window, "window").tolist()[1:], mask)
    )


def byte_level_token_lengths(tokenizer) -> np.ndarray:
    """Bytes per token id of a byte-level BPE tokenizer: special tokens 0, other added tokens their UTF-8."""
    lengths = np.zeros(len(tokenizer), dtype=np.int64)
    added = tokenizer.added_tokens_decoder
    for token_id, token in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        if token_id in added:  # added tokens are stored as plain text, not byte-mapped
            lengths[token_id] = 0 if added[token_id].special else len(added[token_id].content.encode("utf-8"))
        else:
            lengths[token_id] = len(token)
    return lengths


def scored_runs(targets: list[int], mask: np.ndarray) -> Iterator[list[int]]:
    """Contiguous stretches of targets whose mask is True."""
    run: list[int] = []
    for token, keep in zip(targets, mask):
        if keep:
            run.append(token)
        elif run:
            yield run
            run = []
    if run:
        yield run


def check_token_range(tokens: np.ndarray, vocab_size: int, where: str) -> None:
    if len(tokens) and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise NemotronError(
            f"{where} holds token id {int(tokens.max())} outside the vocabulary of size {vocab_size}; "
            "the tokens and the tokenizer/baseline do not match"
        )


@dataclass(frozen=True)
class UnigramBaseline:
    """p(token) from training counts with add-k (Laplace for k=1) smoothing; context is ignored.

    Its held-out NLL is the cross-entropy of the training token distribution: what a model that learned
    only token frequencies achieves. A language model must beat it to have learned anything about context.
    """

    log_probs: np.ndarray  # float64, shape [vocab_size]
    add_k: float

    @classmethod
    def from_counts(cls, counts: np.ndarray, add_k: float = 1.0) -> UnigramBaseline:
        counts = np.asarray(counts, dtype=np.float64)
        if add_k <= 0:
            raise NemotronError(f"add_k={add_k} must be > 0 so unseen tokens get a finite NLL")
        smoothed = counts + add_k
        return cls(log_probs=np.log(smoothed / smoothed.sum()), add_k=add_k)

    @classmethod
    def fit(
        cls, token_sequences: Iterable[TokenSequence], vocab_size: int, add_k: float = 1.0
    ) -> UnigramBaseline:
        """Count every token of the training sequences (e.g. an IndexedReader's documents)."""
        counts = np.zeros(vocab_size, dtype=np.int64)
        pending: list[np.ndarray] = []
        pending_tokens = 0

        def count_pending() -> None:
            # One bincount per ~1M tokens: a bincount per short document would cost O(vocab) each time.
            if pending:
                counts[:] += np.bincount(np.concatenate(pending), minlength=vocab_size)
                pending.clear()

        for i, sequence in enumerate(token_sequences):
            tokens = np.asarray(sequence, dtype=np.int64)
            check_token_range(tokens, vocab_size, f"training sequence {i}")
            pending.append(tokens)
            pending_tokens += len(tokens)
            if pending_tokens >= 1 << 20:
                count_pending()
                pending_tokens = 0
        count_pending()
        return cls.from_counts(counts, add_k)

    def heldout_loss(
        self, windows: Sequence[TokenSequence], *, loss_masks: Sequence[TokenSequence] | None = None
    ) -> tuple[float, int]:
        """Mean NLL (nats) and count over exactly the targets `heldout_loss(model, ...)` scores."""
        return mean_nll(*self.window_nll(windows, loss_masks=loss_masks))

    def window_nll(
        self, windows: Sequence[TokenSequence], *, loss_masks: Sequence[TokenSequence] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per window: summed NLL (nats) and count of the scored targets, as `window_nll(model, ...)`."""
        sums, counts = np.zeros(len(windows)), np.zeros(len(windows), dtype=np.int64)
        for i, (window, mask) in enumerate(zip(windows, target_masks(windows, loss_masks))):
            targets = np.asarray(window, dtype=np.int64)[1:][mask]
            check_token_range(targets, len(self.log_probs), f"window {i}")
            sums[i] = -float(self.log_probs[targets].sum())
            counts[i] = len(targets)
        return sums, counts


def score_against_unigram(
    model, tokenizer, windows: list[np.ndarray], train_prefixes: Sequence, batch_size: int = 8,
) -> dict[str, float]:
    """A pretrained model's held-out numbers next to a unigram baseline fitted on `train_prefixes`
    (bin/idx shards) and scored on exactly the same targets: validation_loss, perplexity,
    bits_per_byte, unigram_loss, unigram_bits_per_byte, unigram_perplexity, num_tokens, num_bytes,
    `lesson`: the model's mean held-out loss per window against the unigram's on the same windows
    (`nemotron.evaluation.lessons`, paired over windows): what pretraining taught beyond token frequencies,
    and `lesson_items`, the per-window losses it came from (two models scored on the same windows compare
    item for item: nano3's MoE against its dense counterpart)."""
    from nemotron.data_prep.indexed import IndexedReader
    from nemotron.evaluation.lessons import lesson, lesson_items

    sums, counts = window_nll(model, windows, batch_size=batch_size)
    loss, num_tokens = mean_nll(sums, counts)
    num_bytes = target_utf8_bytes(tokenizer, windows)
    readers = [IndexedReader(prefix) for prefix in train_prefixes]
    unigram = UnigramBaseline.fit((doc for reader in readers for doc in reader), len(tokenizer))
    unigram_sums, _ = unigram.window_nll(windows)
    unigram_loss, _ = mean_nll(unigram_sums, counts)
    return {
        "validation_loss": loss,
        "perplexity": perplexity(loss),
        "bits_per_byte": bits_per_byte(loss * num_tokens, num_bytes),
        "unigram_loss": unigram_loss,
        "unigram_bits_per_byte": bits_per_byte(unigram_loss * num_tokens, num_bytes),
        "unigram_perplexity": perplexity(unigram_loss),
        "num_tokens": num_tokens,
        "num_bytes": num_bytes,
        "lesson": lesson("held-out loss per window (nats/token), unigram baseline -> model",
                         unigram_sums / counts, sums / counts, higher_is_better=False),
        "lesson_items": lesson_items(unigram_sums / counts, sums / counts),
    }
