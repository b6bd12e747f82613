"""The artifacts an input was made from: find a step's upstream input by path, pipe, or lineage.

`load_upstream(cls, ...)` finds an input that another input was made from: the dataset a checkpoint
was trained on, the model it was fine-tuned from. An evaluation must score the held-out split of the
very data the checkpoint was trained on, so it looks, in order, at:
  1. an explicit `--<name>-path` or `--<name>-artifact`;
  2. the artifacts on stdin, when the checkpoint itself came down the pipe
     (`data_curation | training | evaluation` passes every artifact through);
  3. the lineage: the `inputs` the checkpoint (or another given artifact) recorded when it was saved.
Stdin is only consulted once the pipe has been read for the checkpoint, so a step given paths never
waits on a terminal or an idle pipe. An input found in the lineage must still have the digest that
was recorded: if it was re-made since, the held-out split may have moved into training, and the step
refuses. An input given explicitly that differs from the recorded one is allowed but warned about.
`load_upstream_input(cls, config, name, made_from)` does the same for an input a step's Config names
with its `--<name>-path` / `--<name>-artifact` pair, as `Artifact.load_input` does for the first input.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from nemotron.artifact import Artifact, find_on_stdin
from nemotron.errors import NemotronError

A = TypeVar("A", bound=Artifact)


def load_upstream(
    cls: type[A],
    *,
    path: Path | None,
    tracked_artifact: str | None,
    scale: str,
    made_from: Sequence[Artifact],
    stdin: bool,
    flag: str = "--<input>-path",
) -> A:
    """The `cls` artifact behind `made_from`: explicit path/tracked artifact, else stdin, else recorded lineage.

    `stdin=True` says the pipe has already been read (the checkpoint came from it), so looking there
    cannot block. `made_from` are searched in order for an input of type `cls`. `flag` is the step's
    command-line flag for this input, named in error messages.
    """
    name = cls.type_name()
    recorded = [ref for art in made_from for ref in art.inputs if ref.type == name]
    if path is not None or tracked_artifact is not None:
        found = cls.load(path=path, tracked_artifact=tracked_artifact, scale=scale, flag=flag)
    elif stdin and find_on_stdin(name, fix=f"pass its folder with {flag}") is not None:
        found = cls.load(scale=scale, flag=flag)
    elif recorded:
        ref = recorded[0]
        found = cls.load(path=ref.path, scale=scale)
        if ref.digest is not None and found.digest != ref.digest:
            raise NemotronError(
                f"{ref.path}: this {name} was re-made after {made_from[0].path} was trained on it (digest "
                f"{(found.digest or '')[:12]} != recorded {ref.digest[:12]}); re-run training, or pass the "
                f"{name} to use explicitly with {flag}"
            )
        return found
    else:
        where = ", ".join(str(art.path) for art in made_from)
        raise NemotronError(
            f"no {name} given and none recorded in the inputs of {where}; pass its folder with {flag}"
        )
    if recorded and all(ref.digest not in (None, found.digest) for ref in recorded):
        print(
            f"warning: {found.path} is not the {name} recorded in the lineage of {made_from[0].path}; "
            "its held-out split may overlap what the model was trained on",
            file=sys.stderr,
        )
    return found


def load_upstream_input(cls: type[A], config: Any, name: str, made_from: Sequence[Artifact]) -> A:
    """`load_upstream` for the input `name` of a step's Config: `config.<name>_path` (flag
    --<name>-path), else `config.<name>_artifact`, else stdin when the checkpoint came down the pipe
    (`config.piped`, see `nemotron.evaluation.settings`), else the lineage of `made_from`."""
    return load_upstream(
        cls,
        path=getattr(config, f"{name}_path"),
        tracked_artifact=getattr(config, f"{name}_artifact", None),
        scale=config.scale,
        made_from=made_from,
        stdin=config.piped,
        flag=f"--{name.replace('_', '-')}-path",
    )
