"""Running recipe steps in order, as plain function calls, skipping the ones already done.

A stage or recipe orchestrator calls `run_step(main, config, ArtifactClass, inputs=[...])` for each
step. If the step's output folder already holds an artifact made with exactly this config from these
very inputs, and its files still match its digest, the step is skipped and that artifact returned;
otherwise the step's `main(config)` runs. `force=True` runs it regardless. The step's output folder
is locked meanwhile (`nemotron.artifact.lock`): a second run on it stops with one line.

Training steps resume from their own checkpoints when they were interrupted (no artifact yet), so
re-running an orchestrator after a crash picks up where it stopped. A step that had FINISHED but is
run again (its config or inputs changed, or --force) starts fresh: the finished run's checkpoints
are removed first, since they belong to the run being replaced and must not be resumed from.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from nemotron.artifact import METADATA, Artifact
from nemotron.artifact.lock import hold_output_dir
from nemotron.cli import AT_END

A = TypeVar("A", bound=Artifact)


def run_step(
    main: Callable[[Any], A],
    config: Any,
    artifact_class: type[A],
    inputs: list[Artifact] = (),
    force: bool = False,
) -> A:
    name = "/".join(main.__module__.split(".")[-2:])  # e.g. stage0_pretrain/training
    if not _STEPS:
        SUMMARY["started"] = time.perf_counter()
        if _summary not in AT_END:
            AT_END.append(_summary)
    with hold_output_dir(config.output_dir):  # before looking: another run may be writing there
        if not force and (done := artifact_class.reuse(config, inputs)) is not None:
            print(f"[skip] {name}: {done.path} is up to date", file=sys.stderr)
            _STEPS.append((name, "skipped"))
            return done
        if (Path(config.output_dir) / METADATA).exists():
            if force:
                print(f"re-running {name} (--force): the finished run in {config.output_dir} is replaced",
                      file=sys.stderr)
            if (Path(config.output_dir) / "checkpoints").exists():
                print(f"[note] {name}: deleting the finished run's checkpoints; it trains again from the start",
                      file=sys.stderr)
            shutil.rmtree(Path(config.output_dir) / "checkpoints", ignore_errors=True)
        print(f"[run ] {name}", file=sys.stderr)
        start = time.perf_counter()
        artifact = main(config)
        print(f"[done] {name} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
        _STEPS.append((name, "run"))
        return artifact


# What this process ran and skipped, for the one-line summary a person reads last (`cli.AT_END`).
_STEPS: list[tuple[str, str]] = []
SUMMARY: dict[str, Any] = {"started": None, "report": None}


def _summary() -> None:
    ran = sum(1 for _, what in _STEPS if what == "run")
    seconds = time.perf_counter() - (SUMMARY["started"] or time.perf_counter())
    report = f"; report card: {SUMMARY['report']}" if SUMMARY["report"] else ""
    print(f"summary: {ran} steps run, {len(_STEPS) - ran} skipped (up to date), {seconds:.0f} s{report}",
          file=sys.stderr)
