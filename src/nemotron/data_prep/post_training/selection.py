"""Selecting what to train on: by reference-model score per pool, and by diversity of embeddings.

- `select_by_score(nll, mode, ...)`: indices of the records a pool keeps. `quantile` keeps records whose
  completion NLL lies in [q_low, q_high] of the pool's distribution: the lowest-NLL tail is what the
  reference model already predicts (little to learn), the highest-NLL tail is where garbled, mislabeled
  or off-format data concentrates (perplexity filtering, Wenzek et al. 2020 "CCNet"; Marion et al. 2023
  "When Less is More" find the middle of the distribution trains best). `top_k` keeps the k lowest
  (or highest) NLL records.
- `embed_text(record)`: the view that gets embedded, the behaviour signature (the sequence of channels and
  tool calls, e.g. `analysis > call:get_weather > final`) plus the task text (the last user turn), so two
  records with the same question but different tool use are not the same point.
- `view_report(records)`: is the view collapsed? tool-call coverage, share of unique signatures and texts.
- `selected_conversations(path, template)`: a selection file's records as the conversations of a chat
  template (`chat.records`), and what the template cannot express, counted by reason.
- `k_center_greedy(vectors, k)`: farthest-point selection (Gonzalez 1985; "core-set" selection, Sener &
  Savarese 2018): start from the point nearest the centroid, then repeatedly add the point farthest from
  everything chosen. Every record ends up close to a chosen one, which is what coverage means.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nemotron.data_prep.chat.records import CONVERTERS, Inexpressible
from nemotron.data_prep.post_training.schema import read_records
from nemotron.errors import NemotronError


def select_by_score(
    nll: np.ndarray,
    mode: Literal["quantile", "top_k"] = "quantile",
    quantiles: tuple[float, float] = (0.1, 0.9),
    top_k: int = 100,
    prefer: Literal["low_nll", "high_nll"] = "low_nll",
) -> list[int]:
    """Indices (ascending) of the records kept from one pool by their completion NLL."""
    nll = np.asarray(nll, dtype=np.float64)
    if len(nll) == 0:
        return []
    if mode == "top_k":
        if top_k < 1:
            raise NemotronError(f"top_k={top_k} must be at least 1")
        order = np.argsort(nll if prefer == "low_nll" else -nll, kind="stable")
        return sorted(int(i) for i in order[:top_k])
    low, high = quantiles
    if not 0.0 <= low < high <= 1.0:
        raise NemotronError(f"quantiles {quantiles} must satisfy 0 <= low < high <= 1")
    lo, hi = np.quantile(nll, [low, high])
    return [int(i) for i in np.flatnonzero((nll >= lo) & (nll <= hi))]


def behaviour_signature(messages: list[dict[str, Any]]) -> str:
    """The completion's shape: channels and tool calls in order, e.g. `analysis > call:get_weather > final`."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    steps = []
    for message in messages[last_user + 1:]:
        if message["role"] != "assistant":
            continue
        if message.get("recipient"):
            step = f"call:{message['recipient'].removeprefix('functions.')}"
        else:
            step = message["channel"]
        if not steps or steps[-1] != step:
            steps.append(step)
    return " > ".join(steps)


def task_text(messages: list[dict[str, Any]]) -> str:
    return next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")


def embed_text(record: dict[str, Any]) -> str:
    return f"[{behaviour_signature(record['messages'])}] {task_text(record['messages'])}"


def view_report(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Sanity of the embedding view: it must tell records apart and see their tool use."""
    signatures = [behaviour_signature(r["messages"]) for r in records]
    views = [embed_text(r) for r in records]
    with_calls = [r for r in records if r["meta_tool_use"]["calls"] > 0]
    seen_calls = sum(1 for r, s in zip(records, signatures) if r["meta_tool_use"]["calls"] > 0 and "call:" in s)
    return {
        "records": len(records),
        "unique_signatures": len(set(signatures)),
        "unique_signature_share": len(set(signatures)) / max(1, len(records)),
        "unique_view_share": len(set(views)) / max(1, len(records)),
        "tool_call_records": len(with_calls),
        "tool_call_coverage": seen_calls / len(with_calls) if with_calls else 1.0,
        "signatures": dict(Counter(signatures).most_common(10)),
    }


def k_center_greedy(vectors: np.ndarray, k: int) -> list[int]:
    """Indices of k points chosen farthest-first (deterministic: ties go to the lowest index)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    n = len(vectors)
    if k >= n:
        return list(range(n))
    first = int(np.argmin(np.linalg.norm(vectors - vectors.mean(axis=0), axis=1)))
    chosen = [first]
    distance = np.linalg.norm(vectors - vectors[first], axis=1)
    while len(chosen) < k:
        next_index = int(np.argmax(distance))
        chosen.append(next_index)
        distance = np.minimum(distance, np.linalg.norm(vectors - vectors[next_index], axis=1))
    return sorted(chosen)


def selected_conversations(path: Path, template: str = "nano2") -> tuple[list[dict[str, Any]], Counter]:
    """Conversations of a selected-records Parquet file (or a folder of them) in `template`'s form,
    and the records it cannot express, by reason."""
    if template not in CONVERTERS:
        raise NemotronError(f"no record converter for chat template {template!r}; use one of {', '.join(CONVERTERS)}")
    path = Path(path)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise NemotronError(f"{path}: no selected records (Parquet); pass the selected.parquet of the "
                            "post-training pipeline's embed_select or score step")
    conversations, skipped = [], Counter()
    for record in read_records(files):
        try:
            conversations.append(CONVERTERS[template](record))
        except Inexpressible as why:
            skipped[why.reason] += 1
    return conversations, skipped
