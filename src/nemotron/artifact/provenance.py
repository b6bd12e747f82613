"""Provenance: who made an artifact, with what code, and from what.

- `Producer`: the step, the artifact's class (`module:Class`, so generic tools can re-validate it),
  the nemotron version, the git commit and whether the checkout had uncommitted changes, the run id,
  and what can change the last bits of a result without changing its config: the command line, the
  Python and torch versions, torch's thread count and device (`run_facts`).
- `ArtifactRef`: how a consumer records an input (type, path, digest); lineage lives on the consumer.
- `source_ref(path)`: the same for a raw input file or folder, with a content digest.
- What this process has done, kept so that `Artifact.save()` records it even when a step does not say
  it: every artifact it loaded (`record_loaded`, `loaded_refs`: they become the inputs of what it saves
  afterwards) and the Config `nemotron.cli.run` parsed for it (`set_step_config`, `step_config`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

import nemotron
from nemotron.artifact.digest import files_digest
from nemotron.artifact.fields import recorded
from nemotron.errors import NemotronError


class Producer(BaseModel):
    step: str
    artifact_class: str = ""  # "module:Class", so generic tools (verify) can re-validate it
    version: str = nemotron.__version__
    git_commit: str | None = None
    git_dirty: bool | None = None  # True: the code had uncommitted changes, so git_commit is not all of it
    run_id: str = "local"
    # What changes the last bits of a result without changing its config (all optional: metadata.json
    # written before they were recorded still loads). `run_facts()` fills them.
    command: str | None = None  # the command line that made the artifact (an orchestrator's, for its steps)
    python_version: str | None = None
    torch_version: str | None = None  # None when the step never imported torch (data steps)
    num_threads: int | None = None  # torch's intra-op threads: float sums can differ in the last bits
    device: str | None = None  # "cpu", "cuda:0", ...: where torch put new tensors; None when unknown


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


def run_facts() -> dict:
    """The `Producer` fields that can change a result's last bits: command line, Python, torch, threads, device.

    torch is only looked at when the step already imported it: a data step stays torch-free.
    """
    # The command as it was typed (`python -m nemotron.recipes... --flag`), not sys.argv's resolved
    # `.../__main__.py`; the interpreter is named `python` so two machines' commands compare equal.
    argv = ["python", *sys.orig_argv[1:]] if getattr(sys, "orig_argv", None) else sys.argv
    facts = {"command": shlex.join(argv), "python_version": platform.python_version()}
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        facts["torch_version"] = str(torch.__version__)
        facts["num_threads"] = torch.get_num_threads()
        facts["device"] = _torch_device(torch)
    return facts


def _torch_device(torch) -> str | None:
    """Where the step computed: the current CUDA device once the step has used CUDA, else torch's default
    device for new tensors ("cpu"); None when torch cannot say."""
    try:
        if torch.cuda.is_initialized():
            return f"cuda:{torch.cuda.current_device()}"
        return str(torch.get_default_device())
    except (AttributeError, RuntimeError):
        return None


# -- what this process has done -------------------------------------------------------------------

_LOADED: list[ArtifactRef] = []  # every artifact this process loaded, in order, each once
_STEP_CONFIG: dict | None = None  # the Config `nemotron.cli.run` parsed, as JSON


def record_loaded(ref: ArtifactRef) -> None:
    """Remember that this process loaded an artifact (`Artifact.load` calls it)."""
    if all((r.path, r.digest) != (ref.path, ref.digest) for r in _LOADED):
        _LOADED.append(ref)


def loaded_refs(excluding: str | Path | None = None) -> list[ArtifactRef]:
    """The artifacts this process has loaded, oldest first, except the one at `excluding` (an artifact
    is never its own input, e.g. a step that read its previous output before rewriting it)."""
    skip = str(Path(excluding).resolve()) if excluding is not None else None
    return [ref.model_copy() for ref in _LOADED if str(Path(ref.path).resolve()) != skip]


def set_step_config(config: dict | None) -> None:
    """Remember the step's resolved Config (JSON-safe), recorded by `save()` when a step gives no `config=`."""
    global _STEP_CONFIG
    _STEP_CONFIG = config


def step_config() -> dict | None:
    return None if _STEP_CONFIG is None else json.loads(json.dumps(_STEP_CONFIG))


def calling_config() -> dict | None:
    """The Config of the step function that is saving, for a step that `nemotron.cli.run` did not parse
    (the recipe guide's bare `tyro.cli(main)`): the first argument of the nearest caller whose first
    argument is a dataclass instance (`main(config)`; a method's `self` is not a config), as JSON; None
    when there is none."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        name = code.co_varnames[0] if code.co_argcount else "self"
        first = frame.f_locals.get(name) if name not in ("self", "cls") else None
        if dataclasses.is_dataclass(first) and not isinstance(first, type):
            return json.loads(json.dumps(recorded(first), default=str))
        frame = frame.f_back
    return None


def flag_given(path: str | Path | None) -> str | None:
    """The command-line flag that carried `path` to this process (`--config.dataset-path` under a bare
    `tyro.cli(main)`), to name in an input's error; None when no flag did."""
    if path is None:
        return None
    args = sys.argv[1:]
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if not eq and i + 1 < len(args):
            value = args[i + 1]
        if flag.startswith("--") and value and Path(value) == Path(path):
            return flag
    return None


def forget_process_state() -> None:
    """Forget what this process loaded and its step Config (for tests, and code that runs many steps)."""
    _LOADED.clear()
    set_step_config(None)
