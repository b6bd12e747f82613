"""Lineage trackers: where saved and used artifacts, configs and metrics are recorded.

One tracker is active per process, reached through `get_lineage_tracker()`. Artifacts talk to it in
`Artifact.save` (log_artifact) and `Artifact.load` (use_artifact, resolve); numbers reach it through
`log_metrics`: the training metrics log (`training.metrics`), the nano2 evaluation steps (their held-out
numbers, at the checkpoint's step); `log_series`: live progress against its own x-axis (a data-prep run's
items done, bytes, tokens/s, removals per filter), whose runner (`data_prep.stages.runner`) logs its
final counts per stage as a table (`log_table`). `cli.run` calls `finish()` when a step ends. Nothing else calls it.

  NoOpTracker   the default; records nothing.
  FileTracker   appends every saved and used artifact to a local JSONL ledger, so lineage can be
                shown and `--<name>-artifact TYPE:latest` resolved without any service.
  WandbTracker  logs configs, metrics and artifacts to Weights & Biases. Works with
                WANDB_MODE=offline and no account: the run is written under `wandb/` and can be
                synced later with `wandb sync`.

Choose one in code with `set_lineage_tracker(FileTracker("runs/ledger.jsonl"))` once at start, or
from the environment: NEMOTRON_TRACKER=none | file:PATH | wandb[:PROJECT].

Under torchrun only rank 0 talks to the tracker: every rank runs the same step, loads the same inputs
and would otherwise start its own W&B run and add its own "use" line to the ledger. On the other
ranks `get_lineage_tracker()` gives a `FollowerTracker`, which records nothing but still resolves
`--<name>-artifact TYPE:latest` from the file ledger, so every rank loads the same input.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import uuid
from pathlib import Path
from typing import Any, Protocol

from nemotron.errors import NemotronError


class Artifact(Protocol):
    """What a tracker reads of an artifact it records (`nemotron.artifact.Artifact` is one): trackers sit below
    the artifact core, which calls them, so they name only these fields and never import it."""

    type: str
    path: Path
    digest: str | None
    config: dict[str, Any]
    metrics: dict[str, Any]

    def files(self) -> list[Path]: ...


class LineageTracker(Protocol):
    run_id: str

    def log_artifact(self, artifact: Artifact) -> None: ...
    def use_artifact(self, artifact: Artifact) -> None: ...
    def resolve(self, reference: str) -> Path: ...
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None: ...
    def log_series(self, metrics: dict[str, Any], x: str) -> None: ...
    def log_table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None: ...
    def finish(self) -> None: ...


class NoOpTracker:
    run_id = "local"

    def log_artifact(self, artifact: Artifact) -> None:
        pass

    def use_artifact(self, artifact: Artifact) -> None:
        pass

    def resolve(self, reference: str) -> Path:
        raise NemotronError(
            f"cannot resolve artifact reference {reference!r}: no tracker is active; set "
            "NEMOTRON_TRACKER=file:PATH (or wandb), or pass the input's folder with its --<name>-path flag"
        )

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        pass

    def log_series(self, metrics: dict[str, Any], x: str) -> None:
        pass

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        pass

    def finish(self) -> None:
        pass


class FollowerTracker(NoOpTracker):
    """The tracker of torchrun ranks other than 0: records nothing; resolves through `resolver`."""

    def __init__(self, resolver: LineageTracker | None = None):
        self._resolver = resolver

    def resolve(self, reference: str) -> Path:
        if self._resolver is None:
            raise NemotronError(
                f"cannot resolve artifact reference {reference!r} on a torchrun rank other than 0 with "
                "this tracker; pass the input's --<name>-path instead"
            )
        return self._resolver.resolve(reference)


class FileTracker:
    """A local ledger: one JSON line per saved or used artifact, in the order it happened."""

    def __init__(self, ledger: str | Path, run_id: str | None = None):
        self.ledger = Path(ledger)
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id or f"file-{uuid.uuid4().hex[:8]}"

    def _append(self, event: str, artifact: Artifact) -> None:
        line = {
            "event": event,
            "type": artifact.type,
            "path": str(artifact.path),
            "digest": artifact.digest,
            "run_id": self.run_id,
            "time": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
        # One write call of one line in append mode: concurrent steps do not interleave lines.
        with open(self.ledger, "a") as f:
            f.write(json.dumps(line) + "\n")

    def log_artifact(self, artifact: Artifact) -> None:
        self._append("save", artifact)

    def use_artifact(self, artifact: Artifact) -> None:
        self._append("use", artifact)

    def entries(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]

    def resolve(self, reference: str) -> Path:
        """`TYPE`, `TYPE:latest` or `TYPE:vN` (the N-th save of that type, from 0) -> its folder."""
        type_name, _, version = reference.partition(":")
        saves = [e for e in self.entries() if e["event"] == "save" and e["type"] == type_name]
        if not saves:
            raise NemotronError(
                f"{self.ledger}: no saved artifact of type {type_name!r}; "
                "run the step that makes it with this ledger first"
            )
        if version in ("", "latest"):
            return Path(saves[-1]["path"])
        if version.startswith("v") and version[1:].isdigit() and int(version[1:]) < len(saves):
            return Path(saves[int(version[1:])]["path"])
        raise NemotronError(
            f"{self.ledger}: no version {version!r} of {type_name!r} "
            f"(have v0..v{len(saves) - 1} and latest)"
        )

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        pass  # training steps keep their own metrics JSONL next to the checkpoint

    def log_series(self, metrics: dict[str, Any], x: str) -> None:
        pass  # progress is on stderr; the run's counts are in its receipts

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        pass  # the ledger holds lineage only; data-prep runs keep their receipts and summary.json

    def finish(self) -> None:
        pass


class WandbTracker:
    """Weights & Biases: artifacts as reference artifacts (metadata.json plus file:// references)."""

    def __init__(self, project: str = "nemotron", run_dir: str | Path | None = None, **init: Any):
        import wandb  # imported here: only this tracker needs it, and it is slow to import

        self._wandb = wandb
        self.run = wandb.init(project=project, dir=str(run_dir) if run_dir else None, **init)
        self.run_id = self.run.id
        self._axes: dict[str, str] = {}  # metric -> the metric W&B plots it against (log_series)

    def log_artifact(self, artifact: Artifact) -> None:
        art = self._wandb.Artifact(
            name=artifact.type,
            type=artifact.type,
            metadata={"path": str(artifact.path), "digest": artifact.digest, **artifact.metrics},
        )
        art.add_file(str(Path(artifact.path) / "metadata.json"))
        for f in artifact.files():
            # References, not uploads: checkpoints can be large and already live on shared storage.
            art.add_reference(Path(f).resolve().as_uri(), checksum=False)
        self.run.config.update({artifact.type: artifact.config}, allow_val_change=True)
        self.run.log_artifact(art)

    def use_artifact(self, artifact: Artifact) -> None:
        # Offline runs cannot look artifacts up on the server; the input is recorded in the config.
        self.run.config.update(
            {f"input/{artifact.type}": {"path": str(artifact.path), "digest": artifact.digest}},
            allow_val_change=True,
        )

    def resolve(self, reference: str) -> Path:
        if self._wandb.run is not None and self.run.settings.mode == "offline":
            raise NemotronError(
                f"cannot resolve W&B artifact {reference!r} in offline mode; "
                "pass the input's folder with its --<name>-path flag, or run online"
            )
        used = self.run.use_artifact(reference if ":" in reference else f"{reference}:latest")
        return Path(used.metadata["path"])

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        if step is None:
            self.run.log(metrics)
        else:
            self.log_series({"step": step, **metrics}, x="step")

    def log_series(self, metrics: dict[str, Any], x: str) -> None:
        """One row of metrics, plotted against the metric `x` that the row holds, not W&B's step.

        W&B keeps one step counter per run and drops a row logged at a step below it ("ignoring partial
        history record"), and a recipe runs its steps in one process, so one run: a data-prep run's
        live progress rows would have pushed the counter past the first steps of the training logged
        after it. So W&B's step is only a row number here, and `define_metric` gives every metric its
        own x-axis: `step` for training and evaluation, `data_prep/<run>/items_done` for data prep."""
        for key in metrics:
            if key != x and self._axes.get(key) != x:
                self.run.define_metric(key, step_metric=x)
                self._axes[key] = x
        self.run.log(metrics)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        """A W&B Table (e.g. a data-prep run's shard plan, or its finished shards with their counts)."""
        # commit=False: the table joins the current step instead of advancing the step counter, so
        # steps that log with explicit steps afterwards (training) are not refused as out of order.
        self.run.log({key: self._wandb.Table(columns=columns, data=rows)}, commit=False)

    def finish(self) -> None:
        self.run.finish()
        # Stop the background wandb-core service too: only then is the offline run log on disk
        # complete (finish() alone can return before the last records are flushed).
        self._wandb.teardown()


# ---------------------------------------------------------------------------------------------
# The one active tracker
# ---------------------------------------------------------------------------------------------

_ACTIVE: LineageTracker | None = None


def set_lineage_tracker(tracker: LineageTracker) -> LineageTracker:
    global _ACTIVE
    _ACTIVE = tracker
    return tracker


def get_lineage_tracker() -> LineageTracker:
    """The active tracker; on first use, the one NEMOTRON_TRACKER names (NoOp when unset).

    Off torchrun's rank 0 (env RANK set and not "0"), a `FollowerTracker` that records nothing.
    """
    global _ACTIVE
    if _ACTIVE is None:
        spec = os.environ.get("NEMOTRON_TRACKER", "none")
        _ACTIVE = tracker_from_env(spec) if is_main_rank() else follower_from_env(spec)
    return _ACTIVE


def is_main_rank() -> bool:
    """True outside torchrun and on its rank 0 (torchrun sets RANK in every process it starts)."""
    return os.environ.get("RANK", "0") in ("", "0")


def follower_from_env(spec: str) -> FollowerTracker:
    """The tracker of a non-zero rank: silent, resolving references through a file ledger if any."""
    if spec.partition(":")[0] == "wandb":
        return FollowerTracker()  # never a second W&B run
    leader = tracker_from_env(spec)  # none or file:PATH, validated as on rank 0
    return FollowerTracker(leader if isinstance(leader, FileTracker) else None)


def tracker_from_env(spec: str) -> LineageTracker:
    kind, _, arg = spec.partition(":")
    if kind in ("", "none"):
        return NoOpTracker()
    if kind == "file":
        if not arg:
            raise NemotronError("NEMOTRON_TRACKER=file needs a ledger path: file:runs/ledger.jsonl")
        return FileTracker(arg)
    if kind == "wandb":
        return WandbTracker(project=arg or "nemotron")
    raise NemotronError(
        f"NEMOTRON_TRACKER={spec!r} is not a tracker: use none, file:PATH or wandb[:PROJECT]"
    )
