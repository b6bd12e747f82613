"""Heuristic quality filters: cheap rules that remove text a language model should not learn from.

Web-scale pretraining corpora are cleaned with simple, explainable rules before any model-based
scoring. We implement the classic ones:

- Gopher's "MassiveText quality filters" (Rae et al. 2021, "Scaling Language Models", appendix A):
  word count, mean word length, symbol-to-word ratio, bullet and ellipsis lines, share of words with
  a letter, stop words, duplicate lines and repeated n-grams;
- C4's page rules (Raffel et al. 2020, section 2.2): "lorem ipsum", curly brackets (code), lines
  without terminal punctuation (as NeMo Curator's `PunctuationFilter` states it);
- NeMo Curator's `NonAlphaNumericFilter`, one of the heuristic filters Nemotron-CC (Su et al. 2024)
  ran on its lower-quality buckets.

Each `QualityFilter` has a name, a measurement, and bounds; `reference` quotes the paper's value and
says where we moved it. The papers tuned their values on web pages; our corpus is verse drama, whose
speaker tags ("Ham.") and stage directions ("[Exit.]") repeat by design and whose lines end in commas.
We adapted a threshold only when real scenes failed it while the garbage it targets still fails.

`apply_filters(docs, filters)` runs the filters in order and counts every removed document under the
first filter that rejected it, so the counts add up to exactly what was removed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import TypeVar

import numpy as np

from nemotron.progress import progress_bar

T = TypeVar("T")

GOPHER_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
BULLETS = ("•", "●", "◦", "‣", "▪", "-", "*", "–", "—")
# C4 keeps lines ending in . ! ? or a quote; verse lines also end in , ; : (adapted, see filters).
END_PUNCTUATION = (".", "!", "?", '"', "'", "”", "’", ",", ";", ":")
WORD = re.compile(r"\w+(?:'\w+)*")
TOKEN_WITHOUT_LETTER = re.compile(r"(?<!\S)(?:[^\w\s]|[\d_])+(?!\S)")  # e.g. "--", "1599", "#"
NON_ALPHANUMERIC = re.compile(r"[^\w\s]|_")
SPACE = re.compile(r"\s")


class TextStats:
    """Words and lines of one text, split once and shared by every filter."""

    def __init__(self, text: str):
        self.text = text
        self.words = text.split()  # Gopher's words: whitespace-separated tokens
        self.lines = [line.strip() for line in text.split("\n") if line.strip()]

    @cached_property
    def lower_words(self) -> list[str]:
        """Lowercased words without punctuation ("Lord," -> "lord"; "'tis" -> "tis") for n-grams."""
        return WORD.findall(self.text.lower())

    @cached_property
    def ngram_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Word ids and word lengths as arrays, so n-gram statistics run in numpy, not Python loops."""
        vocabulary: dict[str, int] = {}
        ids = np.array([vocabulary.setdefault(w, len(vocabulary)) for w in self.lower_words], dtype=np.uint64)
        return ids, np.array([len(w) for w in self.lower_words], dtype=np.int64)

    def ngram_hashes(self, n: int) -> np.ndarray:
        """One 64-bit hash per word n-gram (position i covers words i..i+n-1): a polynomial rolling
        hash that wraps around modulo 2**64; a collision is astronomically unlikely at these sizes."""
        ids, _ = self.ngram_arrays
        count = len(ids) - n + 1
        if count <= 0:
            return np.zeros(0, dtype=np.uint64)
        hashes = np.zeros(count, dtype=np.uint64)
        for offset in range(n):
            hashes = hashes * np.uint64(1_000_003) + ids[offset:offset + count] + np.uint64(1)
        return hashes


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


# ------------------------------------------------------------------------------- measurements

def word_count(s: TextStats) -> float:
    return len(s.words)


def mean_word_length(s: TextStats) -> float:
    return _share(sum(len(w) for w in s.lower_words), len(s.lower_words))


def symbol_to_word_ratio(s: TextStats) -> float:
    """Hash marks and ellipses per word (Gopher): tag clouds and truncated teasers are full of them."""
    symbols = s.text.count("#") + s.text.count("...") + s.text.count("…")
    return _share(symbols, len(s.words))


def bullet_line_share(s: TextStats) -> float:
    return _share(sum(line.startswith(BULLETS) for line in s.lines), len(s.lines))


def ellipsis_line_share(s: TextStats) -> float:
    return _share(sum(line.endswith(("...", "…")) for line in s.lines), len(s.lines))


def alphabetic_word_share(s: TextStats) -> float:
    return 1.0 - _share(len(TOKEN_WITHOUT_LETTER.findall(s.text)), len(s.words))


def stop_word_count(s: TextStats) -> float:
    """How many of Gopher's eight stop words appear: real English sentences need some of them."""
    return len(GOPHER_STOP_WORDS.intersection(s.lower_words))


def non_alphanumeric_share(s: TextStats) -> float:
    """Share of non-space characters that are neither letters nor digits (NeMo Curator)."""
    visible = len(s.text) - len(SPACE.findall(s.text))
    return _share(len(NON_ALPHANUMERIC.findall(s.text)), visible)


def duplicate_line_share(s: TextStats) -> float:
    """Share of lines that repeat an earlier line, counting only lines of 4+ words (see filters)."""
    lines = [line for line in s.lines if len(line.split()) >= 4]
    return _share(len(lines) - len(set(lines)), len(lines))


def duplicate_line_char_share(s: TextStats) -> float:
    """Share of line characters in lines that repeat an earlier line (Gopher, all lines)."""
    seen, duplicated = set(), 0
    for line in s.lines:
        duplicated += len(line) if line in seen else 0
        seen.add(line)
    return _share(duplicated, sum(len(line) for line in s.lines))


def top_ngram_char_share(n: int) -> Callable[[TextStats], float]:
    """Characters covered by the single most frequent word n-gram (Gopher, n = 2..4)."""
    def measure(s: TextStats) -> float:
        hashes, (_, lengths) = s.ngram_hashes(n), s.ngram_arrays
        if len(hashes) == 0:
            return 0.0
        _, first, counts = np.unique(hashes, return_index=True, return_counts=True)
        top = np.argmax(counts)
        if counts[top] < 2:
            return 0.0
        start = first[top]
        return _share(int(lengths[start:start + n].sum()) * int(counts[top]), int(lengths.sum()))
    measure.__name__ = f"top_{n}gram_char_share"
    return measure


def duplicate_ngram_char_share(n: int) -> Callable[[TextStats], float]:
    """Characters inside word n-grams that occur more than once (Gopher, n = 5..10)."""
    def measure(s: TextStats) -> float:
        hashes, (_, lengths) = s.ngram_hashes(n), s.ngram_arrays
        if len(hashes) == 0:
            return 0.0
        _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
        starts = np.flatnonzero(counts[inverse] > 1)
        # Mark words i..i+n-1 of every repeated n-gram; overlapping n-grams count each word once.
        depth = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.add.at(depth, starts, 1)
        np.add.at(depth, starts + n, -1)
        covered = np.cumsum(depth[:-1]) > 0
        return _share(int(lengths[covered].sum()), int(lengths.sum()))
    measure.__name__ = f"duplicate_{n}gram_char_share"
    return measure


def lines_without_end_punctuation(s: TextStats) -> float:
    return _share(sum(not line.endswith(END_PUNCTUATION) for line in s.lines), len(s.lines))


def curly_brackets_per_word(s: TextStats) -> float:
    return _share(s.text.count("{") + s.text.count("}"), len(s.words))


def lorem_ipsum_count(s: TextStats) -> float:
    return len(re.findall(r"lorem ipsum", s.text, re.IGNORECASE))


# ----------------------------------------------------------------------------------- filters

@dataclass(frozen=True)
class QualityFilter:
    """A named rule: keep a text when `min_value <= measure(text) <= max_value`."""

    name: str
    measure: Callable[[TextStats], float]
    min_value: float = float("-inf")
    max_value: float = float("inf")
    reference: str = ""

    def keep(self, text: str | TextStats) -> bool:
        value = self.measure(text if isinstance(text, TextStats) else TextStats(text))
        return self.min_value <= value <= self.max_value


def default_filters() -> list[QualityFilter]:
    """Our filter set, cheapest first (later filters only see what earlier ones kept)."""
    return [
        QualityFilter("word_count", word_count, 50, 100_000,
                      reference="Gopher: 50..100,000 words"),
        QualityFilter("mean_word_length", mean_word_length, 3, 10,
                      reference="Gopher: 3..10 characters"),
        QualityFilter("symbol_to_word_ratio", symbol_to_word_ratio, max_value=0.1,
                      reference="Gopher: at most 0.1 '#' or '...' per word"),
        QualityFilter("bullet_lines", bullet_line_share, max_value=0.9,
                      reference="Gopher: at most 90% of lines start with a bullet"),
        QualityFilter("ellipsis_lines", ellipsis_line_share, max_value=0.3,
                      reference="Gopher: at most 30% of lines end with an ellipsis"),
        QualityFilter("alphabetic_words", alphabetic_word_share, min_value=0.8,
                      reference="Gopher: at least 80% of words contain a letter"),
        QualityFilter("stop_words", stop_word_count, min_value=2,
                      reference="Gopher: at least 2 of the, be, to, of, and, that, have, with"),
        QualityFilter("non_alphanumeric", non_alphanumeric_share, max_value=0.25,
                      reference="NeMo Curator NonAlphaNumericFilter: at most 25% (we exclude whitespace)"),
        QualityFilter("curly_brackets", curly_brackets_per_word, max_value=0.01,
                      reference="C4 drops a page with any '{' (code); adapted to 1 per 100 words because "
                      "Gutenberg typos like '{Aside.]' would reject whole scenes"),
        QualityFilter("lorem_ipsum", lorem_ipsum_count, max_value=0,
                      reference="C4: no 'lorem ipsum' placeholder text"),
        QualityFilter("end_punctuation", lines_without_end_punctuation, max_value=0.85,
                      reference="C4 via NeMo Curator PunctuationFilter: at most 85% of lines lack an end mark; "
                                "adapted to count , ; : as end marks, since verse lines end in them "
                                "(with . ! ? and quotes only, Sonnet 66 and Time's chorus fail)"),
        QualityFilter("duplicate_lines", duplicate_line_share, max_value=0.3,
                      reference="Gopher: at most 30% duplicate lines; adapted to count only lines of 4+ words, "
                                "since speaker tags ('Ham.') and '[Exit.]' repeat in every scene (over all "
                                "lines, 33 of 739 real scenes fail, up to 39%)"),
        QualityFilter("duplicate_line_chars", duplicate_line_char_share, max_value=0.2,
                      reference="Gopher: at most 20% of characters in duplicate lines"),
        *[QualityFilter(f"top_{n}gram", top_ngram_char_share(n), max_value=limit,
                        reference=f"Gopher: most frequent {n}-gram covers at most {limit:.0%} of characters")
          for n, limit in ((2, 0.20), (3, 0.18), (4, 0.16))],
        *[QualityFilter(f"duplicate_{n}grams", duplicate_ngram_char_share(n), max_value=limit,
                        reference=f"Gopher: repeated {n}-grams cover at most {limit:.0%} of characters")
          for n, limit in ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))],
    ]


def apply_filters(docs: Iterable[T], filters: list[QualityFilter], *,
                  text_of: Callable[[T], str] = attrgetter("text")) -> tuple[list[T], dict[str, int]]:
    """Keep the documents every filter accepts, in input order.

    Returns `(kept, counts)` where `counts[name]` is the number of documents removed by that filter
    (the first one that rejected them); every filter appears in `counts`, with 0 if it removed none.
    `text_of` reads the text from each item (default: `.text`, as on a `Document`).
    """
    kept, counts = [], {f.name: 0 for f in filters}
    for doc in progress_bar(docs, desc="quality filters", leave=False):
        stats = TextStats(text_of(doc))
        rejected_by = next((f.name for f in filters if not f.keep(stats)), None)
        if rejected_by is None:
            kept.append(doc)
        else:
            counts[rejected_by] += 1
    return kept, counts
