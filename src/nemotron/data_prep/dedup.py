"""Remove duplicated documents: exact copies first, then near-duplicates with MinHash-LSH.

Duplicates waste compute and make a model memorise (Lee et al. 2022, "Deduplicating Training Data
Makes Language Models Better"). Every large pretraining pipeline removes them in two passes, and so
do we:

1. `exact_dedup`: hash each document's normalized text (Unicode NFKC, lowercase, whitespace
   collapsed) and keep the first document of each hash. Cheap and certain.
2. `near_dedup`: documents that differ in a few words (a re-edited page, a scene with a changed
   line) have different hashes but almost the same set of word n-grams ("shingles"). MinHash
   (Broder 1997) sketches each set with `num_perm` hash minima so that the share of equal minima
   estimates the Jaccard similarity; LSH (locality-sensitive hashing) bands the sketches so that
   only likely pairs are ever compared. Gopher (Rae et al. 2021) and Nemotron-CC (Su et al. 2024,
   via NeMo Curator's fuzzy dedup) drop pairs above Jaccard 0.8; so do we by default.

Both keep the first document in input order and drop the later ones, so the result depends only on
the input order and the seed. Both return `(kept, counts)`.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from nemotron.errors import NemotronError
from nemotron.progress import progress_bar

if TYPE_CHECKING:  # datasketch imports scipy (~1 s); modules that only need `normalize` skip it
    from datasketch import MinHash

T = TypeVar("T")
WORD = re.compile(r"\w+(?:'\w+)*")


def normalize(text: str) -> str:
    """The text two documents must share to be exact duplicates: case and spacing do not count."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def exact_key(text: str) -> bytes:
    """The 32-byte content hash two exact duplicates share: sha256 of the normalized text."""
    return hashlib.sha256(normalize(text).encode("utf-8")).digest()


def exact_dedup(docs: Iterable[T], *, text_of: Callable[[T], str] = attrgetter("text")
                ) -> tuple[list[T], dict[str, int]]:
    """Keep the first document of every normalized text. Counts: {"exact_duplicates": n}."""
    seen, kept, dropped = set(), [], 0
    for doc in docs:
        digest = exact_key(text_of(doc))
        if digest in seen:
            dropped += 1
        else:
            seen.add(digest)
            kept.append(doc)
    return kept, {"exact_duplicates": dropped}


def shingles(text: str, ngram: int) -> set[bytes]:
    """The set of lowercased word n-grams of a text (one shingle if it has fewer than n words)."""
    words = WORD.findall(text.lower())
    if len(words) < ngram:
        return {" ".join(words).encode("utf-8")}
    return {" ".join(words[i:i + ngram]).encode("utf-8") for i in range(len(words) - ngram + 1)}


def minhash(text: str, *, num_perm: int = 128, ngram: int = 5, seed: int = 1) -> MinHash:
    """A MinHash sketch of a text's shingles; the same seed gives the same permutations everywhere."""
    from datasketch import MinHash

    sketch = MinHash(num_perm=num_perm, seed=seed)
    sketch.update_batch(sorted(shingles(text, ngram)))
    return sketch


class NearDuplicates:
    """Greedy near-duplicate detection over MinHash sketches that arrive in input order.

    `is_duplicate(values)` says whether a sketch's estimated Jaccard similarity to an earlier kept one
    is >= threshold, and keeps it (indexes it) when not. Only sketches are held, never text: the
    library's dedup stage (`stages/dedup.py`) feeds it the signatures its workers computed, and
    `near_dedup` the sketches of documents in memory; both keep the same documents. LSH proposes
    candidates; we confirm each with the MinHash estimate, because banding alone lets some less
    similar pairs through.
    """

    def __init__(self, threshold: float = 0.8, num_perm: int = 128, seed: int = 1):
        if not 0.0 < threshold < 1.0:
            raise NemotronError(f"near_dedup threshold must be between 0 and 1 (exclusive), got {threshold}")
        from datasketch import MinHash, MinHashLSH

        self.threshold, self.seed = threshold, seed
        self.scheme = MinHash(num_perm=num_perm, seed=seed).scheme
        self.index = MinHashLSH(threshold=threshold, num_perm=num_perm)
        self.kept: dict[int, np.ndarray] = {}  # key -> hash values (in memory or a memory-mapped row)

    def is_duplicate(self, values: np.ndarray) -> bool:
        from datasketch import LeanMinHash

        sketch = LeanMinHash(seed=self.seed, hashvalues=values, scheme=self.scheme)
        # MinHash.jaccard's estimate: the share of equal hash values.
        if any(np.count_nonzero(values == self.kept[key]) / len(values) >= self.threshold
               for key in self.index.query(sketch)):
            return True
        key = len(self.kept)
        self.index.insert(key, sketch)
        self.kept[key] = values
        return False


def near_dedup(docs: Iterable[T], *, threshold: float = 0.8, num_perm: int = 128, ngram: int = 5,
               seed: int = 1, text_of: Callable[[T], str] = attrgetter("text")
               ) -> tuple[list[T], dict[str, int]]:
    """Drop every document whose estimated Jaccard similarity to an earlier kept one is >= threshold.

    A document is compared only with documents already kept (greedy, in input order), so of a
    cluster of near-copies exactly the first survives (`NearDuplicates`). Counts: {"near_duplicates": n}.
    """
    index = NearDuplicates(threshold, num_perm, seed)
    kept, dropped = [], 0
    for doc in progress_bar(docs, desc="near dedup", leave=False):
        if index.is_duplicate(minhash(text_of(doc), num_perm=num_perm, ngram=ngram, seed=seed).hashvalues):
            dropped += 1
        else:
            kept.append(doc)
    return kept, {"near_duplicates": dropped}
