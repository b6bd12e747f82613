"""Watch it learn: what a training step did, kept in its run as `watch.jsonl` (the artifact's `watch_path`).

A metrics log says how much the loss fell; this file says on what. One JSON line per kept step,
`{"step": 12, "kind": ..., ...}`, written by rank 0 (`TrainingRun.keep`), cut back on resume like the
metrics log (`MetricsLog`), hashed into the artifact's digest like every file it names, so it holds
nothing of the moment (no wall time). `python -m nemotron.artifact browse RUNS` draws it. The kinds:

- `"tokens"` (pretraining and SFT, at each validation): the per-token loss of a few fixed held-out texts
  (`heldout_windows` / `heldout_chats`, `token_losses`): which tokens a model learns first.
  `"texts": [{"tokens": [str], "loss": [float], "trained": [0|1]}]`, `loss[i]` and `trained[i]` for
  predicting `tokens[i + 1]` (SFT trains on the answers only: `trained` says which).
- `"grpo"` (every `--watch-every` steps): each group of rank 0's batch (`grpo_groups`): the prompt, and per
  sample its text, tokens, reward, the checker's verdict, advantage and per token the log-probability under
  the policy (and the reference where `--kl-beta` > 0) and whether its ratio was clipped.
- `"dpo_probes"` once (step 0: the probe pairs' texts and the reference's preference), then `"dpo"` every
  `--watch-every` steps: each probe pair's log-ratio log pi / pi_ref of the chosen and the rejected answer
  and their implicit rewards (`dpo_probes`). A pair has flipped when the policy prefers the answer the
  reference did not.

Sizes per kept step are bounded by the constants below (the step's `--watch-every` help states its own).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

WATCH_FILE = "watch.jsonl"
HELDOUT_TEXTS = 2  # held-out texts whose per-token loss pretraining and SFT keep at each validation
HELDOUT_TOKENS = 128  # at most this many tokens of each
PROBE_PAIRS = 3  # DPO: this many training pairs and as many held-out pairs are followed
PROBE_CHARS = 160  # of each probe pair's prompt and answers, for the browser
PLACES = 4  # decimals kept of a log-probability or loss (a shading needs no more)


def rounded(values: torch.Tensor) -> list[float]:
    return [round(v, PLACES) for v in values.float().tolist()]


def token_texts(tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token decoded alone (a byte of a multi-byte character shows as the replacement character)."""
    return tokenizer.batch_decode([[int(i)] for i in ids])


# ---------------------------------------------------------------------------------------------------
# Pretraining and SFT: the per-token loss of fixed held-out texts
# ---------------------------------------------------------------------------------------------------


def heldout_windows(valid, count: int = HELDOUT_TEXTS) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first `count` validation windows (`windows.TokenWindows`), cut to HELDOUT_TOKENS, every target
    trained: (ids, trained) pairs for `token_losses`."""
    texts = []
    for i in range(min(count, valid.num_windows)):
        ids = np.asarray(valid.window(i)[:HELDOUT_TOKENS])
        texts.append((ids, np.ones(len(ids) - 1, dtype=np.int8)))
    return texts


def heldout_chats(rows, count: int = HELDOUT_TEXTS) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first conversation of each of the first `count` packed validation rows (`packing.PackedRow`),
    cut to HELDOUT_TOKENS, with its (already shifted) loss mask: (ids, trained) pairs for `token_losses`."""
    texts = []
    for row in rows[:count]:
        bounds = row.cu_seqlens()
        end = min(int(bounds[1]), int(bounds[0]) + HELDOUT_TOKENS)
        texts.append((row.input_ids[bounds[0]:end], row.loss_mask[bounds[0]:end - 1]))
    return texts


def token_losses(model, texts: list[tuple[np.ndarray, np.ndarray]], tokenizer, autocast=None) -> list[dict]:
    """The `"texts"` of a `"tokens"` record: each held-out text's tokens and the model's next-token loss on
    each (eval mode, no gradient; the model's mode is restored)."""
    from nemotron.training.logprobs import evaluation_mode

    device = next(model.parameters()).device
    kept = []
    with evaluation_mode(model), autocast or contextlib.nullcontext():
        for ids, trained in texts:
            tokens = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=device)[None]
            logits = model(input_ids=tokens[:, :-1], use_cache=False).logits[0]
            loss = F.cross_entropy(logits.float(), tokens[0, 1:], reduction="none")
            kept.append({"tokens": token_texts(tokenizer, ids.tolist()), "loss": rounded(loss.cpu()),
                         "trained": [int(t) for t in trained]})
    return kept


# ---------------------------------------------------------------------------------------------------
# GRPO: every group of the step
# ---------------------------------------------------------------------------------------------------


def grpo_groups(
    tokenizer, questions: list[str], answers: list[str], completions: list[list[int]], rewards: torch.Tensor,
    advantages: torch.Tensor, logprobs: torch.Tensor, clipped: torch.Tensor, reference: torch.Tensor | None,
    prompt_lengths: list[int],
) -> list[dict]:
    """The `"groups"` of a `"grpo"` record. `completions` (groups consecutive, `len(questions)` groups) with
    the tensors of the update pass: `logprobs`, `clipped` and `reference` (batch, tokens) as
    `grpo.sampled_logprobs` lays them out (completion token j of row r at `prompt_lengths[r] - 1 + j`)."""
    size = len(completions) // len(questions)
    lp, clip = logprobs.detach().float().cpu(), clipped.cpu()
    ref = reference.detach().float().cpu() if reference is not None else None
    groups = []
    for g, (question, answer) in enumerate(zip(questions, answers, strict=True)):
        samples = []
        for r in range(g * size, (g + 1) * size):
            span = slice(prompt_lengths[r] - 1, prompt_lengths[r] - 1 + len(completions[r]))
            sample = {"text": tokenizer.decode(completions[r], skip_special_tokens=True),
                      "tokens": token_texts(tokenizer, completions[r]), "reward": round(float(rewards[r]), PLACES),
                      "correct": bool(rewards[r] >= 1.0), "advantage": round(float(advantages[r]), PLACES),
                      "logprob": rounded(lp[r, span]), "clipped": [int(c) for c in clip[r, span].tolist()]}
            if ref is not None:
                sample["reference_logprob"] = rounded(ref[r, span])
            samples.append(sample)
        groups.append({"prompt": question, "answer": answer, "samples": samples})
    return groups


# ---------------------------------------------------------------------------------------------------
# DPO: a fixed probe set of training and held-out pairs
# ---------------------------------------------------------------------------------------------------


class DPOProbes:
    """PROBE_PAIRS training pairs (the first the reference pass scored) and as many held-out pairs, followed
    step by step: `pairs` describes them (the `"dpo_probes"` record), `record(model)` measures them."""

    def __init__(self, train: tuple, valid: tuple, reference: dict, tokenizer, beta: float):
        chosen, rejected = reference["train"]
        scored = [i for i in range(len(chosen)) if not (chosen[i].isnan() or rejected[i].isnan())]
        self.splits = [("train", train, reference["train"], scored[:PROBE_PAIRS])]
        if "valid" in reference:
            self.splits.append(("valid", valid, reference["valid"], list(range(min(PROBE_PAIRS, len(valid[0]))))))
        self.beta = beta
        self.pairs = [
            {"split": split, "index": i, "prompt": tokenizer.decode(pairs[0][i])[-PROBE_CHARS:],
             "chosen": tokenizer.decode(pairs[1][i])[:PROBE_CHARS],
             "rejected": tokenizer.decode(pairs[2][i])[:PROBE_CHARS],
             "reference_margin": round(float(ref[0][i] - ref[1][i]), PLACES)}
            for split, pairs, ref, ids in self.splits for i in ids
        ]

    def record(self, model) -> list[dict]:
        """Each probe pair's log-ratios log pi / pi_ref of its chosen and rejected answers under `model` (eval
        mode, no gradient; all the probes' answers in one forward, as the step's), and their implicit rewards
        beta x log-ratio, in the order of `pairs`."""
        from nemotron.training.logprobs import completion_logprobs, evaluation_mode

        probes = [(pairs, ref, i) for _, pairs, ref, ids in self.splits for i in ids]
        prompts = [pairs[0][i] for pairs, _, i in probes]
        answers = [pairs[1][i] for pairs, _, i in probes] + [pairs[2][i] for pairs, _, i in probes]
        with evaluation_mode(model):
            policy = completion_logprobs(model, prompts * 2, answers, batch_size=len(answers)).float().cpu()
        measured = []
        for k, (_, ref, i) in enumerate(probes):
            chosen, rejected = float(policy[k] - ref[0][i]), float(policy[len(probes) + k] - ref[1][i])
            measured.append({"chosen": round(chosen, PLACES), "rejected": round(rejected, PLACES),
                             "chosen_reward": round(self.beta * chosen, PLACES),
                             "rejected_reward": round(self.beta * rejected, PLACES)})
        return measured
