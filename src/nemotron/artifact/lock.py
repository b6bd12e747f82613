"""One step run owns its output folder: a lock held for as long as the step runs.

Two runs writing into the same `--output-dir` would interleave checkpoints, shards and metrics and
end with an artifact that vouches for a mix of both. So `nemotron.cli.run` and the recipe
orchestrators (`nemotron.recipes.orchestration.run_step`) hold

    with hold_output_dir(config.output_dir):
        artifact = main(config)

and a second run on the same folder stops at once with one line:

    error: runs/x is in use by another run (pid 4242); wait for it or pass another --output-dir

The lock is `fcntl.flock` on `<output_dir>/.lock` (which holds the owner's pid, for that message).
The kernel releases it when the owning process exits, however it exits, so a killed run never leaves
the folder stuck. Under torchrun every rank shares the folder, so only rank 0 (RANK unset or "0")
takes the lock. A process may hold the same folder more than once (a recipe orchestrator locks its
root, then each step's folder): nested holds of one folder are counted, not re-locked.

A run that fails and leaves nothing in a folder it created removes that folder again (and the
parents it created), so a refused run writes nothing.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nemotron.artifact import LOCK
from nemotron.errors import NemotronError
from nemotron.trackers import is_main_rank

_HELD: dict[Path, int] = {}  # folder -> nesting depth, in this process


@contextmanager
def hold_output_dir(output_dir: str | Path | None) -> Iterator[None]:
    """Own `output_dir` for the duration of the block; NemotronError if another run owns it."""
    if output_dir is None or not is_main_rank():
        yield
        return
    folder = Path(output_dir).resolve()
    if folder in _HELD:
        _HELD[folder] += 1
        try:
            yield
        finally:
            _HELD[folder] -= 1
        return
    created = _missing_folders(folder)
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(descriptor, 32).decode(errors="replace").strip() or "unknown"
            raise NemotronError(
                f"{output_dir} is in use by another run (pid {owner}); wait for it or pass another --output-dir"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        _HELD[folder] = 1
        try:
            yield
        finally:
            del _HELD[folder]
            # Nothing was written (a refused or failed run): leave no folder behind either.
            # (A folder that is gone, e.g. renamed into place by `run_step`, is left to its new owner.)
            if created and folder.is_dir() and [p.name for p in folder.iterdir()] == [LOCK]:
                (folder / LOCK).unlink()
                for path in created:
                    try:
                        path.rmdir()
                    except OSError:
                        break  # something else appeared in it meanwhile
    finally:
        os.close(descriptor)  # releases the lock


def _missing_folders(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, innermost first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    return missing
