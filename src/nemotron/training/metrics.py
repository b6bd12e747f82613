"""Training metrics: a JSONL log on disk, the active lineage tracker, and a progress bar on stderr.

- `MetricsLog(path)` appends one JSON line per logged step, `{"step": 10, "loss": 4.2, ...}`, and
  forwards the same numbers to the active tracker (`nemotron.trackers`; NoOp unless configured), so
  a W&B run and the local file always agree. The JSONL file is what the report card plots: it needs
  no service and survives the run.
- Resume: `MetricsLog(path, resume_step=50)` first drops every line with step > 50. Those lines were
  written after the checkpoint we resume from and will be logged again, so without the cut a
  resumed run's log would hold some steps twice; with it, the log lists each step once, exactly as
  an uninterrupted run would.
- `TrainingProgress` is a progress bar on stderr (stdout is reserved for artifact JSON; `nemotron.progress`:
  live on a terminal, a line every 10 s in a log) showing the loss and the throughput in tokens per
  second, which it also returns so it can be logged.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.errors import NemotronError
from nemotron.progress import progress_bar


class MetricsLog:
    """Append-only JSONL metrics, one line per step, mirrored to the lineage tracker."""

    def __init__(self, path: Path | str, resume_step: int | None = None, *, mirror: bool = True) -> None:
        self.path, self.mirror = Path(path), mirror  # mirror: to the tracker too (not for watch.jsonl's records)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is None:
            # A fresh run owns its log: start empty rather than mixing two runs' curves.
            _write_lines_atomically(self.path, [])
        else:
            kept = [record for record in read_metrics(self.path) if record["step"] <= resume_step]
            _write_lines_atomically(self.path, [json.dumps(record) for record in kept])

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Record `metrics` for `step` (numbers, strings or bools) in the file and the tracker."""
        record = {"step": int(step), **{name: _plain(value) for name, value in metrics.items()}}
        with open(self.path, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")
        if not self.mirror:
            return
        # Imported here, not at the top: the tracker module is optional for code that only plots logs.
        from nemotron.trackers import get_lineage_tracker

        get_lineage_tracker().log_metrics({k: v for k, v in record.items() if k != "step"}, step=record["step"])

    def records(self) -> list[dict[str, Any]]:
        return read_metrics(self.path)


def read_metrics(path: Path | str) -> list[dict[str, Any]]:
    """All records of a metrics JSONL file (an empty list if it does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                # A half-written last line (the process was killed mid-write) is the likely cause.
                raise NemotronError(
                    f"{path} line {number} is not valid JSON ({error.msg}); delete that line and resume"
                ) from None
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise NemotronError(f"{path} line {number} has no integer 'step'; it is not a metrics log")
            records.append(record)
    return records


class TrainingProgress:
    """A progress bar on stderr (`nemotron.progress`): step count, loss, tokens/s. `update` returns tokens/s."""

    def __init__(self, total_steps: int, start_step: int = 0, description: str = "train") -> None:
        self._bar = progress_bar(total=total_steps, initial=start_step, desc=description, dynamic_ncols=True)
        self._last_time = time.perf_counter()

    def update(self, steps: int, tokens: int, loss: float) -> float:
        """Advance by `steps` steps that consumed `tokens` tokens; returns throughput since last call."""
        now = time.perf_counter()
        tokens_per_second = tokens / max(now - self._last_time, 1e-9)
        self._last_time = now
        self._bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_second:,.0f}", refresh=False)
        self._bar.update(steps)  # after the postfix: a line drawn now shows this step's loss
        return tokens_per_second

    def end_at(self, total_steps: int) -> None:
        """The run's last step moved (`--patience`): the bar now ends there."""
        self._bar.total = total_steps
        self._bar.refresh()

    def write(self, message: str) -> None:
        """Print a line to stderr above the bar without breaking it."""
        self._bar.write(message, file=sys.stderr)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> TrainingProgress:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _plain(value: Any) -> Any:
    """A JSON-safe scalar: tensors and numpy numbers become Python floats/ints; NaN stays visible."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; "nan" in the log is better than a crash mid-run
    return value


def _write_lines_atomically(path: Path, lines: list[str]) -> None:
    with atomic.output_file(path, "w") as stream:
        stream.writelines(line + "\n" for line in lines)
