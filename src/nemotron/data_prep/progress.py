"""Live progress of a run of work items: a line on stderr and, with W&B active, the same numbers as metrics.

    progress = LiveProgress("post_training/normalize", total=len(units))
    for unit in units:
        ...
        progress.advance(counts={"records": 120, "removed: empty": 3})
    progress.close()

At most one report a second while items finish, and a last one at `close`. A report is one stderr line
(stdout carries artifact JSON only; in a log, not a terminal, at most one every 10 s and the last:
`nemotron.progress.plain_interval`) and, through the active tracker's `log_series`, one row of metrics
`<prefix>/<name>` plotted against `<prefix>/items_done`, so a W&B run shows the run advancing live,
not only its final tables. Subclasses shape the line and the numbers (`line`, `numbers`); the default
counts items and sums the `counts` each item brings.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from nemotron.progress import plain_interval
from nemotron.trackers import get_lineage_tracker

LINE_WIDTH = 160  # characters: a longer report is cut at its " | " separators, one part a line


class LiveProgress:
    def __init__(self, prefix: str, total: int, enabled: bool = True, interval: float = 1.0,
                 rates: tuple[str, ...] = ()):
        """`prefix` names the metrics (e.g. `data_prep/<run hash>`); `enabled` is the stderr line only;
        `rates` are the counts also reported per second (`tokens` -> `tokens_per_s`)."""
        self.prefix, self.total, self.enabled, self.interval, self.rates = prefix, total, enabled, interval, rates
        self.done, self.counts = 0, {}
        self.started = self.reported = self.printed = time.perf_counter()
        self.print_interval = plain_interval(interval)
        self.reported_at = -1  # items done at the last report
        self._log_series = getattr(get_lineage_tracker(), "log_series", None)  # trackers that predate it

    @property
    def seconds(self) -> float:
        return max(time.perf_counter() - self.started, 1e-9)

    def advance(self, items: int = 1, counts: dict[str, int] | None = None) -> None:
        self.done += items
        for key, value in (counts or {}).items():
            self.counts[key] = self.counts.get(key, 0) + value
        if time.perf_counter() - self.reported >= self.interval:
            self.report()

    def close(self) -> None:
        if self.reported_at != self.done:
            self.report(last=True)
        elif self.enabled and self.printed < self.reported:  # the last report went to the tracker only
            self.say()

    def line(self) -> str:
        shown = [f"{key} {value:,}" + (f" ({value / self.seconds:,.0f}/s)" if key in self.rates else "")
                 for key, value in sorted(self.counts.items())]
        return f"{self.prefix}: {self.done}/{self.total} items" + (f" | {', '.join(shown)}" if shown else "")

    def numbers(self) -> dict[str, float]:
        per_second = {f"{key}_per_s": round(self.counts.get(key, 0) / self.seconds, 1) for key in self.rates}
        return {**self.counts, **per_second}

    def say(self) -> None:
        """The report on stderr; a long one (every stage's counts) one stage a line, so a log stays readable."""
        line = self.line()
        if len(line) > LINE_WIDTH:
            line = line.replace(" | ", "\n    ")
        print(line, file=sys.stderr, flush=True)
        self.printed = time.perf_counter()

    def report(self, last: bool = False) -> None:
        if self.enabled and (last or time.perf_counter() - self.printed >= self.print_interval):
            self.say()
        if self._log_series is not None:
            x = f"{self.prefix}/items_done"
            row = {"items_total": self.total, "seconds": round(self.seconds, 3), **self.numbers()}
            self._log_series({x: self.done, **{f"{self.prefix}/{key}": value for key, value in row.items()}}, x=x)
        self.reported, self.reported_at = time.perf_counter(), self.done


@contextmanager
def timed(phase: str, seconds: dict[str, float], label: str = "data_curation") -> Iterator[None]:
    """Time one pipeline phase into `seconds` and say it on stderr (metrics only: wall times never
    enter artifact files)."""
    start = time.perf_counter()
    yield
    seconds[phase] = round(time.perf_counter() - start, 3)
    print(f"{label}: {phase:<16} {seconds[phase]:6.2f} s", file=sys.stderr)
