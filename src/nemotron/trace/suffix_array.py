"""A suffix array over token ids, and the longest-match search on it.

The suffix array of a token array `t` (length n) is the permutation `sa` of 0..n-1 that lists the
suffixes t[i:] in sorted order. Every occurrence of a query q is then one contiguous run of `sa`
(the suffixes that start with q), found by binary search, one query token at a time.

Built by prefix doubling (Manber and Myers, 1990), the readable way: after round r, `rank[i]` orders
the suffixes by their first 2^r tokens; the next round sorts by the pair (rank[i], rank[i + 2^r]),
which orders them by their first 2^(r+1) tokens. It stops when every rank is distinct. Each round is
one `np.argsort` of the pair packed into one int64 (rank * (n + 1) + second), so the build is
O(n log n) per round and about log2(longest repeated run) rounds.

A suffix that runs off the end of the array sorts before any longer one that shares its prefix (its
missing second key is 0, below every rank + 1). Documents are concatenated with the separator -1, which
no query token equals, so a match never crosses from one document into the next.
"""

from __future__ import annotations

import numpy as np

SEPARATOR = -1  # between documents in the concatenated token array
END = -2  # "past the end of the array": sorts below the separator and every token


def suffix_array(tokens: np.ndarray) -> np.ndarray:
    """The suffix array of `tokens` (int64), by prefix doubling."""
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if n >= 3_000_000_000:  # rank * (n + 1) + second must fit in an int64
        raise ValueError(f"{n} tokens: this readable build sorts int64 pair keys and stops at 3 billion")
    rank = np.unique(tokens, return_inverse=True)[1].astype(np.int64).reshape(-1)  # order by the first token
    order = np.argsort(rank, kind="stable")
    width = 1
    while int(rank.max()) < n - 1:  # some suffixes still share a rank: their first `width` tokens agree
        second = np.zeros(n, dtype=np.int64)  # 0: the suffix ends before `width` more tokens
        second[: n - width] = rank[width:] + 1
        key = rank * (n + 1) + second  # the pair (rank, second) as one sortable number
        order = np.argsort(key)
        sorted_key = key[order]
        new_group = np.empty(n, dtype=bool)
        new_group[0] = False
        new_group[1:] = sorted_key[1:] != sorted_key[:-1]
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.cumsum(new_group)  # suffixes with equal pairs keep one rank
        width *= 2
    return order.astype(np.int64)


def _token_at(tokens: np.ndarray, sa: np.ndarray, row: int, offset: int) -> int:
    """Token `offset` of the suffix at row `row` of the suffix array (END past the array's end)."""
    position = int(sa[row]) + offset
    return int(tokens[position]) if position < len(tokens) else END


def narrow(tokens: np.ndarray, sa: np.ndarray, lo: int, hi: int, offset: int, token: int) -> tuple[int, int]:
    """Of the rows [lo, hi), whose suffixes share their first `offset` tokens, the ones whose token
    `offset` is `token`: two binary searches (the rows are sorted by that token)."""
    start, stop = lo, hi
    while start < stop:  # first row whose token >= token
        mid = (start + stop) // 2
        if _token_at(tokens, sa, mid, offset) < token:
            start = mid + 1
        else:
            stop = mid
    first = start
    stop = hi
    while start < stop:  # first row whose token > token
        mid = (start + stop) // 2
        if _token_at(tokens, sa, mid, offset) <= token:
            start = mid + 1
        else:
            stop = mid
    return first, start


def longest_match(tokens: np.ndarray, sa: np.ndarray, query: np.ndarray) -> tuple[int, int, int]:
    """(length, lo, hi): the longest prefix of `query` that occurs in `tokens`, and the rows
    sa[lo:hi] where it starts (every occurrence). Length 0 gives the whole array."""
    lo, hi = 0, len(sa)
    for length, token in enumerate(query):
        new_lo, new_hi = narrow(tokens, sa, lo, hi, length, int(token))
        if new_lo == new_hi:
            return length, lo, hi
        lo, hi = new_lo, new_hi
    return len(query), lo, hi
