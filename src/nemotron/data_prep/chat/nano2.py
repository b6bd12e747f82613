"""The nano2 chat format, and how a conversation becomes token ids plus a loss mask.

What this module does:
- `NANO2_CHAT_TEMPLATE`: the Jinja chat template (ChatML-like, the format of OpenAI's ChatML and of
  Nemotron's chat models) that `tokenizer.apply_chat_template(messages, ...)` renders:

      <|im_start|>{role}\\n{content}<|im_end|>\\n        (once per message)
      <|im_start|>assistant\\n                          (the generation prompt)

  Assistant content and its `<|im_end|>` sit inside `{% generation %}...{% endgeneration %}`, so
  transformers' `apply_chat_template(..., return_dict=True, return_assistant_tokens_mask=True)` works.
- `tokenize_conversation(tokenizer, messages, loss_on)` -> `(input_ids, loss_mask)` for SFT, where
  `loss_mask[i] == 1` means "token i is a target the model is trained to produce". With
  `loss_on="assistant"` that is exactly every assistant content token plus its `<|im_end|>` (the model
  must learn to stop); template markers, roles and user/system text are never in the mask.
- `render_prompt` / `tokenize_prompt`: the same format with the generation prompt, for inference.
- `validate_conversation`: the checks above as one call, so curation can filter bad records first.

Every piece is encoded on its own (`nemotron.data_prep.chat.pieces`: why, and how a content that
is or holds "<|im_end|>" stays text), so every mask boundary is a token boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from nemotron.data_prep.chat.pieces import ANSWER, PROMPT, Piece, encode_pieces, marker
from nemotron.data_prep.tokenizer import IM_END_TOKEN, IM_START_TOKEN
from nemotron.errors import NemotronError

if TYPE_CHECKING:  # transformers takes a second to import; data curation must not need it to start
    from transformers import PreTrainedTokenizerBase

CHAT_ROLES = ("system", "user", "assistant")
LossOn = Literal["assistant", "all"]

# The Jinja template is the published definition of the format (it travels inside every tokenizer
# folder we save). `'\n'` inside Jinja string literals is a newline; `-` trims template whitespace so
# only the quoted strings are emitted.
NANO2_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{- raise_exception('nano2 chat template: unknown role ' + message['role']"
    " + '; allowed roles are system, user, assistant') -}}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- message['content'] + '<|im_end|>' -}}{%- endgeneration -%}"
    "{%- else -%}"
    "{{- message['content'] + '<|im_end|>' -}}"
    "{%- endif -%}"
    "{{- '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
GENERATION_PROMPT = f"{IM_START_TOKEN}assistant\n"


# ---------------------------------------------------------------------------------------------------
# Validation: one clear line per bad conversation
# ---------------------------------------------------------------------------------------------------


def validate_conversation(
    messages: Any, conversation_id: str | int | None = None, require_assistant: bool = False
) -> None:
    """Raise NemotronError naming the conversation if `messages` is not a valid nano2 chat.

    Valid: a non-empty list of {"role", "content"} dicts, role in CHAT_ROLES, content a non-blank
    string; with `require_assistant`, at least one assistant message (otherwise nothing is trained).
    """
    where = _describe(conversation_id, messages)
    if not isinstance(messages, (list, tuple)) or not messages:
        raise NemotronError(
            f"{where}: messages must be a non-empty list of {{'role', 'content'}} dicts, got a "
            f"{type(messages).__name__}; normalize the record with transforms.openai_chat()"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise NemotronError(
                f"{where}: message {index} is a {type(message).__name__}, not a dict with 'role' and "
                "'content'; normalize the record with nemotron.data_prep.transforms.openai_chat()"
            )
        role, content = message.get("role"), message.get("content")
        if role not in CHAT_ROLES:
            raise NemotronError(
                f"{where}: message {index} has unknown role {role!r}; allowed roles are "
                f"{', '.join(CHAT_ROLES)}; map the role with a transform or drop the conversation"
            )
        if not isinstance(content, str):
            raise NemotronError(
                f"{where}: message {index} ({role}) has content of type {type(content).__name__}, "
                "expected a string; normalize the record with nemotron.data_prep.transforms.openai_chat()"
            )
        if not content.strip():
            raise NemotronError(
                f"{where}: message {index} ({role}) has empty content; drop the conversation or "
                "fill the message"
            )
    if require_assistant and not any(message["role"] == "assistant" for message in messages):
        raise NemotronError(
            f"{where}: no assistant message, so with loss_on='assistant' no token would be trained; "
            "drop the conversation or use loss_on='all'"
        )


def _describe(conversation_id: str | int | None, messages: Any) -> str:
    """Name a conversation in an error: its id when known, else the start of its first message."""
    if conversation_id is not None:
        return f"conversation {conversation_id!r}"
    try:
        preview = str(messages[0]["content"])[:40]
    except (TypeError, KeyError, IndexError):
        preview = repr(messages)[:40]
    return f"conversation starting {preview!r}"


# ---------------------------------------------------------------------------------------------------
# Tokenization with an exact loss mask
# ---------------------------------------------------------------------------------------------------


def tokenize_conversation(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[dict[str, str]],
    loss_on: LossOn = "assistant",
    conversation_id: str | int | None = None,
) -> tuple[list[int], list[int]]:
    """Token ids of `messages` in the nano2 format and a 0/1 loss mask of the same length.

    loss_on="assistant": mask is 1 on assistant content tokens and their `<|im_end|>`, 0 elsewhere.
    loss_on="all": every token is a target (plain language modelling over the whole chat).
    The mask is *unshifted*: position i says whether token i is a target. Packing shifts it to the
    label convention Megatron-Bridge expects (see nemotron.data_prep.packing).
    """
    if loss_on not in ("assistant", "all"):
        raise NemotronError(f"loss_on={loss_on!r} is not supported; use 'assistant' or 'all'")
    validate_conversation(messages, conversation_id, require_assistant=loss_on == "assistant")
    return encode_pieces(tokenizer, nano2_pieces(messages), {PROMPT: int(loss_on == "all"), ANSWER: 1})


def tokenize_prompt(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]) -> list[int]:
    """Token ids to feed a model for its next assistant turn: the chat plus `<|im_start|>assistant\\n`.

    Tokenized piece by piece exactly like `tokenize_conversation`, so what the model sees at inference
    is what it saw in training.
    """
    validate_conversation(messages)
    input_ids, _ = encode_pieces(tokenizer, nano2_pieces(messages, add_generation_prompt=True), {})
    return input_ids


def nano2_pieces(messages: Sequence[dict[str, str]], add_generation_prompt: bool = False) -> list[Piece]:
    """The render as pieces: `<|im_start|>`, "{role}\\n", content, `<|im_end|>`, "\\n" per message; an
    assistant's content and its `<|im_end|>` are ANSWER (what the model must produce), the rest PROMPT."""
    pieces = []
    for message in messages:
        kind = ANSWER if message["role"] == "assistant" else PROMPT
        pieces += [marker(IM_START_TOKEN), Piece(f"{message['role']}\n"), Piece(message["content"], kind),
                   marker(IM_END_TOKEN, kind), Piece("\n")]
    if add_generation_prompt:
        pieces += [marker(IM_START_TOKEN), Piece("assistant\n")]
    return pieces


def render_prompt(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]) -> str:
    """The chat as text, ending in the generation prompt, rendered by the Jinja template itself."""
    validate_conversation(list(messages))
    return tokenizer.apply_chat_template(
        list(messages), chat_template=NANO2_CHAT_TEMPLATE, add_generation_prompt=True, tokenize=False
    )
