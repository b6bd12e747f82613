"""Is a step's output up to date? And if not, the one reason why, in words a person can act on.

A step's output folder is up to date when it holds an artifact that
- is intact: metadata.json reads, its files exist and still match its digest;
- was made with the same settings: the saved config equals the one asked for, both seen as the digest
  sees them (`nemotron.artifact.digest.without_locations`): location keys (`*_dir`, `*_path`,
  `*_artifact`) and execution keys (`workers`, `num_threads`, `force`) are left out at every depth, so
  a run folder that was copied or moved (its config still names the old folders) is the same run;
- was made from these very inputs: each input's (type, digest) is among the recorded ones. A digest
  does not depend on where the artifact lives either, so a copied upstream step still matches.

`up_to_date(cls, config, inputs)` returns the artifact, or None and the cause: the settings that
changed (`training.lr 0.001 -> 0.002`), the input whose digest changed (its type and both short
digests), or why the saved artifact no longer verifies. `Artifact.reuse` is its first half.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from nemotron.artifact.digest import without_locations
from nemotron.artifact.fields import recorded
from nemotron.artifact.locations import METADATA
from nemotron.errors import NemotronError

SHORT = 12  # the digest prefix a message shows


def identity(config: Any) -> dict:
    """A step config (dataclass or saved dict) as the up-to-date check compares it: plain JSON values,
    without location and execution keys at any depth."""
    values = recorded(config) if dataclasses.is_dataclass(config) else config
    return without_locations(json.loads(json.dumps(values, default=str)))


def changed_settings(saved: Any, wanted: Any, prefix: str = "") -> list[str]:
    """`key old -> new` for every value that differs, nested keys dotted (`data_curation.num_shards 4 -> 8`)."""
    if isinstance(saved, dict) and isinstance(wanted, dict):
        return [change for key in sorted(set(saved) | set(wanted))
                for change in changed_settings(saved.get(key), wanted.get(key), f"{prefix}{key}.")]
    if saved == wanted:
        return []
    return [f"{prefix.rstrip('.')} {saved!r} -> {wanted!r}"]


def changed_inputs(recorded: list[Any], inputs: list[Any]) -> list[str]:
    """For each input not recorded with its digest: `input TYPE OLD -> NEW` (or `new input TYPE NEW`)."""
    given = {(inp.type, inp.digest) for inp in inputs}
    causes = []
    for inp in inputs:
        if (inp.type, inp.digest) in {(ref.type, ref.digest) for ref in recorded}:
            continue
        before = [ref.digest for ref in recorded if ref.type == inp.type and (ref.type, ref.digest) not in given]
        if before:
            causes.append(f"input {inp.type} changed {short(before[0])} -> {short(inp.digest)}")
        else:
            causes.append(f"new input {inp.type} {short(inp.digest)}")
    return causes


def short(digest: str | None) -> str:
    return digest[:SHORT] if digest else "none"


def up_to_date(cls: Any, config: Any, inputs: list[Any] = ()) -> tuple[Any | None, str]:
    """(the artifact in `config.output_dir`, "") when it is up to date; (None, cause) otherwise.

    `cls` is the Artifact class the step makes; the cause is "" when the folder holds no artifact
    (a first run, or an interrupted one), since nothing is being replaced.
    """
    folder = Path(config.output_dir)
    if not (folder / METADATA).exists():
        return None, ""
    try:
        art = cls.from_path(folder)
        art.verify()
    except NemotronError as e:
        return None, str(e)
    changes = changed_settings(identity(art.config), identity(config))
    if changes:
        return None, f"settings changed: {'; '.join(changes)}"
    moved = changed_inputs(art.inputs, list(inputs))
    if moved:
        return None, "; ".join(moved)
    return art, ""
