"""Digests: the content hash that says two runs made the same thing.

An artifact's digest is sha256 over one canonical JSON document of what it is:
- `type` and every field that says what was made: `scale`, `seed`, `schema_version` and the
  subclass's typed fields (counts, losses, names...), JSON-normalised, with each location (a
  `Path`, `ArtifactPath`, `ArtifactPrefix` field) written as its name relative to the artifact folder
  (its bare name outside it), never as an absolute path;
- each referenced file's sha256 under its name relative to the artifact folder (`file_hashes`);
- the config without location keys (`*_dir`, `*_path`, `*_artifact`: where things were read or
  written does not change what was made) nor execution keys (`workers`, `num_threads`, `force`;
  `nemotron.artifact.fields` says how a Config field declares it);
- the (type, digest) of each input.
Left out: where (`path`), when (`created_at`), who (`producer`), how fast (`metrics`, which hold wall
times). So two artifacts that differ in type or in any of those fields never share a digest, equal
ones always do, and a copied or moved folder keeps its digest (tests/test_artifact_digest_property.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nemotron.artifact.fields import EXECUTION_KEYS, is_location
from nemotron.artifact.locations import LOCK, METADATA


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def files_under(path: Path) -> list[Path]:
    """A file is itself; a folder is every file under it, in sorted order (not metadata.json nor the lock)."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.name not in (METADATA, LOCK))
    return [path]


def relative_name(f: Path, root: Path) -> str:
    """`f`'s name relative to `root` (its bare name outside it): what the digest records for a location."""
    try:
        return str(Path(f).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return Path(f).name


def file_hashes(files: Iterable[Path], root: Path) -> dict[str, str]:
    """The sha256 of each file under `files`, by its name relative to `root`; a folder outside `root`
    names its files under the folder's own name (`base_model/config.json`)."""
    hashes = {}
    for ref in files:
        ref = Path(ref)
        base = root if ref.resolve().is_relative_to(Path(root).resolve()) else ref.resolve().parent
        for f in files_under(ref):
            hashes[relative_name(f, base)] = sha256_file(f)
    return hashes


def files_changed(saved: dict[str, str], now: dict[str, str]) -> str:
    """What differs between two `file_hashes`, for an error: "model/x.bin changed, notes.txt added"."""
    def what(name: str) -> str:
        return "added" if name not in saved else "missing" if name not in now else "changed"

    return ", ".join(f"{name} {what(name)}" for name in sorted(saved.keys() | now.keys())
                     if saved.get(name) != now.get(name))


def files_digest(files: Iterable[Path], root: Path, h: Any = None) -> Any:
    """Feed each file under `files` (name relative to `root`, then its sha256) into a sha256; returns it."""
    h = h or hashlib.sha256()
    for name, sha in file_hashes(files, root).items():
        h.update(f"{name}\0{sha}\n".encode())
    return h


def without_locations(config: Any) -> Any:
    """The config as the digest sees it: location and execution keys removed, at every depth."""
    if isinstance(config, dict):
        return {
            k: without_locations(v)
            for k, v in config.items()
            if not (is_location(k) or k in EXECUTION_KEYS)
        }
    if isinstance(config, list):
        return [without_locations(v) for v in config]
    return config


def with_location_names(fields: dict, root: Path, locations: Iterable[str]) -> dict:
    """`fields` (JSON values) with each location field's path(s) replaced by its name relative to `root`."""
    named = dict(fields)
    for name in locations:
        value = named.get(name)
        if isinstance(value, list):
            named[name] = [relative_name(Path(v), root) for v in value]
        elif value is not None:
            named[name] = relative_name(Path(value), root)
    return named


def content_digest(fields: dict, files: dict[str, str], config: dict, inputs: Iterable[tuple[str, str | None]]) -> str:
    """The artifact digest: its identifying fields (locations already named, `with_location_names`), its
    files' hashes (`file_hashes`), its config without locations, its inputs' (type, digest)."""
    document = {
        "fields": fields,
        "files": files,
        "config": without_locations(config),
        "inputs": [[type_, digest] for type_, digest in inputs],
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()
