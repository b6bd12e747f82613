"""Where did it learn that? The spans of a text that occur word for word in a model's training data.

    python -m nemotron.trace runs/nano2/stage2_alignment/training "I am not yet."
    from nemotron.trace import find_spans; find_spans(model_path, text) -> list[Span]

How: the text is tokenized with the model's own tokenizer (its checkpoint folder has it), and every
training dataset in the checkpoint's lineage (`nemotron.trace.corpora`: pretraining shards, SFT
conversations, preference pairs, followed upstream through the recorded `inputs`) is searched for its
token ids through a suffix array (`nemotron.trace.suffix_array`, one per dataset, built once and
reused: `nemotron.trace.index`). Spans are maximal and found greedily left to right: at each position
the longest run of tokens that occurs in some dataset; if it is at least `min_tokens` long it is a
span and the search goes on after it, else it goes on at the next token. So a span may start mid-way
through the text, and mid-way through a training document. Each span names, for up to `max_sources`
occurrences in each dataset that holds it (the first there), the dataset artifact, the document (shard
and index, conversation id and message, pair id and part), the token position in it, and a snippet of
the context.

Measured (`python benchmarks/bench_trace.py runs/nano2/stage2_alignment/training`, tiny nano2 run, 2
shared CPU cores; each index's receipt.json has its own numbers): the stage-0 pretraining shards, 1.49M
tokens, index built in 1.7 s (6-12 s while a recipe trains beside it) at a peak of 93 MiB, i.e. about
0.3 hours and 61 GiB per billion tokens, extrapolated linearly from the per-token cost (prefix doubling
is O(n log n) per round, with about log2(longest repeated run) rounds, so a billion tokens costs
somewhat more per token; the peak is a handful of int64 arrays of n: a billion-token corpus wants a
big-memory machine, or an external-memory build such as infini-gram's, not this readable one). On disk
an index is 12 bytes per token (int32 tokens + int64 suffix array). A lookup of a ~40-token text against
the three datasets of a nano2 run takes 0.6 ms once the indexes are memory-mapped (binary search,
O(length x log n)), 7x faster than a linear numpy scan of the pretraining tokens in the same run;
loading the tokenizer and mapping the indexes (a `Tracer`) takes about a second, once per checkpoint.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from nemotron.artifact import METADATA, read_metadata
from nemotron.errors import NemotronError
from nemotron.trace.corpora import training_datasets
from nemotron.trace.index import TokenIndex, load_or_build
from nemotron.trace.suffix_array import longest_match

__all__ = ["DEFAULT_MAX_SOURCES", "DEFAULT_MIN_TOKENS", "Source", "Span", "Tracer", "find_spans", "tracer_for"]

DEFAULT_MIN_TOKENS = 8
DEFAULT_MAX_SOURCES = 3  # occurrences named per span in each dataset that holds it
CONTEXT_TOKENS = 12  # tokens of context shown on each side of a span in a source's snippet


@dataclass(frozen=True)
class Source:
    """One occurrence of a span in the training data."""

    dataset: str  # the dataset artifact's folder
    dataset_type: str  # e.g. "pretraindataset", "sftdataset", "preferencedataset"
    document: dict  # which document: {"shard", "document"} | {"conversation", "message", "role"} | ...
    position: int  # token position of the span's first token in that document
    context: str  # the span in its context, the span itself between « and »


@dataclass(frozen=True)
class Span:
    """A run of the text's tokens that occurs word for word in the training data."""

    start: int  # token index in the text's tokens (end exclusive)
    end: int
    char_start: int  # the same span as character offsets into the text
    char_end: int
    text: str
    occurrences: int  # in all the datasets that hold it, each counted
    sources: list[Source] = field(default_factory=list)  # the first few in each dataset, nearest dataset first

    @property
    def num_tokens(self) -> int:
        return self.end - self.start

    def to_dict(self) -> dict:
        return {**asdict(self), "num_tokens": self.num_tokens}

    def describe(self) -> str:
        """`copied (N tokens, from <source>)`, as the report cards print it."""
        first = self.sources[0]
        doc = ", ".join(f"{key} {value}" for key, value in first.document.items())
        return f"copied ({self.num_tokens} tokens, from {first.dataset_type} {doc})"


def checkpoint_folder(model_path: Path | str) -> tuple[Path, Path]:
    """(the checkpoint artifact's folder, its Hugging Face model folder) for a checkpoint artifact or
    the model folder inside one."""
    path = Path(model_path).resolve()
    for folder in (path, path.parent):
        if (folder / METADATA).is_file():
            model_dir = read_metadata(folder).get("model_dir")
            if model_dir and (folder == path or Path(model_dir).resolve() == path):
                return folder, Path(model_dir)
    raise NemotronError(
        f"{model_path}: not a checkpoint artifact (no metadata.json with a model_dir), so its training data "
        "cannot be found; pass the folder a training step wrote, e.g. runs/nano2/stage2_alignment/training"
    )


class Tracer:
    """A checkpoint's tokenizer and the indexes of every dataset it was trained on, ready for lookups."""

    def __init__(self, model_path: Path | str, index_dir: Path | str | None = None) -> None:
        from nemotron.data_prep.tokenizer import load_tokenizer

        self.path, model_dir = checkpoint_folder(model_path)
        datasets = training_datasets(self.path)
        if not datasets:
            raise NemotronError(
                f"{self.path}: no training data in its lineage (its recorded inputs name no dataset with a "
                "train split); trace a checkpoint that a recipe's training step made"
            )
        self.tokenizer = load_tokenizer(model_dir)
        self.indexes: list[TokenIndex] = [load_or_build(dataset, index_dir) for dataset in datasets]

    def tokenize(self, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The text's token ids as training saw plain text (no special tokens), with character offsets."""
        encoded = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True,
                                 return_offsets_mapping=True)
        return np.asarray(encoded["input_ids"], dtype=np.int64), list(encoded["offset_mapping"])

    def default_min_tokens(self, text: str) -> int:
        """The shortest span reported when none is asked for: `DEFAULT_MIN_TOKENS`, or for a shorter text all
        its tokens but one (a short answer such as "I am not yet." is traced whole, less its last token), at
        least 2."""
        return max(2, min(DEFAULT_MIN_TOKENS, len(self.tokenize(text)[0]) - 1))

    def trace(self, text: str, min_tokens: int | None = None,
              max_sources: int = DEFAULT_MAX_SOURCES) -> tuple[dict, list[Span]]:
        """The spans of `text` (`min_tokens` None: `default_min_tokens`) as the JSON `python -m nemotron.trace`
        prints and the server's /v1/trace answers: the checkpoint, the text, min_tokens, the datasets searched
        (nearest first) and the spans with their sources; and the spans themselves."""
        min_tokens = self.default_min_tokens(text) if min_tokens is None else min_tokens
        spans = self.find_spans(text, min_tokens=min_tokens, max_sources=max_sources)
        datasets = [{"path": str(index.dataset.path), "type": index.dataset.type, "digest": index.dataset.digest}
                    for index in self.indexes]
        return ({"model": str(self.path), "text": text, "min_tokens": min_tokens, "datasets": datasets,
                 "spans": [span.to_dict() for span in spans]}, spans)

    def find_spans(self, text: str, min_tokens: int = DEFAULT_MIN_TOKENS,
                   max_sources: int = DEFAULT_MAX_SOURCES) -> list[Span]:
        """The maximal spans of `text`, at least `min_tokens` long, found in the training data."""
        if min_tokens < 1:
            raise NemotronError(f"min_tokens is {min_tokens}; pass 1 or more (the default is {DEFAULT_MIN_TOKENS})")
        ids, offsets = self.tokenize(text)
        spans: list[Span] = []
        i = 0
        while i < len(ids):
            best, hits = 0, []
            for index in self.indexes:
                length, lo, hi = longest_match(index.tokens, index.suffix_array, ids[i:])
                if length > best:
                    best, hits = length, [(index, lo, hi)]
                elif length == best and length > 0:
                    hits.append((index, lo, hi))
            if best < min_tokens:
                i += 1
                continue
            sources = [self._source(index, position, best)  # the first few in each dataset that holds it
                       for index, lo, hi in hits
                       for position in np.sort(index.suffix_array[lo:hi])[:max_sources].tolist()]
            spans.append(Span(
                start=i, end=i + best, char_start=offsets[i][0], char_end=offsets[i + best - 1][1],
                text=text[offsets[i][0]:offsets[i + best - 1][1]],
                occurrences=sum(hi - lo for _, lo, hi in hits), sources=sources,
            ))
            i += best
        return spans

    def copied(self, text: str) -> Span | None:
        """The longest span of an answer that is copied from the training data: at least
        `DEFAULT_MIN_TOKENS` tokens, or, for a shorter answer, all its tokens but possibly one (the tiny
        model's "I am not yet." is "I am not yet" of "I am not yet capable of feeling sadness." with its
        own full stop); None if none is, or the answer has under 3 tokens."""
        whole = len(self.tokenize(text)[0])
        if whole < 3:
            return None
        spans = self.find_spans(text, min_tokens=min(DEFAULT_MIN_TOKENS, whole - 1), max_sources=1)
        return max(spans, key=lambda span: span.num_tokens, default=None)

    def _source(self, index: TokenIndex, position: int, length: int) -> Source:
        doc = index.document_of(position)
        start = int(index.starts[doc])
        end = int(index.starts[doc + 1]) - 1 if doc + 1 < len(index.starts) else len(index.tokens) - 1
        before = index.tokens[max(start, position - CONTEXT_TOKENS):position]
        inside = index.tokens[position:position + length]
        after = index.tokens[position + length:min(end, position + length + CONTEXT_TOKENS)]
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=False)
        context = f"{decode(list(before))}«{decode(list(inside))}»{decode(list(after))}"
        return Source(dataset=str(index.dataset.path), dataset_type=index.dataset.type,
                      document=index.labels[doc], position=position - start, context=context)


@functools.lru_cache(maxsize=8)
def tracer_for(model_path: Path | str, index_dir: Path | str | None = None) -> Tracer:
    """A `Tracer` per checkpoint, kept for the next call (a server or a report card asks many times)."""
    return Tracer(model_path, index_dir)


def find_spans(
    model_path: Path | str, text: str, min_tokens: int = DEFAULT_MIN_TOKENS, *,
    index_dir: Path | str | None = None, max_sources: int = DEFAULT_MAX_SOURCES,
) -> list[Span]:
    """The spans of `text` (at least `min_tokens` tokens, maximal, greedy left to right) that occur
    word for word in the training data of the checkpoint at `model_path`, each with its sources.
    The indexes are built on first use (stderr says so) and reused; the tracer is cached per path."""
    return tracer_for(str(Path(model_path).resolve()), None if index_dir is None else str(index_dir)) \
        .find_spans(text, min_tokens=min_tokens, max_sources=max_sources)
