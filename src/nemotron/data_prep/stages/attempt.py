"""One work item's attempt under the receipt protocol (`receipts.py`), as every executor of a stage list
makes it: the runner's own (`runner.py`: this process, a pool, Ray) and cosmos-xenna's (`xenna.py`).

    status, counts = begin(run_hash, run_dir, item, stages)  # "skipped" (receipted), "redone" or "written"
    ...                                                      # the stages write the item's files
    write_receipt(run_dir, receipt)                          # last: the commit point

`begin` skips an item whose receipt proves it done (the receipt's counts come back) and otherwise
clears what an earlier, interrupted attempt left of it (`discard_item`: the receipt first, then the
files the stages say they may write, `Stage.output_names`).
"""

from __future__ import annotations

from pathlib import Path

from nemotron.data_prep import storage
from nemotron.data_prep.receipts import is_done, read_receipt, receipt_path
from nemotron.data_prep.stages.base import Stage, WorkItem


def begin(run_hash: str, run_dir: storage.PathLike, item: WorkItem, stages: tuple[Stage, ...]
          ) -> tuple[str, dict[str, int]]:
    """("skipped", the receipt's counts) for a receipted item; else ("redone" | "written", {}), the
    leftovers of an earlier attempt cleared ("redone": there were some)."""
    receipt = read_receipt(run_dir, item.name)
    if is_done(run_dir, receipt, run_hash, item.name, item.work):
        return "skipped", receipt.stats
    return ("redone" if discard_item(run_dir, item, stages) else "written"), {}


def discard_item(run_dir: storage.PathLike, item: WorkItem, stages: tuple[Stage, ...]) -> bool:
    """Delete whatever an earlier attempt left of this item (the files its stages may write, and their
    temp files); True if there was anything."""
    names = [name for stage in stages for name in stage.output_names(item)]
    # The receipt goes first: from here on, nothing claims this item is done.
    leftovers = [receipt_path(run_dir, item.name), *(storage.join(run_dir, name) for name in names)]
    removed = [path for path in leftovers if storage.remove(path)]
    if not storage.is_url(run_dir):  # temp files of interrupted atomic writes (object stores have none)
        folders = sorted({(Path(run_dir) / name).parent for name in names} | {Path(leftovers[0]).parent})
        temps = sorted(path for folder in folders for path in folder.glob(f".{item.name}.*.tmp"))
        for path in temps:
            path.unlink(missing_ok=True)
        removed += temps
    return bool(removed)
