"""Locations: where an artifact's files are, absolute in memory and relative to the folder on disk.

An artifact folder holds `metadata.json` (`METADATA`) next to the files it vouches for. In memory and
on stdout every path is absolute, so an artifact works from any working directory. In metadata.json
every path inside the folder is written `./name` and an input artifact under the same root as
`../step`; they are resolved against wherever the folder is when it is read (`read_metadata`), so a
moved or copied runs/ tree keeps working and reads its own files. Paths elsewhere (raw sources, a base
model on shared storage) stay absolute.

File fields are typed `ArtifactPath` (a plain `Path` field means the same): a file or folder checked when
the artifact is saved and loaded, and whose content the digest covers (one that does not exist at save is
recorded in `missing_files` instead: `Artifact.record_missing_files`). `ArtifactPrefix`
names a set of files by their stem (bin/idx shards): relocated like the others, its files listed by
the class's `files()`. `mark_unfinished(output_dir)` removes a folder's metadata.json
before a step rewrites its files, so no artifact ever vouches for half-written or mixed files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from nemotron.errors import NemotronError

METADATA = "metadata.json"
LOCK = ".lock"  # the run lock of a step's output folder (nemotron.artifact.lock): not content


class _MustExist:
    """Marker on `ArtifactPath` fields; `Artifact.files()` collects them for checks and digests."""


class _Prefix:
    """Marker on `ArtifactPrefix` fields: the stem of files the class's `files()` lists, not a file itself."""


ArtifactPath = Annotated[Path, _MustExist()]
# The common stem of a set of files (`shards/train_00000` for its .bin and .idx): relocated with the
# folder and named in the digest, but neither checked nor hashed itself; the class's `files()` adds
# the files it stands for.
ArtifactPrefix = Annotated[Path, _Prefix()]


def _markers(field: Any) -> list[Any]:
    """The `Annotated` markers on a pydantic field, on the field itself or on its item type."""
    found = list(field.metadata)
    for arg in getattr(field.annotation, "__args__", ()):  # list[ArtifactPath], ArtifactPath | None
        found += getattr(arg, "__metadata__", ())
    return found


def _holds_path(annotation: Any) -> bool:
    if annotation is Path:
        return True
    return any(_holds_path(arg) for arg in getattr(annotation, "__args__", ()))


def is_file_field(field: Any) -> bool:
    """Whether a pydantic field names files the artifact vouches for: an `ArtifactPath`, or a plain `Path`
    (`Path | None`, `list[Path]`), which is taken to mean the same; not an `ArtifactPrefix`."""
    markers = _markers(field)
    if any(isinstance(m, _Prefix) for m in markers):
        return False
    return any(isinstance(m, _MustExist) for m in markers) or _holds_path(field.annotation)


def file_fields(model_fields: dict[str, Any]) -> list[str]:
    """The names of the file fields of an artifact class (`is_file_field`), except the base `path`."""
    return [name for name, field in model_fields.items() if name != "path" and is_file_field(field)]


def location_fields(model_fields: dict[str, Any]) -> list[str]:
    """The fields holding paths (`Path`, `ArtifactPath`, `ArtifactPrefix`, lists and optionals), except `path`."""
    return [
        name for name, field in model_fields.items()
        if name != "path" and (is_file_field(field) or _holds_path(field.annotation))
    ]


def mark_unfinished(output_dir: str | Path) -> Path:
    """Create a step's output folder if needed and remove its metadata.json; returns the folder.

    The rule every step keeps: a folder whose files are being (re)written holds no metadata.json,
    so no artifact ever vouches for half-written or mixed files. Call it before the first write;
    `Artifact.save()` writes metadata.json again when the step has finished.
    """
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / METADATA).unlink(missing_ok=True)
    return folder


def metadata_file(path: str | Path) -> Path:
    """`<path>/metadata.json`; a path to metadata.json itself stays as it is."""
    path = Path(path)
    return path if path.name == METADATA else path / METADATA


def read_metadata(path: str | Path, fix: str = "") -> dict:
    """The JSON of `<path>/metadata.json` with its locations resolved against the folder it is in now.

    `path` becomes the folder's absolute path; values written relative (`./file`, `../step`, at the
    top level and in `inputs`) become absolute. Errors say whether the folder does not exist or
    holds no artifact; `fix` is appended to them.
    """
    meta = metadata_file(path)
    folder = meta.parent
    fix = f"; {fix}" if fix else ""
    if not folder.exists():
        raise NemotronError(f"{folder} does not exist{fix or '; check the path'}")
    if not folder.is_dir():
        raise NemotronError(f"{folder} is a file, not an artifact folder{fix or '; pass the folder a step wrote'}")
    if not meta.exists():
        raise NemotronError(
            f"{folder} holds no artifact (metadata.json missing: the step writing it has not finished, "
            f"or this is not a step's output folder){fix}"
        )
    try:
        data = json.loads(meta.read_text())
    except json.JSONDecodeError as e:
        raise NemotronError(f"{meta}: malformed JSON at line {e.lineno}: {e.msg}") from None
    if isinstance(data, dict):
        _resolve_locations(data, folder.resolve())
    return data


def _is_relative(value: Any) -> bool:
    return isinstance(value, str) and (value in (".", "..") or value.startswith(("./", "../")))


def _resolve_locations(data: dict, folder: Path) -> None:
    """In place: `path` is `folder`; every `./x` or `../x` value (top level, lists, inputs) is
    resolved against it. Older metadata with absolute paths loads unchanged."""
    data["path"] = str(folder)

    def resolve(value: Any) -> Any:
        if _is_relative(value):
            return os.path.normpath(folder / value)
        if isinstance(value, list):
            return [resolve(v) for v in value]
        return value

    for key, value in data.items():
        if key not in ("path", "config", "inputs", "metrics", "producer"):
            data[key] = resolve(value)
    for ref in data.get("inputs") or []:
        if isinstance(ref, dict):
            ref["path"] = resolve(ref.get("path"))


def portable(data: dict, folder: Path, locations: list[str]) -> dict:
    """In place and returned: an artifact's JSON as metadata.json holds it. `path` is `.`, the
    `locations` fields inside `folder` are `./name` (in another artifact's folder under the same root,
    `../step/name`), and inputs that are artifact folders under the same root are `../step`, so that
    `mv` or `cp -r` of a runs/ tree keeps every reference valid."""
    data["path"] = "."
    for name in locations:
        value = data.get(name)
        if isinstance(value, list):
            data[name] = [_inside(v, folder) for v in value]
        elif value is not None:
            data[name] = _inside(value, folder)
    for ref in data["inputs"]:
        if (Path(ref["path"]) / METADATA).exists() and _share_a_root(Path(ref["path"]), folder):
            ref["path"] = _relative(Path(ref["path"]), folder)
    return data


def _relative(target: Path, folder: Path) -> str:
    rel = os.path.relpath(target, folder)
    return rel if rel.startswith("..") else f"./{rel}"


def _inside(value: str, folder: Path) -> str:
    """`./name` for a path inside `folder`, `../step/name` for a file of another artifact under the same
    root (a tokenizer a sibling step made); anything else stays as it is (absolute)."""
    path = Path(value)
    if not path.is_absolute():
        return value
    if path.is_relative_to(folder):
        return _relative(path, folder)
    owner = next((p for p in path.parents if (p / METADATA).exists()), None)
    return _relative(path, folder) if owner is not None and _share_a_root(owner, folder) else value


def _share_a_root(a: Path, b: Path) -> bool:
    """Two paths under a common folder other than the file-system root (e.g. one runs/ tree)."""
    try:
        common = Path(os.path.commonpath([a, b]))
    except ValueError:  # different drives
        return False
    return common != Path(common.anchor)
