"""The command line of every step: parse its Config, run main, print the artifact, or fail in one line.

A step file ends with

    if __name__ == "__main__":
        run(main)

which is `tyro.cli(Config)` (flags from the dataclass fields and their docstrings; the module
docstring is the --help text), then `main(config)` while holding the lock of `config.output_dir`
(one run per output folder: `nemotron.artifact.lock`), then `print_complete(...)` on stdout. A
`NemotronError` anywhere becomes `error: <one line>` on stderr and exit status 2, with nothing on
stdout, so a broken pipe stage stops the pipe instead of feeding garbage to the next step.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable
from typing import Any

import tyro

from nemotron.artifact import SCALES, Artifact, print_complete
from nemotron.artifact.lock import hold_output_dir
from nemotron.errors import NemotronError
from nemotron.trackers import get_lineage_tracker

EXIT_BAD_INPUT = 2


def check_scale(config: Any) -> None:
    """Reject an unknown scale before any work starts, in nested configs too."""
    scale = getattr(config, "scale", None)
    if scale is not None and scale not in SCALES:
        raise NemotronError(f"unknown scale {scale!r}: use --scale with one of {', '.join(SCALES)}")
    for value in vars(config).values() if hasattr(config, "__dataclass_fields__") else ():
        if hasattr(value, "__dataclass_fields__"):
            check_scale(value)


def parse(main: Callable[[Any], Any], args: list[str] | None = None) -> Any:
    """Build the step's Config from the command line (the type of main's first parameter)."""
    first = next(iter(inspect.signature(main).parameters))
    config_type = typing.get_type_hints(main)[first]
    doc = sys.modules[main.__module__].__doc__
    return tyro.cli(config_type, args=args, description=doc)


# Called after a successful run, in order, once the artifacts are printed: what an orchestrator wants a
# person to read last (nemotron.recipes.orchestration adds its one-line summary here).
AT_END: list[Callable[[], None]] = []


def run(main: Callable[[Any], Artifact | dict[str, Artifact]], args: list[str] | None = None) -> None:
    try:
        config = parse(main, args)
        check_scale(config)
        with hold_output_dir(getattr(config, "output_dir", None)):
            made = main(config)
        print_complete(made)
        get_lineage_tracker().finish()  # flush a W&B run; a no-op for the others
        for hook in AT_END:
            hook()
    except NemotronError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        print("error: interrupted; re-run the same command to resume", file=sys.stderr)
        sys.exit(130)
