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

import dataclasses
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nemotron.artifact import METADATA, Artifact
from nemotron.artifact.fields import execution
from nemotron.artifact.lock import hold_output_dir
from nemotron.cli import AT_END
from nemotron.errors import NemotronError

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


@dataclass
class RecipeSettings:
    """The fields every recipe and stage orchestrator's Config starts with (it redefines `output_dir`)."""

    output_dir: Path = Path("runs")
    """Each step (or stage) writes into a folder of its own name under this one."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the data, the model and the steps (tiny runs on a laptop CPU)."""
    seed: int = 0
    """Seeds every random choice of the run: same config and seed, same bytes."""
    force: bool = execution(False)
    """Re-run steps even when their output is up to date."""


# What this process ran and skipped, for the one-line summary a person reads last (`cli.AT_END`).
_STEPS: list[tuple[str, str]] = []
SUMMARY: dict[str, Any] = {"started": None, "report": None}


def _summary() -> None:
    ran = sum(1 for _, what in _STEPS if what == "run")
    seconds = time.perf_counter() - (SUMMARY["started"] or time.perf_counter())
    report = f"; report card: {SUMMARY['report']}" if SUMMARY["report"] else ""
    print(f"summary: {ran} steps run, {len(_STEPS) - ran} skipped (up to date), {seconds:.0f} s{report}",
          file=sys.stderr)


# Fields every orchestrator sets on the steps it runs; a nested flag for one of them would be ignored.
SET_BY_THE_ORCHESTRATOR = {"scale": "--scale", "seed": "--seed", "output_dir": "--output-dir", "force": "--force",
                           "engine": "--engine", "dry_run": "--dry-run", "data_root": "--data-root", "nodes": "--nodes",
                           "gpus_per_node": "--gpus-per-node", "container_image": "--container-image"}


# Inputs an orchestrator hands from one step to the next (`--<name>-path` / `--<name>-artifact`). A
# step's own extra inputs (a blend, extra chat pools, the user's pairs) stay settable.
HANDED_INPUTS = {"dataset", "checkpoint", "base_checkpoint", "sft_checkpoint", "sft_dataset", "pools", "scores"}


def refuse_overridden_flags(config: Any, prefix: str = "") -> None:
    """Refuse a nested flag that the orchestrator would overwrite, in one line naming the flag to use.

    An orchestrator's Config nests each step's Config, so `--help` offers `--stage0.training.seed`; but
    the orchestrator sets seed, scale, output folders and inputs on every step, so such a flag would be
    accepted and silently ignored. A nested value that differs from its default is therefore refused.
    """
    for field in dataclasses.fields(config):
        nested = getattr(config, field.name)
        if not dataclasses.is_dataclass(nested):
            continue
        flag = f"{prefix}{field.name.replace('_', '-')}"
        default = type(nested)()
        for name in (f.name for f in dataclasses.fields(nested)):
            value = getattr(nested, name)
            if value == getattr(default, name):
                continue
            option = f"--{flag}.{name.replace('_', '-')}"
            if name in SET_BY_THE_ORCHESTRATOR:
                raise NemotronError(f"{option} is set by the orchestrator for every step; pass "
                                    f"{SET_BY_THE_ORCHESTRATOR[name]} (at the top level) instead")
            if name.removesuffix("_path").removesuffix("_artifact") in HANDED_INPUTS:
                raise NemotronError(f"{option}: the orchestrator hands each step the outputs of the step before; "
                                    "to give a step another input, run that step alone (python -m ...<step> --help)")
        refuse_overridden_flags(nested, prefix=f"{flag}.")
