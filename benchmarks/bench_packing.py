"""Benchmark: token utilisation of sequence packing vs one conversation per padded row.

Utilisation = real tokens / (rows * pack_size), i.e. the share of a training step that is not padding.
Data: every conversation of the chatterbot-corpus package (English YAML files), rendered in the nano2
chat format with a byte-level BPE tokenizer trained on the same text. Baseline, measured in the same
run: each conversation alone in a row padded to pack_size (what an SFT loader does without packing).

    .venv/bin/python benchmarks/bench_packing.py [--pack-size 1024] [--vocab-size 2000]
    .venv/bin/python benchmarks/bench_packing.py --quick     # a 500-token vocabulary

Prints both utilisations and their ratio. Expect ours above 97%.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import chatterbot_corpus
import yaml

from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE, tokenize_conversation
from nemotron.data_prep.packing import PackingConfig, pack_conversations
from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer


def chatterbot_chats() -> list[list[dict[str, str]]]:
    """Each chatterbot conversation as alternating user / assistant messages."""
    folder = Path(chatterbot_corpus.__file__).parent / "data" / "english"
    chats = []
    for path in sorted(folder.glob("*.yml")):
        # BaseLoader keeps every scalar a string: YAML 1.1 would turn a bare "No" into False.
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
        for turns in document.get("conversations", []):
            turns = [turn for turn in turns if isinstance(turn, str) and turn.strip()]
            if len(turns) < 2:
                continue
            roles = ["user", "assistant"] * len(turns)
            chats.append([{"role": role, "content": turn} for role, turn in zip(roles, turns)])
    return chats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack-size", type=int, default=1024)
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="a 500-token vocabulary: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.vocab_size = 500

    chats = chatterbot_chats()
    texts = [message["content"] for chat in chats for message in chat]
    with tempfile.TemporaryDirectory() as scratch:
        folder = train_tokenizer(
            texts, args.vocab_size, Path(scratch) / "tok", chat_template=NANO2_CHAT_TEMPLATE
        )
        tokenizer = load_tokenizer(folder)
    conversations = [
        tokenize_conversation(tokenizer, chat, conversation_id=index) for index, chat in enumerate(chats)
    ]
    lengths = [len(input_ids) for input_ids, _ in conversations]
    tokens = sum(lengths)

    # Baseline: one conversation per row, padded to pack_size.
    baseline_rows = len(conversations)
    baseline = tokens / (baseline_rows * args.pack_size)

    results = {}
    for algorithm in ("first_fit_decreasing", "first_fit_shuffle"):
        started = time.perf_counter()
        config = PackingConfig(pack_size=args.pack_size, algorithm=algorithm, seed=0)
        _, stats = pack_conversations(conversations, config, show_progress=False)
        results[algorithm] = (stats, time.perf_counter() - started)

    print(
        f"chatterbot conversations: {len(conversations)}, tokens: {tokens}, "
        f"length min/mean/max: {min(lengths)}/{tokens / len(lengths):.1f}/{max(lengths)}, "
        f"pack_size: {args.pack_size}"
    )
    print(f"baseline  one conversation per row: {baseline_rows:5d} rows, utilisation {baseline:7.2%}")
    for algorithm, (stats, seconds) in results.items():
        print(
            f"ours      {algorithm:<21s}: {stats.rows:5d} rows, utilisation {stats.utilisation:7.2%}, "
            f"ratio {stats.utilisation / baseline:5.1f}x, {stats.max_conversations_per_row} conv/row max, "
            f"{seconds * 1000:.0f} ms"
        )
    best = results["first_fit_decreasing"][0]
    if best.utilisation < 0.97:
        print(
            f"WARNING: first-fit-decreasing utilisation {best.utilisation:.2%} is below 97%", file=sys.stderr
        )


if __name__ == "__main__":
    main()
