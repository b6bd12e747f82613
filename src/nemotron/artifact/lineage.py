"""Lineage: artifacts read back by any tool, their tree of inputs, and a check of the whole tree.

    load_any(path)        the artifact, validated by the class that saved it (producer.artifact_class)
    read_metadata(path)   the raw metadata.json as a dict, locations resolved (no class needed)
    lineage_lines(path)   the tree of inputs, one line each, back to the raw sources
    verify_tree(path)     recompute every digest in the tree; raise `Mismatch` at the first difference

`python -m nemotron.artifact show|lineage|verify PATH` prints these; the report card uses them too.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from nemotron.artifact import METADATA, Artifact, read_metadata
from nemotron.errors import NemotronError

__all__ = ["Mismatch", "lineage_lines", "load_any", "read_metadata", "verify_tree"]


class Mismatch(Exception):
    """The files behind an artifact, or an input it recorded, changed since it was saved."""


def load_any(path: str | Path) -> Artifact:
    """Load an artifact with the class that saved it (recorded as producer.artifact_class)."""
    data = read_metadata(path)
    spec = (data.get("producer") or {}).get("artifact_class", "")
    module_name, _, class_name = spec.rpartition(":")
    try:
        if module_name.endswith(".py"):
            # A class from a stand-alone script: import the file, with its folder on sys.path
            # so that the script's own sibling imports work.
            sys.path.insert(0, str(Path(module_name).parent))
            module_spec = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_spec.name] = module  # dataclasses look their module up here
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except (ImportError, AttributeError, ValueError, FileNotFoundError):
        raise NemotronError(
            f"{path}: cannot import artifact class {spec!r}; install the package that made it"
        ) from None
    return cls.from_path(path)


def lineage_lines(path: str | Path, indent: str = "", seen: set[str] | None = None) -> list[str]:
    """The tree of an artifact's inputs, one line each, back to the raw sources."""
    seen = set() if seen is None else seen
    data = read_metadata(path)
    lines = [f"{indent}{data.get('type')}  {(data.get('digest') or '')[:12]}  {data.get('path')}"]
    for ref in data.get("inputs", []):
        ref_path = ref.get("path", "")
        if (Path(ref_path) / METADATA).exists() and ref_path not in seen:
            seen.add(ref_path)
            lines += lineage_lines(ref_path, indent + "  ", seen)
        else:
            # A raw source (a file, a packaged corpus), or an artifact already shown above.
            lines.append(f"{indent}  {ref.get('type')}  {(ref.get('digest') or '')[:12]}  {ref_path}")
    return lines


def verify_tree(path: str | Path, seen: set[Path] | None = None) -> list[Artifact]:
    """Check an artifact and every artifact input behind it (each once); returns them, this one first.

    Raises `Mismatch` for a file whose content changed since its artifact was saved, or an input
    whose digest is no longer the one its consumer recorded; `NemotronError` for what cannot be read
    (no metadata.json, an invalid field, a referenced file that is missing).
    """
    art = load_any(path)  # validates fields and checks that every referenced file exists
    try:
        art.verify()
    except NemotronError as e:
        raise Mismatch(str(e)) from None
    seen = set() if seen is None else seen
    seen.add(art.path)
    checked = [art]
    for ref in art.inputs:
        if not (Path(ref.path) / METADATA).exists():
            continue  # raw sources are checked by their recorded digest in lineage, not here
        current = read_metadata(ref.path).get("digest")
        if current != ref.digest:
            raise Mismatch(f"{art.path}: input {ref.type} at {ref.path} changed since it was used")
        if Path(ref.path) not in seen:
            checked += verify_tree(ref.path, seen)
    return checked
