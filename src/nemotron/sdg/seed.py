"""Seed documents for rephrasing: a folder of JSONL in NeMo Curator's output shape, or our Shakespeare.

A seed record is a flat dict of columns, the names prompt templates use: `id`, `text`, `title`,
`url`, `categories` (a list of strings), plus whatever else a JSONL record carries. Curator writes
exactly such records (`text`, `id`, `url`, `title`, `categories`, ...); Shakespeare scenes become
`{id, text, title: "<play>, act <a> scene <s>", url: "", categories: [<play title>]}`.

Only documents of the TRAIN split are seeds (the split is the same hash of the document id that the
pretraining blend uses): a rephrase of a validation document in the training data would leak it.

`seed_stats(records)` is what a data scientist looks at first: how many documents, their length in
characters (mean, median, min, max, std), approximate tokens (characters / 4, the usual English
rule of thumb; the run's real token counts come from the server's `usage`), and a category
breakdown.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from nemotron.data_prep.blend import assign_split, cap_documents, default_pretrain_blend
from nemotron.data_prep.sources import Document, read_shakespeare, shakespeare_folder
from nemotron.errors import NemotronError

CHARS_PER_TOKEN = 4  # approximate; stated wherever it is used


def load_seed(source: str, *, num_documents: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[Path]]:
    """(records, the raw files they came from): `num_documents` train-split documents, chosen by a seeded hash.

    `source` is "shakespeare" or a JSONL file / folder of *.jsonl files whose records have `id` and `text`.
    """
    if num_documents < 1:
        raise NemotronError(f"num_documents must be at least 1, got {num_documents}")
    if source == "shakespeare":
        read = read_shakespeare(include_poems=False)
        docs = [d for d in read.documents if d.meta.get("act", 1) > 0]  # act 0 = title page and cast list
        files = [shakespeare_folder()]
        records = {d.id: _shakespeare_record(d) for d in docs}
    else:
        files, records = _read_jsonl_records(Path(source))
        docs = [Document(id=k, text=r["text"], source=source) for k, r in records.items()]
    ratios = default_pretrain_blend().split
    train = [d for d in docs if assign_split(d.id, ratios) == "train"]
    chosen, _ = cap_documents(train, num_documents, seed)
    chosen.sort(key=lambda d: d.id)
    return [records[d.id] for d in chosen], files


def _shakespeare_record(doc: Document) -> dict[str, Any]:
    meta = doc.meta
    return {"id": doc.id, "text": doc.text, "title": f"{meta['title']}, act {meta['act']} scene {meta['scene']}",
            "url": "", "categories": [meta["title"]]}


def _read_jsonl_records(root: Path) -> tuple[list[Path], dict[str, dict]]:
    if not root.exists():
        raise NemotronError(f"seed data {root} does not exist; pass a JSONL file, a folder of them, or 'shakespeare'")
    files = [root] if root.is_file() else sorted(root.rglob("*.jsonl"))
    if not files:
        raise NemotronError(f"no *.jsonl files under {root}; point the seed at Curator's JSONL output")
    records: dict[str, dict] = {}
    for file in files:
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise NemotronError(f"{file}:{number}: not JSON ({error.msg}); fix the line") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str) or "id" not in record:
                raise NemotronError(
                    f"{file}:{number}: a seed record needs an 'id' and a string 'text' (Curator's shape)")
            key = str(record["id"])
            if key in records:
                raise NemotronError(f"{file}:{number}: duplicate id {key!r}; seed ids must be unique")
            records[key] = {**record, "id": key}  # no invented columns: a template naming a missing one is refused
    return files, records


def seed_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Documents, length statistics in characters, approximate tokens, and the category breakdown."""
    lengths = [len(r["text"]) for r in records]
    categories = Counter(c for r in records for c in (r.get("categories") or ["(none)"]))
    return {
        "documents": len(records),
        "chars": {"mean": statistics.fmean(lengths), "median": statistics.median(lengths), "min": min(lengths),
                  "max": max(lengths), "std": statistics.pstdev(lengths)},
        "approx_tokens": sum(lengths) // CHARS_PER_TOKEN,
        "categories": dict(sorted(categories.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def format_stats(stats: dict[str, Any]) -> str:
    chars = stats["chars"]
    top = ", ".join(f"{name} {count}" for name, count in list(stats["categories"].items())[:5])
    return (f"seed: {stats['documents']} documents, chars mean {chars['mean']:.0f} median {chars['median']:.0f} "
            f"min {chars['min']} max {chars['max']} std {chars['std']:.0f}, ~{stats['approx_tokens']:,} tokens "
            f"(chars/{CHARS_PER_TOKEN}); categories: {top}")
