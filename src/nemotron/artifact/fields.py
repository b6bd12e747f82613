"""What a step's Config field is to the artifact digest and to a training run's identity.

Each field says it where it is declared:
- content (a plain field, the default): changes what the step makes; in the digest and in the run
  identity a resumed training run must share (`nemotron.training.run.run_settings`);
- a location: its name ends `_dir`, `_path` or `_artifact` (`is_location`). Where things are read or
  written does not change what was made; the CLI's `--x-path` / `--x-artifact` input pair and
  `Artifact.load_input` rely on the same names;
- `execution(default)`: how the step ran (threads, worker processes, `--force`), which gives the same
  bytes: out of the digest and the run identity;
- `bookkeeping(default)`: what a run logs or saves, or how it is launched (`eval_every`, `keep_last`,
  the cluster fields): recorded and digested, but a resumed run may change it;
- `added(default)`: a content knob added to a step after its digests were published: recorded (and
  digested) only when it is set to something else, so its default leaves every earlier digest as it was.
  `recorded(config)` is the step's config as an artifact records it.

A subclass that overrides a field's default declares it again, with its marker:
`eval_every: int = bookkeeping(40)`.

The digest is recomputed from metadata.json alone (`python -m nemotron.artifact verify` imports no
step), so it knows execution fields by name: `EXECUTION_KEYS`, which tests/test_artifact.py checks
against every field declared with `execution(...)` in the source.
"""

from __future__ import annotations

import dataclasses
from typing import Any

ROLE = "nemotron_role"  # the key of a field's dataclass metadata
ADDED = "nemotron_added"  # metadata key of a field recorded only away from its default (`added`)
EXECUTION, BOOKKEEPING = "execution", "bookkeeping"
LOCATION_SUFFIXES = ("_dir", "_path", "_artifact")
# The execution fields by name, for the digest of a saved config (see the module docstring).
EXECUTION_KEYS = frozenset({"workers", "num_threads", "force"})


def execution(default: Any) -> Any:
    """A Config field for how a step runs, not what it makes: out of the digest and the run identity."""
    return dataclasses.field(default=default, metadata={ROLE: EXECUTION})


def bookkeeping(default: Any) -> Any:
    """A Config field for what a run logs or saves, or how it is launched: a resumed run may change it."""
    return dataclasses.field(default=default, metadata={ROLE: BOOKKEEPING})


def added(default: Any) -> Any:
    """A content field added after a step's digests were published: recorded only when not `default`."""
    return dataclasses.field(default=default, metadata={ADDED: True})


def recorded(config: Any) -> dict:
    """`dataclasses.asdict(config)` without each `added` field that holds its default, at any depth."""
    values = dataclasses.asdict(config)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.metadata.get(ADDED) and value == f.default:
            del values[f.name]
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            values[f.name] = recorded(value)
    return values


def is_location(name: str) -> bool:
    """Whether a Config key names a location (`*_dir`, `*_path`, `*_artifact`)."""
    return name.endswith(LOCATION_SUFFIXES)


def role(field: dataclasses.Field) -> str | None:
    """A field's declared role: `EXECUTION`, `BOOKKEEPING`, or None (content or, by its name, a location)."""
    return field.metadata.get(ROLE)


def part_of_the_run(config: Any) -> list[str]:
    """The fields of a Config dataclass (instance or class) that make a training run what it is: neither
    locations nor declared `execution` / `bookkeeping`."""
    return [f.name for f in dataclasses.fields(config) if not is_location(f.name) and role(f) is None]
