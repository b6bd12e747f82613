"""The pipe: how steps hand artifacts to each other on stdin and stdout.

A step prints exactly one JSON object on stdout (`print_complete`), `{"<key>": {artifact}, ...}`, and
a summary on stderr. The key is a label: the artifact's type (`print_complete(artifact)`) or the
step's name (`print_complete({"data_curation": artifact})`). The next step finds its input by the
artifact's own `type` field, whatever the key (`find_on_stdin`), and refuses two different artifacts
of that type, naming both keys. `print_complete` passes everything it read on stdin through to its
own stdout next to what it made, so `a | b | c` works even when c needs a's output.

stdin is read once per process (`read_stdin_artifacts`), and only when a step has no explicit input.

A step whose reader has gone away (`a | b | head -c0`, or a later step that failed on a bad flag)
exits quietly with status 141 (128 + SIGPIPE, what a shell reports for `yes | head`), as Unix tools
do, so the step that failed prints the only message (`reader_gone`). A step waiting on stdin notices
too: it waits for its input or for its reader to go, whichever comes first (`wait_for_stdin`).
This module knows artifacts only as pydantic models with `type`, `path`, `scale`, `seed`, `digest` and
`metrics`, so the contract (`nemotron.artifact`) can import it without a cycle.
"""

from __future__ import annotations

import json
import os
import select
import sys

from pydantic import BaseModel

from nemotron.errors import NemotronError

_STDIN: dict[str, dict] | None = None
EXIT_READER_GONE = 141  # 128 + SIGPIPE


def reader_gone() -> None:
    """Exit quietly because stdout's reader has gone: no traceback, and no "Exception ignored ...
    BrokenPipeError" from Python's flush at exit (stdout now points at /dev/null, as the Python docs advise)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_READER_GONE)


def wait_for_stdin() -> None:
    """Block until stdin has data or has ended, or until stdout's reader has gone (then `reader_gone`).

    In `a | b | c --bad-flag`, c fails at once; b would otherwise wait for a, do its work, and only then
    find c gone, while a printed its summary as if all were well. A pipe whose read end has closed
    reports POLLERR to its writer; stdin as a file or a terminal, stdout as a file: nothing to wait for.
    """
    try:
        stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced streams (tests, notebooks): nothing to poll
        return
    poller = select.poll()
    poller.register(stdin, select.POLLIN)
    poller.register(stdout, 0)  # no events asked: only POLLERR / POLLHUP, which poll always reports
    while True:
        for fd, events in poller.poll():
            if fd == stdin:
                return
            if events & select.POLLERR:
                reader_gone()
            poller.unregister(stdout)  # POLLHUP / POLLNVAL: not a pipe we can watch


def read_stdin_artifacts(needed: str = "an artifact", fix: str = "") -> dict[str, dict]:
    """Parse stdin once per process: a JSON object of artifacts, each under a key (a name or its type).

    `fix` says how else to give the input (e.g. "pass the folder ... with --checkpoint-path").
    """
    global _STDIN
    if _STDIN is not None:
        return _STDIN
    fix = fix or "pass the input path (see --help)"
    if sys.stdin is None or sys.stdin.isatty():
        raise NemotronError(f"no input {needed}: stdin is a terminal; pipe in the previous step or {fix}")
    wait_for_stdin()
    text = sys.stdin.read()
    if not text.strip():
        raise NemotronError(
            f"stdin is empty but this step needs {needed}: did the previous step fail? Otherwise {fix}"
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise NemotronError(
            f"stdin is not artifact JSON (line {e.lineno}: {e.msg}): pipe only a nemotron step's stdout"
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise NemotronError(
            "stdin JSON must be an object of artifacts, e.g. {\"checkpoint\": {...}}: pipe only a nemotron "
            "step's stdout"
        )
    _STDIN = data
    return _STDIN


def _stdin_type(key: str, data: dict) -> str:
    """An entry's artifact type: its own `type` field; the key only for an entry that has none."""
    return data.get("type") or key


def find_on_stdin(type_name: str, fix: str = "") -> tuple[str, dict] | None:
    """The (key, JSON) of the stdin artifact of type `type_name`, whatever key the previous step gave it.

    A step may print `{"data_curation": dataset}` (keyed by its own name) or `{"pretraindataset": ...}`;
    the next step looks at each entry's `type`, so the key is only a label. None when no entry has the
    type. Two entries of the type that are different artifacts (another path or digest) are refused,
    naming both keys, rather than guessing which one the user meant.
    """
    found = read_stdin_artifacts(needed=f"a {type_name}", fix=fix)
    fits = {key: data for key, data in found.items() if _stdin_type(key, data) == type_name}
    distinct = {(data.get("path"), data.get("digest")) for data in fits.values()}
    if len(distinct) > 1:
        keys = " and ".join(repr(k) for k in fits)
        raise NemotronError(
            f"stdin carries {len(distinct)} different {type_name} artifacts (keys {keys}); "
            f"{fix or 'pass the one to use by its path (see --help)'}"
        )
    # Prefer the entry keyed by the type itself when the same artifact sits under two keys.
    key = type_name if type_name in fits else next(iter(fits), None)
    return None if key is None else (key, fits[key])


def describe_stdin() -> str:
    """What stdin carries, for an error: each key, with its type where the key is not the type."""
    found = _STDIN or {}
    parts = [key if _stdin_type(key, data) == key else f"{key} (a {_stdin_type(key, data)})"
             for key, data in found.items()]
    return ", ".join(parts) or "nothing"


def print_complete(artifacts: dict[str, BaseModel] | BaseModel) -> None:
    """Write exactly one JSON document on stdout and a short human summary on stderr.

    `artifacts` is one `Artifact` (printed under its type) or a dict of them under keys of the step's
    choosing (e.g. its own name). Artifacts that came in on stdin are passed through, so later steps in
    a pipe can still use them. If stdout's reader has gone, the step exits quietly (`reader_gone`).
    """
    if isinstance(artifacts, BaseModel):
        artifacts = {artifacts.type: artifacts}
    passed = dict(_STDIN or {})
    out = {**passed, **{k: json.loads(a.model_dump_json()) for k, a in artifacts.items()}}
    try:
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone()
    for art in artifacts.values():
        print(summary_table(art), file=sys.stderr)


def summary_table(art: BaseModel) -> str:
    """An artifact in a few lines for stderr: type, scale, seed, path, digest and metrics."""
    lines = [f"── {art.type} ({art.scale}, seed {art.seed}) ──", f"  path    {art.path}"]
    if art.digest:
        lines.append(f"  digest  {art.digest[:16]}")
    for k, v in art.metrics.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        elif isinstance(v, (dict, list)):  # e.g. counts by reason: compact JSON, cut to one line
            text = json.dumps(v, default=str, separators=(", ", ": "))
            v = text if len(text) <= 90 else text[:87] + "..."
        lines.append(f"  {k:<28} {v}")
    return "\n".join(lines)
