"""Plan: list the blend's input files and cut them into work items, reading no document.

The driver's only pass over the data: it lists each source's files with their sizes (Parquet: the
row groups from the footer; remote objects: through fsspec), cuts a JSONL file at about every
`work_item_bytes` (each cut moved forward to the next line start, one seek per cut) and checksums
each file as a stream (for the run hash), counting the newlines before each cut on the way so that a
worker can name lines (and give id-less records the same "<file>:<line>" ids `read_jsonl` gives).
Memory stays flat in the corpus size: a list of small `WorkItem`s is all the driver keeps.

Built-in corpora ("shakespeare", "chatterbot") and Hugging Face hub ids are one work item each:
they are read by `sources.read_source` in one worker (they are small, or, for a hub dataset,
materialized by `datasets` anyway).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from nemotron.data_prep import storage
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.sizes import parse_size
from nemotron.data_prep.sources import BUILTIN_SOURCES, DATA_SUFFIXES
from nemotron.data_prep.stages.base import WorkItem
from nemotron.errors import NemotronError

_CHUNK = 1 << 20  # bytes read at a time while checksumming


def plan_work_items(blend: DataBlend, work_item_bytes: int | str, min_items_per_file: int = 1,
                    ) -> tuple[list[WorkItem], list[dict]]:
    """The blend's work items, in blend order, and the input fingerprint (per file: its checksum).
    `work_item_bytes`: bytes, or a size string ("256MB", `nemotron.data_prep.sizes`)."""
    work_item_bytes = parse_size(work_item_bytes, "work_item_bytes")
    items: list[WorkItem] = []
    fingerprint: list[dict] = []
    for split, entry in blend.entries():
        common = {"source": entry.label, "split": split, "text_field": entry.text_field,
                  "hf_split": entry.hf_split, "subset": entry.subset}
        for kind, path, file in _files_of(entry.path, blend._base_dir):
            if kind == "builtin":
                items.append(WorkItem(len(items), kind=kind, path=path, file=file, **common))
                fingerprint.append({"source": entry.label, "builtin": path, "hf_split": entry.hf_split,
                                    "subset": entry.subset})
                continue
            size = storage.size(path)
            if kind == "jsonl":
                cuts = line_cuts(path, max(min_items_per_file, math.ceil(size / work_item_bytes)))
                checksum, lines_before = checksum_and_count(path, [start for start, _ in cuts])
                for (start, end), before in zip(cuts, lines_before, strict=True):
                    items.append(WorkItem(len(items), kind=kind, path=path, file=file, start=start, end=end,
                                          first_row=before + 1, size=end - start, **common))
            elif kind == "parquet":
                checksum = storage.sha256(path)
                for start, end, first_row, nbytes in _row_group_ranges(path, work_item_bytes, min_items_per_file):
                    items.append(WorkItem(len(items), kind=kind, path=path, file=file, start=start, end=end,
                                          first_row=first_row, size=nbytes, **common))
            else:
                checksum = storage.sha256(path)
                items.append(WorkItem(len(items), kind=kind, path=path, file=file, size=size, **common))
            fingerprint.append({"source": entry.label, "file": file, "kind": kind, "sha256": checksum})
    return items, fingerprint


def _files_of(path: str, base_dir: Path) -> list[tuple[str, str, str]]:
    """(kind, path, name) of every input file of one blend entry, sorted by name."""
    if path in BUILTIN_SOURCES:
        return [("builtin", path, path)]
    if storage.is_url(path):
        suffix = Path(path).suffix
        if suffix not in DATA_SUFFIXES:
            raise NemotronError(f"{path}: a URL source must be one file ending in {sorted(set(DATA_SUFFIXES))}")
        return [(DATA_SUFFIXES[suffix], path, Path(path).name)]
    local = Path(base_dir) / path
    if not local.exists():
        return [("builtin", path, path)]  # a hub id (BlendSource checked it has that shape)
    files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file()
                                                   and p.suffix in DATA_SUFFIXES)
    kinds = {DATA_SUFFIXES[p.suffix] for p in files if p.suffix in DATA_SUFFIXES}
    if len(kinds) != 1:
        raise NemotronError(f"{local}: found formats {sorted(kinds) or 'none'}; a source must be one of "
                            f"{sorted(set(DATA_SUFFIXES))} (list mixed folders as separate sources)")
    kind = kinds.pop()
    name = (lambda p: p.name) if local.is_file() else (lambda p: p.relative_to(local).as_posix())
    return [(kind, str(p), name(p)) for p in files]


def line_cuts(path: storage.PathLike, pieces: int, size: int | None = None) -> list[tuple[int, int]]:
    """At most `pieces` byte ranges of a line-oriented file, cut at about k/pieces of its size, each cut
    moved forward to the next line start (one seek per cut, no pass over the lines); a range that would
    be empty (a line longer than a piece) is dropped, so a file may give fewer ranges than asked for.
    `size`: cut only the file's first `size` bytes (a line start), not all of it."""
    size = storage.size(path) if size is None else size
    boundaries = [0]
    with storage.open_read(path) as stream:
        for k in range(1, pieces):
            stream.seek(max(k * size // pieces - 1, 0))
            stream.readline()
            boundaries.append(max(stream.tell(), boundaries[-1]))
    boundaries.append(size)
    return [(start, end) for start, end in zip(boundaries, boundaries[1:], strict=False) if end > start]


def checksum_and_count(path: storage.PathLike, offsets: list[int]) -> tuple[str, list[int]]:
    """The file's sha256 and the number of newlines before each offset (ascending), in one pass."""
    digest, newlines, position, counts = hashlib.sha256(), 0, 0, []
    pending = list(offsets)
    with storage.open_read(path) as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
            while pending and pending[0] <= position + len(chunk):
                counts.append(newlines + chunk.count(b"\n", 0, pending.pop(0) - position))
            newlines += chunk.count(b"\n")
            position += len(chunk)
    counts += [newlines] * len(pending)
    return digest.hexdigest(), counts


def _row_group_ranges(path: str, work_item_bytes: int, min_items: int) -> list[tuple[int, int, int, int]]:
    """(first group, end group, first row, bytes) per work item: whole row groups, about
    `work_item_bytes` of uncompressed data each (at least `min_items` items when there are enough groups)."""
    import pyarrow.parquet as pq

    with storage.open_read(path) as stream:
        try:
            metadata = pq.ParquetFile(stream).metadata  # the footer only
        except Exception as error:  # pyarrow raises several types for a damaged file
            raise NemotronError(f"cannot read {path} as Parquet ({error}); fix or remove the file") from error
    groups = [(metadata.row_group(i).num_rows, metadata.row_group(i).total_byte_size)
              for i in range(metadata.num_row_groups)]
    budget = min(work_item_bytes, max(1, sum(b for _, b in groups) // max(1, min_items)))
    ranges, start, first_row, row, nbytes = [], 0, 0, 0, 0
    for index, (rows, size) in enumerate(groups):
        row, nbytes = row + rows, nbytes + size
        if nbytes >= budget or index == len(groups) - 1:
            ranges.append((start, index + 1, first_row, nbytes))
            start, first_row, nbytes = index + 1, row, 0
    return ranges
