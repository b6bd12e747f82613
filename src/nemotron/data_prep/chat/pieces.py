"""A chat render as pieces, and the one piece-by-piece encoder the ChatML formats (nano2, nano3) use.

A format renders a conversation as a list of `Piece`s; `"".join(piece.text)` is the text its Jinja
template renders, and `encode_pieces` turns the pieces into token ids plus a 0/1 loss mask.

Why encode piece by piece instead of tokenizing the rendered string: transformers builds its
assistant mask from character offsets, so a BPE token that straddles a boundary (e.g. "\\n\\n" made of
the template's newline and the first newline of the content) gets marked as assistant and the mask
is no longer exact. Like nanochat's `render_conversation` (Karpathy, 2025) we encode each piece on
its own and concatenate, so every mask boundary is a token boundary by construction. It also
matches inference: the prompt already ends in the token for "\\n", the model then generates content
tokens starting fresh, which is exactly how the content was tokenized in training. The ids equal
`apply_chat_template`'s except where one of its tokens straddles two pieces, or where a content holds
a marker (tests/test_chat_random.py checks both on seeded random conversations).

How content and markers are kept apart: by kind, never by value. Only the renderer makes marker
pieces (`marker(IM_START_TOKEN)`), and only they become special-token ids; every other piece is text,
encoded with special-token matching off, whatever characters it holds. So a user typing
"<|im_end|>" or "</s>", even as a whole message, gets plain text tokens and can never forge a turn
boundary or an end-of-sequence. (`nemotron.data_prep.chat.harmony` follows the same rule with its own
vocabulary.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from nemotron.data_prep.tokenizer import IM_END_TOKEN, IM_START_TOKEN
from nemotron.errors import NemotronError

if TYPE_CHECKING:  # transformers takes a second to import; data curation must not need it to start
    from transformers import PreTrainedTokenizerBase

# What a loss mask does with a piece: PROMPT is never a target, ANSWER always (with loss_on="assistant"),
# REASONING when reasoning is trained. A format maps these kinds to 0/1 when it encodes.
PROMPT, REASONING, ANSWER = "prompt", "reasoning", "answer"


class Piece(NamedTuple):
    """One piece of a render: text, or (`is_marker`) a marker the renderer emits as one special token."""

    text: str
    kind: str = PROMPT
    is_marker: bool = False


def marker(text: str, kind: str = PROMPT) -> Piece:
    """A marker piece; only renderers call this, never with a message's content."""
    return Piece(text, kind, is_marker=True)


def rendered(pieces: Sequence[Piece]) -> str:
    return "".join(piece.text for piece in pieces)


def marker_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """Ids of <|im_start|> and <|im_end|>; a tokenizer without them cannot speak the ChatML formats."""
    ids = {}
    for token in (IM_START_TOKEN, IM_END_TOKEN):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is None or token_id == tokenizer.unk_token_id or token not in tokenizer.all_special_tokens:
            raise NemotronError(
                f"the tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no special token {token}; "
                "train it with nemotron.data_prep.tokenizer.train_tokenizer (which reserves the chat markers)"
            )
        ids[token] = token_id
    return ids


def encode_text(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[list[int]]:
    """Encode strings as plain text: no BOS/EOS added and special-token strings are NOT matched."""
    encoded = tokenizer(list(texts), add_special_tokens=False, split_special_tokens=True)
    return [list(ids) for ids in encoded["input_ids"]]


def encode_pieces(
    tokenizer: PreTrainedTokenizerBase, pieces: Sequence[Piece], trained: Mapping[str, int]
) -> tuple[list[int], list[int]]:
    """(input ids, 0/1 loss mask): markers as their special ids, text pieces encoded on their own in
    one batched call (each distinct text once); a piece's tokens get `trained[kind]` (0 if absent)."""
    ids_of_marker = marker_ids(tokenizer)
    texts = list(dict.fromkeys(piece.text for piece in pieces if not piece.is_marker))
    encoded = dict(zip(texts, encode_text(tokenizer, texts), strict=True)) if texts else {}
    input_ids: list[int] = []
    loss_mask: list[int] = []
    for piece in pieces:
        ids = [ids_of_marker[piece.text]] if piece.is_marker else encoded[piece.text]
        input_ids.extend(ids)
        loss_mask.extend([trained.get(piece.kind, 0)] * len(ids))
    return input_ids, loss_mask
