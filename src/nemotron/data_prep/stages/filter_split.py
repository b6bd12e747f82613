"""Filter and split: decided per document from the document alone, so each worker decides alone.

Quality filters (`quality.py`) keep or drop a document by its own text; the first filter that
rejects it is counted, by name. The split comes from a hash of the document's id
(`blend.assign_split`, cut at the blend's train/valid/test ratios) or, for a blend that lists
sources per split, from the work item. Neither needs any other document, so no process ever holds
more than the batch in hand.

Filters are named as a set (`FILTER_SETS`), not passed as functions: the stage travels pickled to
pool and Ray workers, and the set's name and bounds go into the run hash.
"""

from __future__ import annotations

from collections.abc import Iterator

from nemotron.data_prep.blend import assign_split
from nemotron.data_prep.sources import Document
from nemotron.data_prep.stages.base import ItemContext, Stage
from nemotron.errors import NemotronError


def _default_filters():
    from nemotron.data_prep.quality import default_filters

    return default_filters()


FILTER_SETS = {"none": list, "default": _default_filters}


class FilterSplitStage(Stage):
    name = "filter"

    def __init__(self, ratios: list[float] | None, filters: str = "none"):
        if filters not in FILTER_SETS:
            raise NemotronError(f"unknown filter set {filters!r}; use one of {', '.join(FILTER_SETS)}")
        self.ratios, self.filters = ratios, filters
        self._filters: list = []

    def setup(self) -> None:
        self._filters = FILTER_SETS[self.filters]()

    def fingerprint(self) -> dict:
        bounds = [[f.name, f.min_value, f.max_value] for f in FILTER_SETS[self.filters]()]
        return {"ratios": self.ratios, "filters": bounds}

    def process(self, context: ItemContext, records: Iterator[list[Document]]) -> Iterator[list[tuple[str, Document]]]:
        from nemotron.data_prep.quality import TextStats

        fixed = context.item.split
        for batch in records:
            kept = []
            for document in batch:
                if self._filters:
                    stats = TextStats(document.text)
                    rejected_by = next((f.name for f in self._filters if not f.keep(stats)), None)
                    if rejected_by is not None:
                        context.count(self.name, f"removed: {rejected_by}")
                        continue
                split = fixed or assign_split(document.id, self.ratios)
                context.count(self.name, f"kept: {split}")
                kept.append((split, document))
            yield kept
