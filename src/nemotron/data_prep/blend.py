"""Data blends: which sources a model is trained on, in what proportions, split how.

A blend is a small JSON file, the recipe's answer to "what data?". Two forms, as in the Nemotron
cookbook and Megatron-Bridge:

    {"sources": [{"path": "shakespeare", "weight": 1.0}], "split": [0.95, 0.05, 0.0]}

one list of sources cut into train/valid/test by ratio, or separate lists

    {"train": [{"path": "data/train.jsonl"}], "valid": [{"path": "data/valid.jsonl"}]}

A source `path` is a local file or folder (.jsonl, .parquet, .txt), a built-in offline corpus
("shakespeare", "chatterbot"), a Hugging Face hub id ("owner/name") or one file at an fsspec URL
("s3://bucket/docs.jsonl", "gs://...", "hf://datasets/owner/name/file.jsonl"). Relative paths are relative to
the blend file. Every mistake is a one-line NemotronError naming the field (`sources[0].weight`).

Using a blend is three visible steps, so quality filters and dedup can sit in the middle:

    docs, read_counts = blend.read()                       # every source, each doc tagged with it
    docs, filter_counts = apply_filters(docs, default_filters())
    train, draw_counts = blend.draw(docs, "train", seed=0)

Two rules make a blend reproducible:
- Split by a hash of the document id, never by position: a document lands in the same split
  whatever else changes (more sources, a different filter), so valid never leaks into train.
- Weights are shares of the drawn documents. `draw` gives source i `N * w_i / sum(w)` documents
  (N defaults to all documents in the split), sampling without replacement from a seeded generator
  and repeating whole passes when a source is upweighted past its size (as Megatron blends do).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from nemotron import atomic
from nemotron.data_prep import storage
from nemotron.data_prep.sources import (
    BUILTIN_SOURCES,
    DATA_SUFFIXES,
    HUB_ID,
    Document,
    read_source,
    source_location,
)
from nemotron.errors import NemotronError

SPLITS = ("train", "valid", "test")


def _one_line(error: ValidationError, where: str) -> str:
    """Pydantic's first error as `where: field: message` (e.g. `blend.json: sources[0].weight: ...`)."""
    first = error.errors()[0]
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]).lstrip(".")
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown field; check its spelling"
    elif first["type"] == "missing":
        message = "required field is missing"
    return f"{where}: {field}: {message}" if field else f"{where}: {message}"


class _Strict(BaseModel):
    """Unknown fields are errors: a typo like "wieght" must not be silently ignored.

    Built in Python, a bad blend raises pydantic's ValidationError; `DataBlend.load`/`from_dict` turn
    it into a one-line NemotronError naming the field.
    """

    model_config = ConfigDict(extra="forbid")


class BlendSource(_Strict):
    """One source in a blend. `name` (default: `path`) tags its documents and must be unique."""

    path: str
    weight: float = 1.0
    name: str | None = None
    text_field: str = "text"
    hf_split: str = "train"  # only for hub ids: the dataset's own split to read
    subset: str | None = None  # only for hub ids: the dataset's config name

    @property
    def label(self) -> str:
        return self.name or self.path

    @field_validator("weight")
    @classmethod
    def _positive_weight(cls, weight: float) -> float:
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError(f"must be a positive number, got {weight}")
        return weight

    @field_validator("path")
    @classmethod
    def _source_exists(cls, path: str, info: ValidationInfo) -> str:
        base_dir = Path((info.context or {}).get("base_dir", "."))
        if path in BUILTIN_SOURCES or storage.is_url(path) or (base_dir / path).exists():
            return path  # a URL is checked when it is read (credentials may only exist on the workers)
        if HUB_ID.match(path) and Path(path).suffix not in DATA_SUFFIXES:
            return path  # a hub dataset; we cannot check it offline, `read` will
        raise ValueError(f"'{path}' not found (relative to {base_dir.resolve()}); give an existing file or "
                         f"folder, a built-in corpus {list(BUILTIN_SOURCES)} or a hub id 'owner/name'")


def assign_split(doc_id: str, ratios: list[float]) -> str:
    """The split of a document: a hash of its id mapped to [0, 1) and cut at the cumulative ratios."""
    position = int.from_bytes(hashlib.sha256(doc_id.encode("utf-8")).digest()[:8], "big") / 2**64
    edge = 0.0
    for split, ratio in zip(SPLITS, ratios):
        edge += ratio
        if position < edge:
            return split
    return next(split for split, ratio in reversed(list(zip(SPLITS, ratios))) if ratio > 0)


def cap_documents(docs: list[Document], limit: int, seed: int = 0) -> tuple[list[Document], int]:
    """At most `limit` documents, in input order, chosen by a seeded hash of their ids: a stable subset
    in which each source keeps its share in expectation. Returns (kept, number dropped)."""
    if len(docs) <= limit:
        return docs, 0
    rank = sorted(range(len(docs)), key=lambda i: hashlib.sha256(f"{seed}\0{docs[i].id}".encode()).digest())
    keep = set(rank[:limit])
    return [doc for i, doc in enumerate(docs) if i in keep], len(docs) - limit


def _allocate(total: int, weights: list[float]) -> list[int]:
    """Split `total` into integers proportional to `weights` (largest remainder, ties by order)."""
    quotas = [total * w / sum(weights) for w in weights]
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


class DataBlend(_Strict):
    """A blend spec: `sources` + `split` ratios, or `train`/`valid`/`test` source lists."""

    sources: list[BlendSource] | None = None
    split: list[float] | None = None  # train/valid/test ratios, only with `sources`
    train: list[BlendSource] | None = None
    valid: list[BlendSource] | None = None
    test: list[BlendSource] | None = None
    _base_dir: Path = PrivateAttr(default=Path("."))

    @field_validator("split")
    @classmethod
    def _ratios(cls, split: list[float] | None) -> list[float] | None:
        if split is None:
            return None
        if len(split) != 3 or any(r < 0 for r in split) or abs(sum(split) - 1) > 1e-6 or split[0] <= 0:
            raise ValueError(f"must be three ratios [train, valid, test] >= 0 summing to 1 with train > 0, "
                             f"got {split}")
        return split

    @model_validator(mode="after")
    def _one_form(self) -> DataBlend:
        per_split = [self.train, self.valid, self.test]
        if self.sources is not None and any(s is not None for s in per_split):
            raise ValueError("give either 'sources' (with 'split') or 'train'/'valid'/'test' lists, not both")
        if self.sources is None and self.split is not None:
            raise ValueError("'split' ratios apply to 'sources'; with 'train'/'valid'/'test' lists drop 'split'")
        if not (self.sources if self.sources is not None else self.train):
            raise ValueError("needs a non-empty 'sources' list (or a non-empty 'train' list)")
        if self.sources is not None and self.split is None:
            self.split = [1.0, 0.0, 0.0]
        labels = [entry.label for _, entry in self.entries()]
        if duplicated := sorted({label for label in labels if labels.count(label) > 1}):
            raise ValueError(f"source names must be unique, {duplicated} repeats; set 'name' on each")
        return self

    # ------------------------------------------------------------------------- load / save

    @classmethod
    def from_dict(cls, data: dict, *, base_dir: str | Path = ".", where: str = "blend") -> DataBlend:
        """Validate a blend given as a dict; relative source paths resolve against `base_dir`."""
        try:
            blend = cls.model_validate(data, context={"base_dir": str(base_dir)})
        except ValidationError as error:
            raise NemotronError(_one_line(error, where)) from None
        blend._base_dir = Path(base_dir)
        return blend

    @classmethod
    def load(cls, path: str | Path) -> DataBlend:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NemotronError(f"blend file not found: {path}; check the path") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise NemotronError(f"{path}: not a readable JSON blend ({error}); fix the file") from None
        if not isinstance(data, dict):
            raise NemotronError(f"{path}: a blend is a JSON object with 'sources' or 'train', "
                                f"got {type(data).__name__}")
        return cls.from_dict(data, base_dir=path.parent, where=str(path))

    def save(self, path: str | Path) -> Path:
        """Write the blend as JSON (atomically); relative paths are rewritten to stay valid from there."""
        path = Path(path)
        data = self.model_dump(mode="json", exclude_none=True)
        for entries in (data.get(key) for key in ("sources", *SPLITS)):
            for entry in entries or []:
                local = self._base_dir / entry["path"]
                if not Path(entry["path"]).is_absolute() and local.exists() and entry["path"] not in BUILTIN_SOURCES:
                    entry["path"] = os.path.relpath(local, path.parent)
        return atomic.write_text(path, json.dumps(data, indent=2) + "\n")

    # ------------------------------------------------------------------------- read / draw

    def entries(self) -> list[tuple[str | None, BlendSource]]:
        """(split, source) for every source; split is None when sources are cut by ratio."""
        if self.sources is not None:
            return [(None, entry) for entry in self.sources]
        return [(split, entry) for split in SPLITS for entry in getattr(self, split) or []]

    def source_locations(self) -> dict[str, Path | None]:
        """Each source's raw files by its `path` (for lineage): a local path, or None for a hub id."""
        return {entry.path: source_location(entry.path, self._base_dir) for _, entry in self.entries()}

    @property
    def splits(self) -> list[str]:
        """The splits this blend fills: those with a ratio > 0 or a source list."""
        if self.sources is not None:
            return [split for split, ratio in zip(SPLITS, self.split) if ratio > 0]
        return [split for split in SPLITS if getattr(self, split)]

    def read(self) -> tuple[list[Document], dict[str, dict]]:
        """Read every source in blend order. Each document's `source` is its blend entry's name."""
        documents, counts = [], {}
        for _, entry in self.entries():
            read = read_source(entry.path, text_field=entry.text_field, hf_split=entry.hf_split,
                               subset=entry.subset, source=entry.label, base_dir=self._base_dir)
            documents.extend(read.documents)
            counts[entry.label] = {"read": len(read.documents), "skipped": read.skipped}
        return documents, counts

    def draw(self, docs: list[Document], split: str = "train", *, seed: int = 0,
             num_documents: int | None = None) -> tuple[list[Document], dict[str, Any]]:
        """The documents of one split, drawn by weight with `seed`, shuffled together.

        `docs` are documents from `read()` (possibly filtered/deduplicated). Counts report, per
        source, how many documents the split had available and how many were drawn.
        """
        entries = [entry for entry_split, entry in self.entries() if entry_split in (None, split)]
        pools: dict[str, list[Document]] = {entry.label: [] for entry in entries}
        for doc in docs:
            if doc.source in pools and (self.sources is None or assign_split(doc.id, self.split) == split):
                pools[doc.source].append(doc)
        plan = self.draw_plan(split, {label: len(pool) for label, pool in pools.items()}, seed=seed,
                              num_documents=num_documents, given=len(docs))
        drawn = []
        for label, take in plan.items():
            pool = pools[label]
            drawn.extend(pool * take["passes"] + [pool[i] for i in take["extra"]])
        random.Random(f"{seed}/{split}").shuffle(drawn)
        counts = {label: {"available": take["available"], "drawn": take["drawn"]} for label, take in plan.items()}
        return drawn, {"split": split, "documents": len(drawn), "sources": counts}

    def draw_plan(self, split: str, available: dict[str, int], *, seed: int = 0, num_documents: int | None = None,
                  given: int | None = None) -> dict[str, dict[str, Any]]:
        """How a split draws from its sources, from counts alone: per source with documents, how many
        it has (`available`: its label -> documents in this split, in input order) and how many are
        drawn: every document `passes` times, plus once more each position in `extra` (a seeded
        sample). `draw` applies it to documents in memory; the curation's dedup stage (which holds
        only counts) writes each document as many times as the plan says.
        """
        if split not in self.splits:
            raise NemotronError(f"this blend has no '{split}' split (it has {self.splits}); "
                                f"add a ratio or a '{split}' list")
        entries = [entry for entry_split, entry in self.entries() if entry_split in (None, split)]
        present = [entry for entry in entries if available.get(entry.label, 0) > 0]
        if not present:
            raise NemotronError(f"split '{split}' received no documents from {given if given is not None else 0} "
                                f"given; give more data or a larger '{split}' ratio")
        total = num_documents if num_documents is not None else sum(available[entry.label] for entry in present)
        if total < 1:
            raise NemotronError(f"num_documents must be at least 1, got {num_documents}")
        plan = {}
        for entry, count in zip(present, _allocate(total, [entry.weight for entry in present])):
            size = available[entry.label]
            passes, extra = divmod(count, size)
            generator = random.Random(f"{seed}/{split}/{entry.label}")  # str seeds are stable across runs
            # sample(range(n), k) picks the same positions sample(pool, k) would: one draw, two uses.
            plan[entry.label] = {"available": size, "drawn": count, "passes": passes,
                                 "extra": generator.sample(range(size), extra)}
        return plan

    def documents(self, split: str = "train", *, seed: int = 0,
                  num_documents: int | None = None) -> tuple[list[Document], dict[str, Any]]:
        """`read()` then `draw()`: one split of the blend, without any filtering in between."""
        docs, read_counts = self.read()
        drawn, counts = self.draw(docs, split, seed=seed, num_documents=num_documents)
        return drawn, {**counts, "read": read_counts}


def default_pretrain_blend() -> DataBlend:
    """The nano2 pretraining blend: all of Shakespeare, 90% train / 5% valid / 5% test by document id."""
    return DataBlend(sources=[BlendSource(path="shakespeare", weight=1.0)], split=[0.9, 0.05, 0.05])
