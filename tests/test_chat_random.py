"""nano2 and nano3 vs the tokenizer's own Jinja `apply_chat_template`, on seeded random conversations.

Each case renders a random conversation (empty contents, unicode, whitespace runs, contents that are
or contain a template marker, reasoning, tool calls and results, long turns) both ways and checks:

- the same text: our pieces join to the Jinja render, and our ids decode to it;
- the same ids wherever the piece-by-piece rule does not apply. Where ours and the Jinja ids differ,
  the differing stretch (between the nearest byte offsets where both have a token boundary) holds
  a Jinja token that straddles one of our piece boundaries (e.g. "\\n\\n" made of the template's newline
  and the content's first), or a marker in a content, which `apply_chat_template` turns into the
  special token and we keep as text. Nothing else may differ;
- markers in content stay text: ours has exactly as many special ids as the template emits markers;
- the loss mask covers exactly the assistant tokens: a token is a target iff its bytes lie in a
  `{% generation %}` span of the Jinja template (nano3: of the turns after the last user message,
  less the generation prompt `<think>\\n` / `<think></think>`; reasoning only when trained);
- a turn cut by the packer keeps that mask on the tokens that remain (shifted to the labels).

    fast tier: CHAT_CASES_FAST cases per template (default 120), part of `make test-fast`
    deep tier: CHAT_CASES cases per template (default 2000), marked slow

A failure names the template and seed (rerun one case with `CHAT_SEED=<seed>`) and the first difference.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE, nano2_pieces, tokenize_conversation
from nemotron.data_prep.chat.nano3 import (
    NANO3_CHAT_TEMPLATE,
    THINK_OFF,
    THINK_ON,
    nano3_pieces,
    tokenize_nano3_conversation,
    tokenize_nano3_prompt,
)
from nemotron.data_prep.chat.pieces import rendered
from nemotron.data_prep.packing import PackingConfig, pack_conversations, shift_loss_mask
from nemotron.data_prep.tokenizer import SPECIAL_TOKENS, load_tokenizer, train_tokenizer
from nemotron.errors import NemotronError

MARKERS = ["<|im_start|>", "<|im_end|>", "</s>", "<s>", "<pad>"]  # the tokenizer's special tokens
TEXT_MARKERS = ["<think>", "</think>", "<tool_call>", "<tool_response>", "<function=f>"]  # nano3's, plain text
WORDS = ["the", "cat", "Paris", "42", "3.14", "Zürich", "日本語", "🙂", "é", " ", "  ", "\n", "\n\n", "\n\n\n",
         "\t", "a\nb", "?", "!", "{", "}", '"', "yes", "no", "assistant", "user"]


def random_text(rng: random.Random, blank_ok: bool = True) -> str:
    """Words, unicode and whitespace runs; 1 case in 4 is, starts with, ends with or holds a marker."""
    text = "".join(rng.choice(WORDS) + rng.choice(["", " "]) for _ in range(rng.randint(0, 12)))
    if rng.random() < 0.25:
        mark = rng.choice(MARKERS + TEXT_MARKERS)
        middle = len(text) // 2
        text = rng.choice([mark, mark + text, text + mark, text[:middle] + mark + text[middle:]])
    if rng.random() < 0.05:
        text = text * rng.randint(10, 30)  # a long turn, for the packer to cut
    if not blank_ok and not text.strip():
        text += rng.choice(["ok", "é", "42"])
    return text


def random_nano2(rng: random.Random) -> list[dict]:
    messages = [{"role": "system", "content": random_text(rng, False)}] if rng.random() < 0.4 else []
    for _ in range(rng.randint(1, 3)):
        messages.append({"role": "user", "content": random_text(rng, False)})
        messages.append({"role": "assistant", "content": random_text(rng, False)})
    if rng.random() < 0.2:  # consecutive turns of one role are allowed
        messages.insert(rng.randrange(len(messages)), {"role": rng.choice(["user", "assistant"]),
                                                       "content": random_text(rng, False)})
    return messages


def random_nano3(rng: random.Random) -> list[dict]:
    messages = [{"role": "system", "content": random_text(rng)}] if rng.random() < 0.5 else []
    for _ in range(rng.randint(1, 3)):
        messages.append({"role": "user", "content": random_text(rng)})
        for _ in range(rng.randint(0, 2)):  # tool calls and their results
            arguments = {f"k{i}": rng.choice([random_text(rng), rng.randint(-9, 99), [1, "x"], {"a": random_text(rng)}])
                         for i in range(rng.randint(0, 3))}
            call = {"name": rng.choice(["get_weather", "search"]), "arguments": arguments}
            messages.append({"role": "assistant", "content": random_text(rng), "tool_calls": [
                {"type": "function", "function": call} if rng.random() < 0.5 else call
                for _ in range(rng.randint(1, 2))]} | _reasoning(rng))
            messages += [{"role": "tool", "content": random_text(rng)} for _ in range(rng.randint(1, 2))]
        messages.append({"role": "assistant", "content": random_text(rng)} | _reasoning(rng))
    return messages


def _reasoning(rng: random.Random) -> dict:
    return {"reasoning_content": rng.choice([random_text(rng), "", "  \n"])} if rng.random() < 0.6 else {}


# ---------------------------------------------------------------------------------------------------
# The oracle: byte offsets of tokens, pieces and the Jinja template's generation spans
# ---------------------------------------------------------------------------------------------------


def boundaries(tokenizer, ids: list[int]) -> list[int]:
    """Byte offsets where each token ends. Byte-level BPE writes each byte as one character, and the
    special tokens are ASCII, so a token's length in bytes is the length of its token string."""
    ends, total = [], 0
    for token in tokenizer.convert_ids_to_tokens(ids):
        total += len(token)
        ends.append(total)
    return ends


def byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode())


def first_unexplained_difference(tokenizer, ours: list[int], theirs: list[int], piece_ends: set[int],
                                 marker_spans: list[tuple[int, int]]) -> tuple[str | None, Counter]:
    """Cut both id lists at the byte offsets where both have a token boundary; join differing stretches
    that touch. Each differing region must hold a Jinja token straddling one of our piece boundaries,
    or a marker in content that Jinja made special and we kept as text (which also changes how the
    text beside it splits). Returns (the first unexplained region or None, counts per explanation)."""
    ours_ends, theirs_ends = boundaries(tokenizer, ours), boundaries(tokenizer, theirs)
    regions, i, j, start = [], 0, 0, 0  # (start byte, end byte, ours slice, theirs slice)
    for end in sorted(set(ours_ends) & set(theirs_ends)):
        a, b = i, j
        while ours_ends[i] < end:
            i += 1
        while theirs_ends[j] < end:
            j += 1
        i, j = i + 1, j + 1
        if ours[a:i] != theirs[b:j]:
            if regions and regions[-1][1] == start:
                regions[-1] = (regions[-1][0], end, slice(regions[-1][2].start, i), slice(regions[-1][3].start, j))
            else:
                regions.append((start, end, slice(a, i), slice(b, j)))
        start = end
    special = set(tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS))
    counts = Counter()
    for start, end, in_ours, in_theirs in regions:
        theirs_starts = [start, *theirs_ends[in_theirs.start:in_theirs.stop - 1]]
        if any(s < p < e for s, e in zip(theirs_starts, theirs_ends[in_theirs], strict=True) for p in piece_ends):
            counts["straddling token"] += 1
        elif (any(start <= at < end for at, _ in marker_spans) and any(t in special for t in theirs[in_theirs])
              and not any(t in special for t in ours[in_ours])):
            counts["marker in content"] += 1
        else:
            return (f"bytes {start}..{end}: ours {tokenizer.convert_ids_to_tokens(ours[in_ours])} vs Jinja "
                    f"{tokenizer.convert_ids_to_tokens(theirs[in_theirs])}: no piece boundary inside a Jinja "
                    "token and no marker in content"), counts
    return None, counts


def content_marker_spans(text_bytes: bytes, contents: list[str]) -> list[tuple[int, int]]:
    """Byte spans of special-token strings inside contents (found by searching the render for each)."""
    spans = []
    for content in contents:
        for mark in MARKERS:
            if mark in content:
                at = text_bytes.find(mark.encode())
                while at >= 0:
                    spans.append((at, at + len(mark)))
                    at = text_bytes.find(mark.encode(), at + 1)
    return spans


def expected_mask(tokenizer, ids: list[int], trained_bytes: list[tuple[int, int]]) -> list[int]:
    ends = boundaries(tokenizer, ids)
    starts = [0, *ends[:-1]]
    inside = [any(s <= a and b <= e for s, e in trained_bytes) for a, b in zip(starts, ends, strict=True)]
    overlapping = [any(a < e and s < b for s, e in trained_bytes) for a, b in zip(starts, ends, strict=True)]
    assert inside == overlapping, "a token straddles the edge of the trained text"
    return [int(flag) for flag in inside]


# ---------------------------------------------------------------------------------------------------
# One case
# ---------------------------------------------------------------------------------------------------


def check_case(template: str, seed: int, tokenizer, counts: Counter) -> None:
    rng = random.Random(seed)
    where = f"{template} seed {seed} (rerun: CHAT_SEED={seed})"
    if template == "nano2":
        messages, jinja = random_nano2(rng), NANO2_CHAT_TEMPLATE
        pieces = nano2_pieces(messages)
        ids, mask = tokenize_conversation(tokenizer, messages)
    else:
        messages, jinja = random_nano3(rng), NANO3_CHAT_TEMPLATE
        pieces = nano3_pieces(messages)
        ids, mask = tokenize_nano3_conversation(tokenizer, messages, train_reasoning=True)
    text_list, spans = render_jinja_template([messages], chat_template=jinja, return_assistant_tokens_mask=True)
    text = text_list[0]
    # the same text
    assert rendered(pieces) == text, where
    assert tokenizer.decode(ids, skip_special_tokens=False) == text, where
    theirs = tokenizer.apply_chat_template(messages, chat_template=jinja, tokenize=True, return_dict=True)["input_ids"]
    # markers in content stay text: ours has as many special ids as the template emits markers, counted
    # in a render of the same chat with every marker in its contents replaced by plain text
    neutral = json.dumps(messages)
    for mark in MARKERS:
        neutral = neutral.replace(mark, "X")
    template_markers = render_jinja_template([json.loads(neutral)], chat_template=jinja)[0][0]
    special = set(tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS))
    assert sum(token in special for token in ids) == sum(template_markers.count(mark) for mark in MARKERS), (
        f"{where}: a marker in content became a special token")
    contents = [m.get("content") or "" for m in messages] + [m.get("reasoning_content") or "" for m in messages]
    contents += [json.dumps(m.get("tool_calls") or [], ensure_ascii=False) for m in messages]
    # the same ids, except at a straddling token or a marker in content
    text_bytes = text.encode()
    piece_ends, total = set(), 0
    for piece in pieces:
        total += len(piece.text.encode())
        piece_ends.add(total)
    problem, found = first_unexplained_difference(tokenizer, ids, theirs, piece_ends,
                                                  content_marker_spans(text_bytes, contents))
    assert problem is None, f"{where}: {problem}"
    counts.update(found)
    counts["same ids" if ids == theirs else "different ids"] += 1
    # the loss mask covers exactly the assistant tokens
    generation = [(byte_offset(text, s), byte_offset(text, e)) for s, e in spans[0]]
    if template == "nano2":
        trained = generation
    else:
        trained, reasoning_bytes = nano3_trained_bytes(messages, text, generation)
        _, mask_off = tokenize_nano3_conversation(tokenizer, messages, train_reasoning=False)
        untrained = [i for i, (on, off) in enumerate(zip(mask, mask_off, strict=True)) if on != off]
        assert expected_mask(tokenizer, ids, reasoning_bytes) == [int(i in set(untrained)) for i in range(len(ids))], (
            f"{where}: train_reasoning=False must drop exactly the reasoning tokens")
        for thinking in (True, False):  # the generation prompt, reasoning on and off
            prompt = messages[: max(i for i, m in enumerate(messages) if m["role"] == "user") + 1]
            prompt_text = tokenizer.apply_chat_template(prompt, chat_template=jinja, tokenize=False,
                                                        add_generation_prompt=True, enable_thinking=thinking)
            prompt_ids = tokenize_nano3_prompt(tokenizer, prompt, enable_thinking=thinking)
            assert tokenizer.decode(prompt_ids, skip_special_tokens=False) == prompt_text, where
            assert prompt_text.endswith("assistant\n" + (THINK_ON if thinking else THINK_OFF)), where
    assert mask == expected_mask(tokenizer, ids, trained), f"{where}: the loss mask is not the assistant tokens"
    # a turn cut by the packer keeps that mask on what remains
    if len(ids) > 8:  # (with a 2-token chat beside it: the packer refuses to cut every chat it is given)
        cut = rng.randint(2, len(ids) - 1)
        rows, stats = pack_conversations([(ids, mask), ([1, 2], [0, 1])], PackingConfig(pack_size=cut),
                                         show_progress=False)
        row = next(row for row in rows if list(row.input_ids) == ids[:cut])
        assert stats.truncated == 1 and list(row.seq_start_id) == [0], where
        assert list(row.loss_mask) == list(shift_loss_mask(expected_mask(tokenizer, ids, trained)[:cut])), where


def nano3_trained_bytes(messages: list[dict], text: str, generation: list[tuple[int, int]]):
    """Trained bytes: the generation spans of assistant turns after the last user message, less the
    generation prompt; and the reasoning bytes among them (`reasoning + "\\n</think>"`, its newline)."""
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    trained, reasoning_bytes = [], []
    for index, (start, end) in zip(assistants, generation, strict=True):
        if index < last_user:
            continue
        body = text.encode()[start:end].decode()
        prompt = THINK_ON if body.startswith(THINK_ON) else THINK_OFF
        assert body.startswith(prompt)
        trained.append((start + len(prompt.encode()), end))
        if prompt == THINK_ON:
            reasoning = messages[index]["reasoning_content"]
            close = start + len(prompt) + len(f"{reasoning}\n</think>".encode())
            if text.encode()[close:close + 1] == b"\n":  # the newline after </think> when something follows
                close += 1
            reasoning_bytes.append((start + len(prompt), close))
    return trained, reasoning_bytes


# ---------------------------------------------------------------------------------------------------
# Tiers
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A byte-level BPE trained on random chats rendered both ways, so it has merges across the
    template's newlines ("\\n\\n", "\\n<") that piece-by-piece encoding must cut."""
    rng = random.Random(0)
    corpus = [render_jinja_template([random_nano2(rng)], chat_template=NANO2_CHAT_TEMPLATE)[0][0] for _ in range(60)]
    corpus += [render_jinja_template([random_nano3(rng)], chat_template=NANO3_CHAT_TEMPLATE)[0][0] for _ in range(60)]
    folder = tmp_path_factory.mktemp("tok") / "chat"
    train_tokenizer(corpus, vocab_size=700, output_dir=folder, chat_template=NANO2_CHAT_TEMPLATE)
    return load_tokenizer(folder)


def seeds(variable: str, default: int, first: int) -> range:
    if os.environ.get("CHAT_SEED"):
        seed = int(os.environ["CHAT_SEED"])
        return range(seed, seed + 1)
    return range(first, first + int(os.environ.get(variable, default)))


def run_tier(template: str, cases: range, tokenizer) -> Counter:
    counts = Counter()
    for seed in cases:
        check_case(template, seed, tokenizer, counts)
    print(f"{template}: {len(cases)} random conversations: {dict(counts)}", file=sys.stderr)
    return counts


@pytest.mark.parametrize("template", ["nano2", "nano3"])
def test_random_conversations_match_the_jinja_template(template, tokenizer):
    counts = run_tier(template, seeds("CHAT_CASES_FAST", 120, first=0), tokenizer)
    if not os.environ.get("CHAT_SEED"):  # the cases reach both kinds of difference, and plain equality
        assert counts["same ids"] and counts["straddling token"] and counts["marker in content"], counts


@pytest.mark.slow
@pytest.mark.parametrize("template", ["nano2", "nano3"])
def test_many_random_conversations_match_the_jinja_template(template, tokenizer):
    run_tier(template, seeds("CHAT_CASES", 2000, first=1_000_000), tokenizer)


def test_blank_nano2_content_is_refused_though_jinja_would_render_it(tokenizer):
    """A deliberate difference: nano2 refuses a blank message (nothing to train, or a broken record)."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " \n"}]
    assert render_jinja_template([messages], chat_template=NANO2_CHAT_TEMPLATE)[0][0]
    with pytest.raises(NemotronError, match="has empty content"):
        tokenize_conversation(tokenizer, messages)


@pytest.mark.parametrize("role", ["system", "user", "assistant"])
@pytest.mark.parametrize("mark", MARKERS)
def test_a_content_that_is_exactly_a_marker_stays_text(tokenizer, role, mark):
    """The injection a piece lookup by value let through (nano3's answer, Harmony's content): a whole
    content equal to a marker. Both formats give the template's markers only as special ids."""
    special = set(tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS))
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    messages = [{"role": role, "content": mark}] + messages if role == "system" else messages
    messages[-1 if role == "assistant" else 0] = {"role": role, "content": mark}
    for ids in (tokenize_conversation(tokenizer, messages)[0], tokenize_nano3_conversation(tokenizer, messages)[0]):
        markers = [tokenizer.convert_ids_to_tokens(i) for i in ids if i in special]
        assert set(markers) == {"<|im_start|>", "<|im_end|>"} and len(markers) % 2 == 0, (role, mark, markers)
        assert markers.count("<|im_start|>") == markers.count("<|im_end|>"), (role, mark, markers)
