"""Provenance: who made an artifact, with what code, and from what.

- `Producer`: the step, the artifact's class (`module:Class`, so generic tools can re-validate it),
  the nemotron version, the git commit and whether the checkout had uncommitted changes, the run id.
- `ArtifactRef`: how a consumer records an input (type, path, digest); lineage lives on the consumer.
- `source_ref(path)`: the same for a raw input file or folder, with a content digest.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

import nemotron
from nemotron.artifact.digest import files_digest
from nemotron.errors import NemotronError


class Producer(BaseModel):
    step: str
    artifact_class: str = ""  # "module:Class", so generic tools (verify) can re-validate it
    version: str = nemotron.__version__
    git_commit: str | None = None
    git_dirty: bool | None = None  # True: the code had uncommitted changes, so git_commit is not all of it
    run_id: str = "local"


class ArtifactRef(BaseModel):
    """How a consumer records an input: enough to find it again and to notice if it changed."""

    type: str
    path: str
    digest: str | None = None


def source_ref(path: str | Path, type: str = "source") -> ArtifactRef:
    """Lineage for a raw input (a file or a folder of files): its path and a sha256 of its content."""
    path = Path(path)
    if not path.exists():
        raise NemotronError(f"{path}: source does not exist; check the path in your config or blend")
    digest = files_digest([path], root=path, h=hashlib.sha256()).hexdigest()
    return ArtifactRef(type=type, path=str(path.resolve()), digest=digest)


def class_spec(cls: type) -> str:
    """Where a class can be imported from again: "package.module:Class", or "/path/file.py:Class"
    for a class defined in a stand-alone script (such as the examples)."""
    module = sys.modules.get(cls.__module__)
    spec = getattr(module, "__spec__", None)
    name = spec.name if spec is not None and spec.name else cls.__module__
    if name in ("__main__", "") or "." not in name:
        file = getattr(module, "__file__", None)
        if file:
            return f"{Path(file).resolve()}:{cls.__qualname__}"
    return f"{name}:{cls.__qualname__}"


def calling_step() -> str:
    """The step this process runs: `python -m package.step`'s module, or the script's name."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name
    return Path(getattr(main, "__file__", "python")).stem


_GIT_REVISIONS: dict[Path, tuple[str | None, bool | None]] = {}


def git_revision(where: str | Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding `where` (default: this package's source).

    `dirty` is True when tracked files differ from that commit (staged or not), so the commit alone
    does not name the code that ran; untracked files are not counted. (None, None) outside a git
    checkout or without git. Asked once per location and process.
    """
    where = Path(where or Path(__file__).parent).resolve()
    if where not in _GIT_REVISIONS:
        def git(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10)

        try:
            head = git("rev-parse", "HEAD")
            status = git("status", "--porcelain", "--untracked-files=no") if head.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            head = status = None
        if head is None or head.returncode != 0:
            _GIT_REVISIONS[where] = (None, None)
        else:
            dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
            _GIT_REVISIONS[where] = (head.stdout.strip(), dirty)
    return _GIT_REVISIONS[where]
