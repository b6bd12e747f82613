"""Running recipe steps in order, as plain function calls, skipping the ones already done.

A stage or recipe orchestrator calls `run_step(main, config, ArtifactClass, inputs=[...])` for each
step. If the step's output folder already holds an artifact made with the same settings from these
very inputs, and its files still match its digest, the step is skipped and that artifact returned
(`nemotron.artifact.uptodate`); otherwise the step's `main(config)` runs. `force=True` runs it
regardless. The step's output folder is locked meanwhile (`nemotron.artifact.lock`): a second run on
it stops with one line.

Where a run lives is not part of it: locations (`*_dir`, `*_path`, `*_artifact`) and execution
settings (threads, workers, --force) are left out of the comparison at every depth of the config, and
inputs are compared by (type, digest), which does not depend on their folder either. So a run tree
that was copied or moved (`cp -r runs/nano2 runs/copy`, then `--output-dir runs/copy`) is up to
date, step for step.

Three cases, by what the output folder holds:

- nothing, or an interrupted run (no metadata.json): the step runs in the folder itself, and a
  training step resumes from its own checkpoints there;
- a finished artifact that is up to date: skipped;
- a finished artifact that is not (a setting changed, an upstream digest changed, its files no longer
  verify, or --force): one stderr line names the cause, and the step is run again ASIDE, into the
  staging folder `.<name>.rerun-<hash>` next to it, `<hash>` naming the settings and inputs of the new
  run. The finished folder is not touched until the new artifact is complete; then the two folders
  are swapped in one atomic rename (`nemotron.atomic.replace_folder`: renameat2 RENAME_EXCHANGE on
  Linux) and the old one is deleted. The artifact returned is read back from the final folder.

So a re-run killed at any moment (SIGKILL included) leaves the previous artifact in place and
verifiable. Running again picks the staging folder up: one with the same `<hash>` and no
metadata.json is an unfinished re-run of the same settings, and a training step resumes from its
checkpoints there; staging folders of other settings, or that hold a metadata.json (a complete run
that was not swapped in, or the old folder caught between the swap and its deletion), are removed
first. Staging folders are removed, too, when the step turns out to be up to date.

A re-run starts from an empty folder, so what a step caches in its own folder (stage-0 curation's
receipted shards and tokenizer) is made again; only nested artifact folders (its `synthetic/` data,
which needs a generation server) are copied in first, and skipped by their own `run_step` when up to date.

The one exception is a training step that hands its work to Megatron-Bridge (`config.hands_off`):
its run folder holds absolute paths that a cluster job writes to, so it is re-made in place.

Why the swapped-in folder needs no file rewritten: metadata.json stores every path inside the folder
as `./name` and inputs under the same root as `../step` (`nemotron.artifact.locations`), and the
staging folder is a sibling of the final one, so the same relative paths hold after the swap; the
digest names files relative to the artifact folder and leaves config locations out, so it is the same
in either place. Only the saved config's locations under the staging folder are rewritten to the
final folder after the swap (no part of the digest). The staging folder's own lock is held through
the swap, so the lock file that lands in the final folder is held until the step returns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nemotron import atomic
from nemotron.artifact import LOCK, METADATA, Artifact, apply_scale
from nemotron.artifact.fields import execution
from nemotron.artifact.lock import hold_output_dir
from nemotron.artifact.uptodate import identity, up_to_date
from nemotron.cli import AT_END
from nemotron.errors import NemotronError
from nemotron.trackers import get_lineage_tracker

A = TypeVar("A", bound=Artifact)

STAGING = ".{name}.rerun-{hash}"  # a re-run's folder, beside the finished one it replaces


def run_step(
    main: Callable[[Any], A],
    config: Any,
    artifact_class: type[A],
    inputs: list[Artifact] = (),
    force: bool = False,
) -> A:
    name = step_label(config.output_dir)  # e.g. stage0_pretrain/training_dense, evaluation/benchmarks
    if not _STEPS:
        SUMMARY["started"] = time.perf_counter()
        if _summary not in AT_END:
            AT_END.append(_summary)
    folder = Path(config.output_dir)
    with hold_output_dir(folder):  # before looking: another run may be writing there
        done, cause = (None, "--force") if force else up_to_date(artifact_class, config, inputs)
        if done is not None:
            _remove_staging(folder)  # a re-run that was killed, then made unnecessary
            print(f"[skip] {name}: {done.path} is up to date", file=sys.stderr)
            _STEPS.append((name, "skipped"))
            return done
        start = time.perf_counter()
        if (folder / METADATA).exists() and getattr(config, "hands_off", False):
            # A Megatron-Bridge hand-off writes absolute paths into its run folder and a cluster job then
            # writes there: it cannot be built aside and moved, so it is rewritten in place.
            print(f"re-running {name}: {cause}; its run folder {folder} is rewritten in place", file=sys.stderr)
            print(f"[run ] {name}", file=sys.stderr)
            artifact = main(config)
        elif (folder / METADATA).exists():
            print(f"re-running {name}: {cause}; the finished artifact in {folder} stays until the new one is "
                  "complete", file=sys.stderr)
            print(f"[run ] {name}", file=sys.stderr)
            artifact = _rerun_aside(main, config, artifact_class, inputs)
        else:
            print(f"[run ] {name}", file=sys.stderr)
            artifact = main(config)
        print(f"[done] {name} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
        _STEPS.append((name, "run"))
        return artifact


def step_label(folder: str | Path) -> str:
    """A step's name in the log and on the report card: its output folder's last two parts, as the run tree
    holds it (`stage0_pretrain/training` and `stage0_pretrain/training_dense` for nano3's MoE and dense runs
    of one step; `evaluation/benchmarks` for the benchmarks step, whatever module runs it). A re-run's staging
    folder (`STAGING`) counts as the folder it replaces."""
    parts = [re.sub(r"^\.(.+)\.rerun-[0-9a-f]+$", r"\1", part) for part in Path(folder).absolute().parts[-2:]]
    return "/".join(parts)


def staging_folder(config: Any, inputs: list[Artifact]) -> Path:
    """Where a re-run of `config` from `inputs` is built: a hidden sibling of the output folder, named
    by the run's settings and inputs (so a killed re-run of the same settings is found again)."""
    folder = Path(config.output_dir).resolve()
    key = json.dumps([identity(config), sorted((i.type, i.digest or "") for i in inputs)], sort_keys=True)
    return folder.with_name(STAGING.format(name=folder.name, hash=hashlib.sha256(key.encode()).hexdigest()[:12]))


def _remove_staging(folder: Path, keep: Path | None = None) -> None:
    """Remove the re-run staging folders beside `folder`, except `keep`."""
    folder = folder.resolve()
    for staged in folder.parent.glob(STAGING.format(name=folder.name, hash="*")):
        if staged != keep:
            shutil.rmtree(staged, ignore_errors=True)


def _rerun_aside(main: Callable[[Any], A], config: Any, artifact_class: type[A], inputs: list[Artifact]) -> A:
    """Run the step into its staging folder, swap it in whole, and return the artifact read from the final folder."""
    folder = Path(config.output_dir).resolve()
    staging = staging_folder(config, inputs)
    _remove_staging(folder, keep=staging)
    if (staging / METADATA).exists():
        shutil.rmtree(staging)  # complete but never swapped in, or the old run caught mid-deletion: start over
    elif staging.exists():
        print(f"[note] resuming the unfinished re-run in {staging}", file=sys.stderr)
    with hold_output_dir(staging):
        _copy_nested_artifacts(folder, staging)
        made = main(dataclasses.replace(config, output_dir=staging))
        if Path(made.path).resolve() != staging:
            raise NemotronError(f"{main.__module__} saved its artifact in {made.path}, not in its --output-dir "
                                f"{staging}; a step writes its artifact into its output folder")
        atomic.replace_folder(staging, folder)
    artifact = artifact_class.from_path(folder)
    artifact.config = _moved(artifact.config, str(staging), str(folder))
    atomic.write_text(folder / METADATA, artifact.portable_json() + "\n")
    artifact.verify()
    get_lineage_tracker().log_artifact(artifact)  # the tracker saw it saved in the staging folder
    return artifact


def _copy_nested_artifacts(folder: Path, staging: Path) -> None:
    """Copy the finished folder's nested artifact folders (stage-0 curation's `synthetic/`) into the
    staging folder, so that the step's own `run_step` on them skips what is up to date (a copy is the
    same artifact) instead of making it again; copies, so the re-run cannot touch the finished folder."""
    for nested in sorted(folder.iterdir()):
        if nested.is_dir() and (nested / METADATA).exists() and not (staging / nested.name).exists():
            shutil.copytree(nested, staging / nested.name, ignore=shutil.ignore_patterns(LOCK))


def _moved(value: Any, old: str, new: str) -> Any:
    """`value` with every string that names `old` or a path under it renamed to `new`, at any depth."""
    if isinstance(value, dict):
        return {k: _moved(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_moved(v, old, new) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(old + "/")):
        return new + value[len(old):]
    return value


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


# Items per standard benchmark at full scale; apply_scale gives tiny 10 (3-4 s on the tiny models and a
# standard error of about 0.15: enough to show the table, not to tell a model from chance), small 100, medium 300.
FULL_BENCHMARK_ITEMS = 1_000
BENCHMARKS_FOLDER = Path("evaluation") / "benchmarks"  # under the recipe's output folder


def benchmark_final_model(settings: Any, checkpoint: Artifact, out: Path, scale: str, seed: int, force: bool) -> Any:
    """A recipe's last step: the standard benchmarks of its final model, each with its control, into
    `<out>/evaluation/benchmarks`. It is `python -m nemotron.evaluation --checkpoint-path CHECKPOINT
    --benchmarks core --limit N` (`settings`: the recipe's `--benchmarks.*` flags, an
    `evaluation.settings.BenchmarkSettings`), N by scale unless `--benchmarks.limit` says; skipped like any
    step when up to date."""
    import nemotron.evaluation.__main__ as standard_benchmarks  # the `python -m nemotron.evaluation` step
    from nemotron.evaluation.benchmarks import StandardBenchmarkResults

    limit = settings.limit or apply_scale(FULL_BENCHMARK_ITEMS, scale)
    config = standard_benchmarks.Config(**{**dataclasses.asdict(settings), "seed": seed, "limit": limit},
                                        checkpoint_path=checkpoint.path, output_dir=out / BENCHMARKS_FOLDER)
    return run_step(standard_benchmarks.main, config, StandardBenchmarkResults, inputs=[checkpoint], force=force)


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
