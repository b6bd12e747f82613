"""Progress bars a person can read, on a terminal and in a log file: the one helper every bar goes through.

    for doc in progress_bar(docs, desc="near dedup"):
        ...
    with progress_bar(total=steps, desc="train") as bar:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}", refresh=False)

On a terminal (stderr is a TTY) it is tqdm's live bar, redrawn in place, as it always was. Anywhere else
(a file, a pipe, a CI log) a redrawn bar is one line of thousands of carriage-return updates (`make demo >
log` held lines of 55 KB, one per training bar), so there the bar is a `PlainBar`: one plain line every
`PLAIN_INTERVAL` seconds while it moves and one at the end, each with the count, the rate, the time spent
and the time left, and the bar's postfix (the loss, where there is one). No carriage return, no cursor move.

`plain_interval()` is the same choice for progress reported as lines (`data_prep.progress.LiveProgress`):
a line a second on a terminal, one every `PLAIN_INTERVAL` seconds in a log.

The libraries' own bars (lm-eval's, `datasets`', `transformers`') are not ours to build, so `plain_stderr()`
(which `nemotron.cli` holds around every step and tool) reads what they write: in a log, a bar redrawn with
'\\r' becomes its state every `PLAIN_INTERVAL` seconds and its last state, one line each, and a bar that came
and went within `QUICK_BAR` seconds says nothing; any other text passes through as written.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

from tqdm import tqdm

PLAIN_INTERVAL = 10.0  # seconds between two lines of a bar written to a file, a pipe or CI
PLAIN_FORMAT = ("{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%), {elapsed} spent, {remaining} left, "
                "{rate_fmt}{postfix}")
PLAIN_FORMAT_NO_TOTAL = "{desc}: {n_fmt} {unit}, {elapsed} spent, {rate_fmt}{postfix}"
QUICK_BAR = 1.0  # seconds: a library's bar that ended sooner leaves no line in a log
CURSOR_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # cursor moves and colours of nested or coloured bars


def on_terminal(stream: Any = None) -> bool:
    """Whether `stream` (default: stderr, read now, so a redirection made later counts) is a terminal."""
    stream = sys.stderr if stream is None else stream
    return bool(getattr(stream, "isatty", lambda: False)())


def plain_interval(live: float = 1.0) -> float:
    """Seconds between two progress lines: `live` on a terminal, `PLAIN_INTERVAL` in a log."""
    return live if on_terminal() else PLAIN_INTERVAL


def progress_bar(iterable: Any = None, **options: Any) -> tqdm:
    """`tqdm(iterable, **options)` on stderr: a live bar on a terminal, else a `PlainBar` (lines, no '\\r').

    `disable=None` (tqdm: off when not a terminal) means on here: a plain bar is what a log should hold."""
    options.setdefault("file", sys.stderr)
    if options.get("disable") is None:
        options["disable"] = False
    if on_terminal(options["file"]):
        return tqdm(iterable, **options)
    return PlainBar(iterable, **options)


class PlainBar(tqdm):
    """A tqdm bar written as lines: one every `PLAIN_INTERVAL` seconds while it moves, one when it closes.

    tqdm decides when to draw (`update`: at most every `mininterval`) and calls `display`; here `display`
    writes the line with a newline instead of redrawing with '\\r', and draws nothing at the start or when asked
    to clear (`tqdm.write`). `close` writes the last line, unless the one before it said the same count or the
    bar ended within its `delay`."""

    def __init__(self, iterable: Any = None, **options: Any):
        self._line_at = time.monotonic()  # no line at the start: the first comes after PLAIN_INTERVAL
        self._shown_n: float | None = None  # the count the last line showed
        options.update(mininterval=PLAIN_INTERVAL, maxinterval=PLAIN_INTERVAL, dynamic_ncols=False, ncols=None)
        options.setdefault("unit", "it")
        total = options.get("total") or (len(iterable) if hasattr(iterable, "__len__") else None)
        options.setdefault("bar_format", PLAIN_FORMAT if total else PLAIN_FORMAT_NO_TOTAL)
        super().__init__(iterable, **options)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg is not None or self.disable or time.monotonic() - self._line_at < PLAIN_INTERVAL * 0.99:
            return False
        self._write_line()
        return True

    def close(self) -> None:
        if not getattr(self, "disable", True) and hasattr(self, "start_t") and self.n != self._shown_n \
                and self._time() - self.start_t >= self.delay:
            self._ema_dt = lambda: None  # the closing line's rate: the whole run's, as tqdm's own last draw
            self._write_line()
        self.leave = False  # tqdm's close then only clears, which draws nothing here
        super().close()

    def _write_line(self) -> None:
        self.fp.write(self.__str__() + "\n")
        self.fp.flush()
        self._line_at, self._shown_n = time.monotonic(), self.n

    def clear(self, nolock: bool = False) -> None:
        pass  # nothing is drawn in place, so there is nothing to wipe before a `tqdm.write` line

    def moveto(self, n: int) -> None:
        pass  # lines only: no cursor movement between nested bars


@contextlib.contextmanager
def plain_stderr() -> Iterator[None]:
    """Hold `sys.stderr` as `PlainLines` while the block runs, unless stderr is a terminal (then: as it is)."""
    if on_terminal() or isinstance(sys.stderr, PlainLines):
        yield
        return
    plain = PlainLines(sys.stderr)
    with contextlib.redirect_stderr(plain):
        try:
            yield
        finally:
            plain.finish()


class PlainLines:
    """A text stream over `stream` that writes a redrawn line ('\\r' ... '\\r' ... '\\n') as plain lines.

    Text without '\\r' is written through at once. From a line's first '\\r' on (a bar drawing itself), what
    follows the last '\\r' is the line's state, as a terminal would show it: written as a line every
    `PLAIN_INTERVAL` seconds while it changes, and at the line's end, unless it is a bar's drawing (written
    with its '\\r') that lived under `QUICK_BAR` seconds. Text written after a bar cleared itself is kept."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.state: str | None = None  # the redrawn line's current text; None: not inside one
        self.started = self.shown_at = 0.0
        self.shown = ""
        self.midline = False  # text written through since the last newline
        self.drawn = False  # the state came with its '\\r' in one write: a bar's drawing, not a program's text

    def write(self, text: str) -> int:
        after_cr = False
        for piece in re.split(r"(\r|\n)", text):
            if piece == "\r":
                if self.state is None:
                    if self.midline:  # what was written of this line stays a line of its own
                        self.stream.write("\n")
                        self.midline = False
                    self.started = self.shown_at = time.monotonic()
                self.state, after_cr = "", True
            elif piece == "\n":
                after_cr = False
                if self.state is None:
                    self.stream.write("\n")
                    self.midline = False
                else:
                    self.end_bar()
            elif piece:
                if self.state is None:
                    self.stream.write(piece)
                    self.midline = True
                else:
                    self.state += CURSOR_CODES.sub("", piece)
                    self.drawn = after_cr
        if self.state is not None and time.monotonic() - self.shown_at >= PLAIN_INTERVAL:
            self.show()
        return len(text)

    def show(self) -> None:
        line = self.state.strip() if self.state else ""
        if line and line != self.shown:
            self.stream.write(line + "\n")
            self.stream.flush()
            self.shown = line
        self.shown_at = time.monotonic()

    def end_bar(self) -> None:
        if not self.drawn or time.monotonic() - self.started >= QUICK_BAR:
            self.show()
        self.state, self.shown = None, ""

    def finish(self) -> None:
        """A bar still drawn when the block ends: its last state, as at a line's end."""
        if self.state is not None:
            self.end_bar()
        self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, buffer...: the stream's own
        return getattr(self.stream, name)
