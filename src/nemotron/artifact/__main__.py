"""Inspect saved artifacts.

    python -m nemotron.artifact show PATH      # the metadata, pretty-printed (paths resolved)
    python -m nemotron.artifact lineage PATH   # the tree of inputs, back to the raw sources
    python -m nemotron.artifact verify PATH    # recompute the digests, check every referenced file
    python -m nemotron.artifact diff A B [--json]   # what differs, and the first step where lineages part
    python -m nemotron.artifact browse RUNS -o runs.html   # one HTML page: lineage graph, metrics, diffs

PATH is an artifact folder (the one holding metadata.json). `verify` reads the files the artifact
will actually be read from (its own folder's, also after a move or a copy) and exits 1 at the first
mismatch: a file whose content changed since the artifact was saved, or an input whose digest no
longer matches what the consumer recorded. Errors (no artifact there, an invalid field, a missing
file) exit 2 with one line, like every step.

`diff` takes two artifact folders or two run folders (artifacts paired by their path below each) and
prints, kept apart, type, config (old -> new), locations, content (files by digest; "data identical"),
inputs, metrics with deltas and producer facts, and the first upstream step whose digest differs
(`nemotron.artifact.diff`); exit 0 when identical, 1 when they differ. `browse` writes one
self-contained page (no server, no network) for every artifact under RUNS (`nemotron.artifact.browse`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from nemotron.artifact.browse import write_page
from nemotron.artifact.diff import diff_paths, render
from nemotron.artifact.lineage import Mismatch, lineage_lines, read_metadata, verify_tree
from nemotron.cli import one_line_errors

EXIT_MISMATCH = 1


@dataclass
class Show:
    """Print an artifact's metadata.json, with its paths resolved against where the folder is now."""

    path: tyro.conf.Positional[Path]
    """The artifact folder (holding metadata.json)."""


@dataclass
class Lineage:
    """Print the tree of an artifact's inputs, one line each (type, digest, path), back to the sources."""

    path: tyro.conf.Positional[Path]
    """The artifact folder (holding metadata.json)."""


@dataclass
class Verify:
    """Recompute the digest of an artifact and of every artifact input behind it; exit 1 on a mismatch."""

    path: tyro.conf.Positional[Path]
    """The artifact folder (holding metadata.json)."""


@dataclass
class Diff:
    """Compare two artifacts or two runs: what differs, and the first step at which their lineages part."""

    a: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="A")]]
    """The old side: an artifact folder, or a run folder (artifact folders below it)."""
    b: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="B")]]
    """The new side, of the same kind as A."""
    json: tyro.conf.FlagCreatePairsOff[bool] = False
    """Print the report as JSON (for scripts) instead of text."""


@dataclass
class Browse:
    """Write one self-contained HTML page of every artifact under RUNS: lineage graph, details, diffs."""

    runs: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="RUNS")]]
    """A folder with artifact folders below it (one run, or many)."""
    output: Annotated[Path, tyro.conf.arg(aliases=("-o",))] = Path("runs.html")
    """The HTML file to write."""


Command = (
    Annotated[Show, tyro.conf.subcommand("show")]
    | Annotated[Lineage, tyro.conf.subcommand("lineage")]
    | Annotated[Verify, tyro.conf.subcommand("verify")]
    | Annotated[Diff, tyro.conf.subcommand("diff")]
    | Annotated[Browse, tyro.conf.subcommand("browse")]
)


def main(args: list[str] | None = None) -> int:
    command = tyro.cli(Command, args=args, prog="python -m nemotron.artifact", description=__doc__)
    with one_line_errors():  # a NemotronError: `error: ...`, exit 2
        try:
            if isinstance(command, Show):
                print(json.dumps(read_metadata(command.path), indent=2))
            elif isinstance(command, Lineage):
                print("\n".join(lineage_lines(command.path)))
            elif isinstance(command, Diff):
                report = diff_paths(command.a, command.b)
                print(json.dumps(report, indent=2) if command.json else "\n".join(render(report)))
                return 0 if report["identical"] else EXIT_MISMATCH
            elif isinstance(command, Browse):
                written = write_page(command.runs, command.output)
                print(f"wrote {written}", file=sys.stderr)
            else:
                checked = verify_tree(command.path)
                print(f"ok  {checked[0].type}  {checked[0].digest}  ({len(checked)} artifacts checked)",
                      file=sys.stderr)
        except Mismatch as e:
            print(f"mismatch: {e}", file=sys.stderr)
            return EXIT_MISMATCH
    return 0


if __name__ == "__main__":
    sys.exit(main())
