"""Digests: the content hash that says two runs made the same thing.

An artifact's digest is sha256 over (a) each referenced file's sha256 with its name relative to the
artifact folder, (b) the config without location keys (`*_dir`, `*_path`, `*_artifact`: where things
were read or written does not change what was made) nor execution keys (`workers`, `num_threads`,
`force`; `nemotron.artifact.fields` says how a Config field declares it), and (c) the digests of the
inputs. Timestamps and metrics (which hold wall times) are left out, so two runs with the same config
and seed produce the same digest, in any folder.
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
    """`f`'s name relative to `root` (its bare name outside it): what the digest records for a file."""
    try:
        return str(Path(f).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return Path(f).name


def files_digest(files: Iterable[Path], root: Path, h: Any = None) -> Any:
    """Feed each file under `files` (name relative to `root`, then its sha256) into a sha256; returns it."""
    h = h or hashlib.sha256()
    for ref in files:
        for f in files_under(Path(ref)):
            h.update(f"{relative_name(f, root)}\0{sha256_file(f)}\n".encode())
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


def content_digest(files: Iterable[Path], root: Path, config: dict, inputs: Iterable[tuple[str, str | None]]) -> str:
    """The artifact digest: its files, its config without locations, its inputs' (type, digest)."""
    h = files_digest(files, root)
    h.update(json.dumps(without_locations(config), sort_keys=True, default=str).encode())
    for type_, digest in inputs:
        h.update(f"\0{type_}\0{digest}".encode())
    return h.hexdigest()
