"""Deterministic greedy samples: what the model actually writes, for reports and answer checks.

`greedy_samples(model, tokenizer, prompts, max_new_tokens, stop_token_ids)` decodes with
`model.generate(do_sample=False, num_beams=1)`: at each step the single most likely next token, so the same
model and prompts always give the same text (no temperature, no seed). It uses the model's KV / Mamba
state cache, so each new token costs one step rather than a pass over the whole prefix.

Checked for transformers 5.23 on CPU (and tested against a plain argmax loop, see tests/test_evaluation.py):
`NemotronHForCausalLM.generate` runs on the PyTorch reference Mamba path and honours left padding, so
prompts are batched, padded on the left, and each row's text is the same as when it is decoded alone.

Why every generation knob is passed explicitly: `generate` fills any argument we leave out from the
checkpoint's `generation_config` (a saved `repetition_penalty` or `eos_token_id` would silently change
"greedy"). Passing `eos_token_id=None` really disables stopping there, while a `GenerationConfig` object
with `eos_token_id=None` would be overridden by the model's default EOS.

The returned text is the generated continuation only, cut before the first stop token (the stop token
itself is not included) and decoded with special tokens kept, so a reader sees exactly what was produced.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nemotron.errors import NemotronError
from nemotron.training.logprobs import cut_at_stop, evaluation_mode, left_pad, model_device  # noqa: F401

Prompt = str | Sequence[int]


def encode_prompt(tokenizer, prompt: Prompt, index: int) -> list[int]:
    """Token ids of one prompt: text is encoded without adding special tokens; ids pass through."""
    ids = (
        tokenizer.encode(prompt, add_special_tokens=False)
        if isinstance(prompt, str)
        else [int(t) for t in prompt]
    )
    if not ids:
        raise NemotronError(f"prompt {index} is empty; generation needs at least one prompt token")
    return ids


def greedy_samples(
    model: torch.nn.Module,
    tokenizer,
    prompts: Sequence[Prompt],
    max_new_tokens: int,
    stop_token_ids: Sequence[int] = (),
    *,
    batch_size: int = 8,
) -> list[str]:
    """Greedy continuation text of each prompt (a string, or token ids), at most `max_new_tokens` tokens."""
    if max_new_tokens < 1:
        raise NemotronError(f"max_new_tokens={max_new_tokens} must be at least 1")
    if batch_size < 1:
        raise NemotronError(f"batch_size={batch_size} must be at least 1")
    stop_token_ids = [int(t) for t in stop_token_ids]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    encoded = [encode_prompt(tokenizer, prompt, i) for i, prompt in enumerate(prompts)]
    device = model_device(model)
    texts = []
    with evaluation_mode(model):
        for start in range(0, len(encoded), batch_size):
            input_ids, attention_mask = left_pad(encoded[start : start + batch_size], pad_id)
            output = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                do_sample=False,
                num_beams=1,
                max_new_tokens=max_new_tokens,
                min_new_tokens=0,
                repetition_penalty=1.0,
                eos_token_id=stop_token_ids or None,
                pad_token_id=pad_id,
            )
            for row in output[:, input_ids.shape[1] :].tolist():
                texts.append(tokenizer.decode(cut_at_stop(row, stop_token_ids), skip_special_tokens=False))
    return texts
