"""The command line of every step: parse its Config, run main, print the artifact, or fail in one line.

A step file ends with

    if __name__ == "__main__":
        run(main)

which is `tyro.cli(Config)` (flags from the dataclass fields and their docstrings; the module
docstring is the --help text; `run(main, presets=...)` adds `--preset NAME`, see `parse_flags`), then
`main(config)` while holding the lock of `config.output_dir` (one run per output folder:
`nemotron.artifact.lock`), then `print_complete(...)` on stdout. The
parsed Config is what the artifacts the step saves record as their `config` when the step gives none
(`nemotron.artifact.provenance.set_step_config`).

Failing, a step says one line and stops the pipe instead of feeding garbage to the next step:
- a `NemotronError` anywhere: `error: <one line>` on stderr, exit status 2, nothing on stdout;
- a bad flag: tyro's error box reduced to one line, with tyro's close match if it has one
  (`error: unrecognized options: --stepz (did you mean --steps?); see --help`), exit status 2;
  `--help` prints the full help as before;
- stdout's reader gone (a later step in the pipe failed): nothing at all, exit status 141
  (`nemotron.artifact.pipe.reader_gone`), so the failed step's line is the only message.

In a log (stderr not a terminal), what the step writes to stderr goes through `nemotron.progress.plain_stderr`:
a library's progress bar redrawn with carriage returns becomes a few plain lines (a line every 10 s, and its
last state), so `make demo 2> log` reads line by line.

The command-line tools that make no artifact (`python -m nemotron.chat`, `nemotron.serve`, `nemotron.trace`,
`nemotron.artifact`) fail the same way through the same wrapper: `run_tool(main)`, or `one_line_errors()`
around their own parsing. A boolean option is a plain switch everywhere (`--history`, `--no-history`):
tyro makes `--x` / `--no-x` of a `bool` field; a `bool | None` would want a value (tests/test_cli_tools.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import json
import re
import sys
import typing
from collections.abc import Callable, Iterator
from typing import Any

import tyro

from nemotron.artifact import SCALES, Artifact, print_complete
from nemotron.artifact.fields import recorded
from nemotron.artifact.lock import hold_output_dir
from nemotron.artifact.provenance import set_step_config
from nemotron.errors import EXIT_BAD_INPUT, NemotronError, one_line, print_error
from nemotron.progress import plain_stderr
from nemotron.trackers import get_lineage_tracker


def per_scale(what: str, table: dict[str, Any]) -> Any:
    """A flag's help written from the table its default comes from, so the help cannot name another
    figure: `steps: per_scale("Optimizer steps", STEPS) = None` reads "Optimizer steps; default per scale
    (tiny 150, small 2000, ...)" in --help. The field's type is `int | None`, as a per-scale default is."""
    figures = ", ".join(f"{scale} {value}" for scale, value in table.items())  # no 2,000: help wraps at commas
    return typing.Annotated[int | None, tyro.conf.arg(help=f"{what}; default per scale ({figures}).")]


def check_scale(config: Any) -> None:
    """Reject an unknown scale before any work starts, in nested configs too."""
    scale = getattr(config, "scale", None)
    if scale is not None and scale not in SCALES:
        raise NemotronError(f"unknown scale {scale!r}: use --scale with one of {', '.join(SCALES)}")
    for value in vars(config).values() if hasattr(config, "__dataclass_fields__") else ():
        if hasattr(value, "__dataclass_fields__"):
            check_scale(value)


def parse(main: Callable[[Any], Any], args: list[str] | None = None, presets: dict[str, Any] | None = None) -> Any:
    """Build the step's Config from the command line (the type of main's first parameter)."""
    first = next(iter(inspect.signature(main).parameters))
    config_type = typing.get_type_hints(main)[first]
    doc = sys.modules[main.__module__].__doc__
    return parse_flags(config_type, args, description=doc, presets=presets)


def parse_flags(config_type: type, args: list[str] | None = None, description: str | None = None,
                presets: dict[str, Any] | None = None) -> Any:
    """`tyro.cli(config_type)`, with a bad flag reported as one `error:` line (exit 2), not tyro's box.

    `presets` ({name: a Config}): a step whose Config has a `preset` field starts from the named Config when
    `--preset NAME` is given; every flag given beside it still wins (tyro's `default=`)."""
    config = _tyro_cli(config_type, args, description)
    name = getattr(config, "preset", None)
    if presets and name is not None:
        config = _tyro_cli(config_type, args, description, default=dataclasses.replace(presets[name], preset=name))
    return config


def _tyro_cli(config_type: type, args: list[str] | None, description: str | None, default: Any = None) -> Any:
    captured = io.StringIO()
    defaults = {} if default is None else {"default": default}
    try:
        with contextlib.redirect_stderr(captured):
            config = tyro.cli(config_type, args=args, description=description, **defaults)
    except SystemExit as e:
        if e.code not in (0, None):
            print_error(usage_error(captured.getvalue()))
            sys.exit(EXIT_BAD_INPUT)
        sys.stderr.write(captured.getvalue())
        raise
    sys.stderr.write(captured.getvalue())  # a warning tyro printed on the way
    return config


def usage_error(box: str) -> str:
    """tyro's error box in one line: its first paragraph under the title, the first flag under "Perhaps
    you meant:" as "did you mean", and "see --help".

        ╭─ Unrecognized options ──────────╮
        │ Unrecognized options: --stepz   │      ->  unrecognized options: --stepz
        │ ─────────────────────────────── │          (did you mean --steps?); see --help
        │ Perhaps you meant:              │
        │     --steps INT                 │
        │ ...                             │
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", box)  # colours, when stdout is a terminal
    rows = [line.strip().strip("│╭╮╰╯|").strip() for line in text.splitlines()]
    # A rule: a line of ─ (the top border, with the title in it) or of - (tyro without UTF-8).
    rules = [i for i, row in enumerate(rows) if row.startswith("─") or (row and set(row) == {"-"})]
    paragraphs: list[list[str]] = [[]]
    for i in range(rules[0] + 1 if rules else 0, len(rows)):  # what follows the title
        if i in rules:
            paragraphs.append([])
        elif rows[i]:
            paragraphs[-1].append(rows[i])
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        return "bad command-line flags; see --help"
    message = " ".join(paragraphs[0]).removeprefix("error:").strip().rstrip(".")
    message = message[:1].lower() + message[1:]
    for paragraph in paragraphs[1:]:
        if paragraph[0].startswith("Perhaps you meant") and len(paragraph) > 1:
            message += f" (did you mean {paragraph[1].split()[0]}?)"
            break
    return f"{message}; see --help"


# Called after a successful run, in order, once the artifacts are printed: what an orchestrator wants a
# person to read last (nemotron.recipes.orchestration adds its one-line summary here).
AT_END: list[Callable[[], None]] = []


@contextlib.contextmanager
def one_line_errors(interrupted: str = "interrupted") -> Iterator[None]:
    """An error users see inside (a `NemotronError`, or the read of a file an artifact recorded missing:
    `errors.one_line` decides, as for a bare `tyro.cli(main)` step): `error: <its line>` on stderr and exit
    status 2; Ctrl-C: `error: <interrupted>` and exit status 130. No traceback either way; any other error
    keeps its own."""
    try:
        yield
    except Exception as e:
        line = one_line(e)
        if line is None:
            raise
        print_error(line)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        print_error(interrupted)
        sys.exit(130)


def run_tool(main: Callable[[Any], Any], args: list[str] | None = None) -> None:
    """A command-line tool that makes no artifact (chat, serve): its Config from the flags, then `main`, with
    one-line errors."""
    with plain_stderr(), one_line_errors():
        main(parse(main, args))


def run(main: Callable[[Any], Artifact | dict[str, Artifact]], args: list[str] | None = None,
        presets: dict[str, Any] | None = None) -> None:
    with plain_stderr(), one_line_errors("interrupted; re-run the same command to resume"):
        config = parse(main, args, presets)
        check_scale(config)
        if dataclasses.is_dataclass(config):
            set_step_config(json.loads(json.dumps(recorded(config), default=str)))
        with hold_output_dir(getattr(config, "output_dir", None)):
            made = main(config)
        print_complete(made)
        get_lineage_tracker().finish()  # flush a W&B run; a no-op for the others
        for hook in AT_END:
            hook()
