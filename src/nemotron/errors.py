"""The one exception type users see, and how an uncaught one is shown.

Every error we raise on bad input is a `NemotronError` whose message is one line that says what was
wrong, where (file, field, line), and how to fix it. The CLI entry point (`nemotron.cli.run`) prints
it as `error: <message>` on stderr and exits with status 2, so a user never has to read a traceback
to learn that they passed the wrong path.

A step written as the recipe guide writes it ends with a bare `tyro.cli(main)`, outside `run`. For it,
`report_in_one_line` (installed when `nemotron.artifact` is imported) makes Python's handler of an
uncaught exception do the same: an uncaught `NemotronError` is one `error:` line and exit status 2; so is
the `FileNotFoundError` of a step that opens a file an artifact recorded missing when it was saved
(`expect_missing`, `Artifact.missing_files`). Every other exception keeps its traceback, and an
interactive session is never ended.
"""

import atexit
import os
import sys

EXIT_BAD_INPUT = 2


class NemotronError(Exception):
    """A user-facing error: one line naming what was wrong, where, and the fix."""


_MISSING: dict[str, str] = {}  # resolved path -> why it is missing (the artifact and field that named it)


def expect_missing(path, why: str) -> None:
    """Remember that `path` was recorded missing by a loaded artifact: opening it is refused in one line."""
    for name in {os.path.abspath(path), os.path.realpath(path)}:
        _MISSING[name] = why


def one_line(error: BaseException) -> str | None:
    """The one line an uncaught error is reported as, or None for an error that keeps its traceback."""
    if isinstance(error, NemotronError):
        return str(error)
    if isinstance(error, FileNotFoundError):  # Python's own names the file; pyarrow's says it in words
        named = getattr(error, "filename", None)
        for path, why in _MISSING.items():
            if (named and os.path.abspath(named) == path) or path in str(error):
                return f"{why}, and this step reads it ({path}): make that step write it, or do not read it"
    return None


def print_error(line: str) -> None:
    """The one way a user-facing error is shown: `error: <line>` on stderr (`cli.one_line_errors`, `_hook`)."""
    print(f"error: {line}", file=sys.stderr)


_PREVIOUS = [sys.excepthook]  # the handler an error that keeps its traceback goes to


def _hook(kind, error, tb):
    line = one_line(error)
    if line is None:
        return _PREVIOUS[0](kind, error, tb)
    print_error(line)
    if sys.flags.interactive or hasattr(sys, "ps1"):
        return None
    # Python exits 1 after an uncaught exception; a bad input exits 2, after the usual exit handlers.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    atexit._run_exitfuncs()
    os._exit(EXIT_BAD_INPUT)


def report_in_one_line() -> None:
    """Show an uncaught `NemotronError` (or a read of a file recorded missing) as one line, exit status 2."""
    if sys.excepthook is not _hook:
        _PREVIOUS[0] = sys.excepthook
        sys.excepthook = _hook
