"""Chat evaluation: how well a chat model predicts and picks the answers of held-out conversations.

Stage-1 (SFT) and stage-2 (DPO) evaluation ask the same three questions of a model, on the same held-out
TEST conversations, so the numbers of the base, SFT and DPO models sit side by side:

- `completion_nll(model, tokenizer, conversations)`: completion-only negative log-likelihood, the mean
  NLL of exactly the tokens SFT trains on (assistant content plus its `<|im_end|>`, in the nano2 chat
  format), with the user turns and template markers as context only. This is the SFT loss itself,
  measured on conversations never trained on (InstructGPT, Ouyang et al., 2022, and Tulu report it the
  same way). `content_only=True` leaves the template's `<|im_end|>` out of the targets: the measure for a
  model that never saw the chat markers (stage 0's base), whose pretraining pushed their logits down, so
  that each end of turn costs it far more than a uniform guess would (stage-1 evaluation: why).
- `answer_items(conversations, num_distractors, seed)` and `answer_accuracy(model, tokenizer, items)`:
  each held-out question becomes a multiple-choice item, its true answer against `num_distractors`
  seeded answers to other questions, scored by log-likelihood the way lm-evaluation-harness scores
  MMLU-style tasks (`nemotron.evaluation.multiple_choice`). The context is the question rendered with
  the chat template and the generation prompt; each choice is the answer plus `<|im_end|>`, tokenized
  exactly as SFT tokenized assistant turns (piece by piece, `nemotron.data_prep.chat.nano2`).
  Each answer is also scored after the chat-formatted neutral question `UNCONDITIONAL_QUESTION`
  ("Answer:", Holtzman et al.'s domain premise; lm-eval 0.4.13's `acc_mutual_info` conditions on the
  prefix token alone, which `--harness lm_eval` reports) for the mutual-information accuracy, the
  headline number: it asks whether the question made its answer more likely than other answers, not
  which answer is most typical.
- `chat_samples(model, tokenizer, questions, max_new_tokens)`: greedy answers to a few questions, so a
  reader sees what the model actually says.
- `answer_ids` / `tokenize_pairs`: an assistant answer, and preference pairs, as token ids in that same
  training tokenization, for scoring chosen against rejected answers.
- `skill_scores(model, tokenizer, problems)`: the checkable skill (`nemotron.data_prep.verifiable`): per
  held-out problem, the greedy answer and whether the checker accepts it, and the probability that the
  model writes the right answer (then ends its turn): the chance that ONE SAMPLED answer is right, computed
  exactly from the log-probs instead of estimated by sampling; the same for the teacher's mistake.
  `chances(scores, i, near_miss)`: problem i of those scores as a report card's cell.

A question/answer pair is a conversation's first user message and the assistant reply that follows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from nemotron.data_prep.chat.nano2 import tokenize_conversation, tokenize_prompt
from nemotron.data_prep.preference import answer_ids
from nemotron.data_prep.tokenizer import EOS_ID, IM_END_ID
from nemotron.data_prep.verifiable import SKILL_ANSWER_TOKENS, is_right
from nemotron.errors import NemotronError
from nemotron.evaluation.generation import greedy_samples
from nemotron.evaluation.language_modeling import mean_nll, window_nll
from nemotron.evaluation.multiple_choice import MCItem, MCResult, build_mc_items, mc_accuracy

Conversation = dict[str, Any]  # {"id", "messages": [{"role", "content"}, ...], ...}
# The premise every answer is also scored after, in the chat format the model answers in: Holtzman et al.'s
# domain-conditional PMI ("Answer:"). Not lm-eval 0.4.13's context, which is empty (the BOS/EOS token alone,
# `TemplateLM.loglikelihood`): our chat model never answers straight after EOS, so that prior would measure
# how likely the answer is as the start of a document, not as an answer.
UNCONDITIONAL_QUESTION = "Answer:"


def conversation_targets(
    tokenizer, conversations: Sequence[Conversation], *, content_only: bool = False
) -> tuple[list[list[int]], list[np.ndarray]]:
    """(token ids, loss mask over targets) per conversation; the mask covers assistant tokens only (with
    `content_only`, their content alone: each turn's closing `<|im_end|>` is left out).

    `tokenize_conversation` marks token i when token i is trained on; scoring predicts token i + 1 from
    tokens 0..i, so the mask over the targets `ids[1:]` is the token mask without its first entry.
    """
    windows, masks = [], []
    for conversation in conversations:
        ids, token_mask = tokenize_conversation(
            tokenizer, conversation["messages"], "assistant", conversation_id=conversation.get("id")
        )
        mask = np.asarray(token_mask[1:], dtype=bool)
        if content_only:
            mask &= np.asarray(ids[1:]) != IM_END_ID
        windows.append(ids)
        masks.append(mask)
    return windows, masks


def completion_nll(
    model: torch.nn.Module, tokenizer, conversations: Sequence[Conversation], *, batch_size: int = 16
) -> tuple[float, int]:
    """Mean NLL (nats per token) of the assistant tokens of `conversations`, and how many were scored."""
    if not conversations:
        raise NemotronError("no conversations to score; the held-out TEST split is empty")
    return mean_nll(*conversation_nll(model, tokenizer, conversations, batch_size=batch_size))


def conversation_nll(
    model: torch.nn.Module, tokenizer, conversations: Sequence[Conversation], *, batch_size: int = 16,
    content_only: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Per conversation: the summed NLL (nats) of its assistant tokens (`content_only`: without the template's
    `<|im_end|>`), and how many there were."""
    if not conversations:
        raise NemotronError("no conversations to score; the held-out TEST split is empty")
    windows, masks = conversation_targets(tokenizer, conversations, content_only=content_only)
    return window_nll(model, windows, loss_masks=masks, batch_size=batch_size)


def question_answer(conversation: Conversation) -> tuple[str, str]:
    """The first user message and the assistant reply that follows it."""
    messages = conversation["messages"]
    for i, message in enumerate(messages):
        if message["role"] == "user":
            reply = next((m["content"] for m in messages[i + 1 :] if m["role"] == "assistant"), None)
            if reply is not None:
                return message["content"], reply
            break
    raise NemotronError(
        f"conversation {conversation.get('id', '?')} has no user message answered by the assistant; "
        "held-out conversations must come from the stage-1 data curation step"
    )


def answer_items(conversations: Sequence[Conversation], num_distractors: int = 3, seed: int = 0) -> list[MCItem]:
    """One multiple-choice item per conversation: its answer against seeded answers to other questions."""
    return build_mc_items([question_answer(c) for c in conversations], num_distractors, seed)


def answer_accuracy(model: torch.nn.Module, tokenizer, items: Sequence[MCItem], *, batch_size: int = 32) -> MCResult:
    """Which answer does the model find most likely after the chat-formatted question?"""

    def context(question: str) -> list[int]:
        return tokenize_prompt(tokenizer, [{"role": "user", "content": question}])

    def choice(answer: str) -> list[int]:
        return answer_ids(tokenizer, answer)

    return mc_accuracy(
        model, tokenizer, items, context, choice,
        unconditional_context=context(UNCONDITIONAL_QUESTION), batch_size=batch_size,
    )


def sample_questions(conversations: Sequence[Conversation], count: int) -> list[str]:
    """The first `count` distinct questions of `conversations`: stage 1 and stage 2 sample the same ones.

    Held-out chats often ask one question several times (with different answers), hence distinct.
    """
    return list(dict.fromkeys(question_answer(c)[0] for c in conversations))[:count]


def chat_samples(
    model: torch.nn.Module, tokenizer, questions: Sequence[str], max_new_tokens: int
) -> list[dict[str, str]]:
    """Greedy answers, stopped at `<|im_end|>` (end of turn) or `</s>`: [{"prompt", "completion"}]."""
    prompts = [tokenize_prompt(tokenizer, [{"role": "user", "content": q}]) for q in questions]
    answers = greedy_samples(model, tokenizer, prompts, max_new_tokens, stop_token_ids=[IM_END_ID, EOS_ID])
    return [{"prompt": q, "completion": a} for q, a in zip(questions, answers)]


def skill_scores(model: torch.nn.Module, tokenizer, problems: Sequence[dict], *, batch_size: int = 256) -> dict:
    """Per held-out skill problem (`{"question", "answer", "near_miss"}` records): "greedy" (the answer
    text), "right" (the checker accepts it), "p_right" and "p_near_miss" (the probability of writing exactly
    that answer, then `<|im_end|>`, after the chat-formatted question; "logp_*": its log, a torch tensor)."""
    from nemotron.training.logprobs import completion_logprobs, evaluation_mode

    if not problems:
        raise NemotronError("no held-out skill problems to score; re-run stage-1 curation with --skill-problems")
    prompts = [tokenize_prompt(tokenizer, [{"role": "user", "content": p["question"]}]) for p in problems]
    greedy = greedy_samples(model, tokenizer, prompts, SKILL_ANSWER_TOKENS, stop_token_ids=[IM_END_ID, EOS_ID],
                            batch_size=batch_size)
    logps = {}
    with evaluation_mode(model), torch.no_grad():
        for key in ("answer", "near_miss"):
            answers = [answer_ids(tokenizer, p[key]) for p in problems]
            logps[key] = completion_logprobs(model, prompts, answers, batch_size=batch_size).double()
    return {"greedy": greedy, "right": np.array([is_right(g, p["answer"]) for g, p in zip(greedy, problems)]),
            "p_right": logps["answer"].exp().numpy(), "p_near_miss": logps["near_miss"].exp().numpy(),
            "logp_right": logps["answer"], "logp_near_miss": logps["near_miss"]}


def skill_metrics(name: str, scores: dict) -> dict:
    """`<name>_skill_accuracy` (greedy), `<name>_skill_p_right` and `<name>_skill_p_near_miss` (means of the
    exact probabilities), each with its standard error over the problems, and the problem count."""
    n = len(scores["right"])
    out = {f"{name}_skill_num_problems": n}
    for key, values in (("accuracy", scores["right"].astype(np.float64)), ("p_right", scores["p_right"]),
                        ("p_near_miss", scores["p_near_miss"])):
        out[f"{name}_skill_{key}"] = float(values.mean())
        out[f"{name}_skill_{key}_stderr"] = float(values.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    return out


def chances(scores: dict, i: int, near_miss: str) -> str:
    """Problem i as a report-card cell: the chance of the right answer and of the teacher's near miss, and
    the greedy answer (`scores`: a `skill_scores` result)."""
    return (f"right {scores['p_right'][i]:.0%}, {near_miss} (the near miss) {scores['p_near_miss'][i]:.0%}; "
            f"greedy {scores['greedy'][i]!r}")
