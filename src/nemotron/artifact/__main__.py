"""Inspect saved artifacts.

    python -m nemotron.artifact show PATH      # the metadata, pretty-printed
    python -m nemotron.artifact lineage PATH   # the tree of inputs, back to the raw sources
    python -m nemotron.artifact verify PATH    # recompute the digest, check every referenced file

`verify` exits 1 and names the first mismatch: a missing file, a file whose content changed since the
artifact was saved, or an input whose digest no longer matches what the consumer recorded.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

from nemotron.artifact import METADATA, Artifact
from nemotron.errors import NemotronError

EXIT_MISMATCH = 1


def read_metadata(path: str | Path) -> dict:
    meta = Path(path) / METADATA if Path(path).name != METADATA else Path(path)
    if not meta.exists():
        raise NemotronError(f"{meta}: no artifact here (metadata.json missing)")
    try:
        return json.loads(meta.read_text())
    except json.JSONDecodeError as e:
        raise NemotronError(f"{meta}: malformed JSON at line {e.lineno}: {e.msg}") from None


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


def show(path: str) -> None:
    print(json.dumps(read_metadata(path), indent=2))


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


def lineage(path: str) -> None:
    print("\n".join(lineage_lines(path)))


def verify(path: str) -> None:
    art = load_any(path)  # validates fields and checks that every referenced file exists
    try:
        art.verify()
    except NemotronError as e:
        raise _Mismatch(str(e)) from None
    for ref in art.inputs:
        if not (Path(ref.path) / METADATA).exists():
            continue  # raw sources are checked by their recorded digest in lineage, not here
        current = read_metadata(ref.path).get("digest")
        if current != ref.digest:
            raise _Mismatch(f"{art.path}: input {ref.type} at {ref.path} changed since it was used")
        verify(ref.path)
    print(f"ok  {art.type}  {art.digest}", file=sys.stderr)


class _Mismatch(Exception):
    pass


def main(argv: list[str]) -> int:
    commands = {"show": show, "lineage": lineage, "verify": verify}
    if len(argv) != 2 or argv[0] not in commands:
        print("usage: python -m nemotron.artifact {show|lineage|verify} PATH", file=sys.stderr)
        return 2
    try:
        commands[argv[0]](argv[1])
    except NemotronError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except _Mismatch as e:
        print(f"mismatch: {e}", file=sys.stderr)
        return EXIT_MISMATCH
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
