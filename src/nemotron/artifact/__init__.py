"""Artifacts: the validated JSON records that every recipe step reads and writes.

A step never hands the next step a bare path. It saves an `Artifact`: a pydantic model written as
`<path>/metadata.json` that says what was made (typed, validated fields such as file paths and
counts), how (the full step `config`, `scale`, `seed`), from what (`inputs`: references to the
artifacts it consumed, so lineage is recorded on the consumer), by whom (`producer`), and a content
`digest` so two runs can be compared bit for bit.

    dataset = PretrainDataset.load(path=cfg.dataset_path, scale=cfg.scale)   # or from stdin
    ...train...
    return Checkpoint(path=out, config=asdict(cfg), scale=cfg.scale, seed=cfg.seed,
                      inputs=[dataset], model_dir=out / "model", training_loss=loss).save()

Where an input comes from (`Artifact.load`), in this order:
  1. an explicit path (`--dataset-path runs/x`), the folder holding metadata.json;
  2. a tracked artifact (`--dataset-artifact name:latest`, `tracked_artifact=`), resolved by the tracker;
  3. the JSON the previous step printed on stdin, only when stdin is not a terminal.

stdin may carry several artifacts, `{"data_curation": {...}, "checkpoint": {...}}`. The key is a label
(a step's name or the artifact's type): a step takes the one whose `type` it needs, and `print_complete`
passes everything it read on stdin through to its own stdout next to what it made, so `a | b | c` works
even when c needs a's output.

In metadata.json every path inside the folder is written `./name` and an input artifact under the
same root as `../step`; they are resolved against wherever the folder is when it is loaded, so a
moved or copied runs/ tree keeps working and reads its own files (in memory and on stdout, paths are
absolute). `mark_unfinished(output_dir)` removes a folder's metadata.json before a step rewrites it;
`nemotron.artifact.lock` makes one run own an output folder at a time.

The digest is sha256 over (a) each referenced file's sha256 with its name relative to the artifact
folder, (b) the config without location keys (`*_dir`, `*_path`, `*_artifact`: where things were
read or written does not change what was made) nor execution keys (`workers`, `num_threads`), and
(c) the digests of the inputs. Timestamps and metrics (which hold wall times) are left out, so two
runs with the same config and seed produce the same digest.

Run `python -m nemotron.artifact show|lineage|verify PATH` to inspect a saved artifact
(`nemotron.artifact.lineage` holds the same helpers for code).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

import nemotron
from nemotron import atomic
from nemotron.errors import NemotronError

SCHEMA_VERSION = 1
METADATA = "metadata.json"

# ---------------------------------------------------------------------------------------------
# Scale: one knob that shrinks every recipe from a cluster run to a laptop run
# ---------------------------------------------------------------------------------------------

SCALES = {"tiny": 0.01, "small": 0.10, "medium": 0.30, "full": 1.0}
TINY_CAP = 10_000


def apply_scale(n: int, scale: str) -> int:
    """Scale a full-size count: tiny 1% (at most 10,000), small 10%, medium 30%, full 100%; >= 1."""
    if scale not in SCALES:
        raise NemotronError(f"unknown scale {scale!r}: use one of {', '.join(SCALES)}")
    scaled = max(1, int(n * SCALES[scale]))
    return min(scaled, TINY_CAP) if scale == "tiny" else scaled


# ---------------------------------------------------------------------------------------------
# File fields: a Path that must exist when the artifact is saved and when it is loaded
# ---------------------------------------------------------------------------------------------


class _MustExist:
    """Marker on `ArtifactPath` fields; `Artifact.files()` collects them for checks and digests."""


ArtifactPath = Annotated[Path, _MustExist()]


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


LOCK = ".lock"  # the run lock of a step's output folder (nemotron.artifact.lock): not content


def _expand(path: Path) -> list[Path]:
    """A file is itself; a folder is every file under it, in sorted order."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.name not in (METADATA, LOCK))
    return [path]


# ---------------------------------------------------------------------------------------------
# The artifact model
# ---------------------------------------------------------------------------------------------


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


class Artifact(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    schema_version: int = SCHEMA_VERSION
    type: str = ""
    path: Path
    created_at: str = ""
    producer: Producer | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    inputs: list[ArtifactRef] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    scale: str = "tiny"
    seed: int = 0
    digest: str | None = None

    # The step that makes this artifact ("package.module" or a script path), named in errors when an
    # input is missing. Default: the module that defines the class, when that module is a step.
    made_by: ClassVar[str] = ""

    # The stdin key and the `type` field: the class name in lower case.
    @classmethod
    def type_name(cls) -> str:
        return cls.__name__.lower()

    @model_validator(mode="before")
    @classmethod
    def _fill_type(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data.setdefault("type", cls.type_name())
            if data["type"] != cls.type_name():
                raise ValueError(f"type is {data['type']!r}, expected {cls.type_name()!r}")
        return data

    @field_validator("inputs", mode="before")
    @classmethod
    def _refs(cls, value: Any) -> Any:
        # Accept artifacts themselves: `inputs=[dataset]` records (type, path, digest).
        return [v.ref() if isinstance(v, Artifact) else v for v in value]

    @field_validator("scale")
    @classmethod
    def _known_scale(cls, value: str) -> str:
        if value not in SCALES:
            raise ValueError(f"unknown scale {value!r}: use one of {', '.join(SCALES)}")
        return value

    @field_validator("schema_version")
    @classmethod
    def _not_newer(cls, value: int) -> int:
        if value > SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {value} is newer than this nemotron understands ({SCHEMA_VERSION}); "
                "upgrade nemotron to read it"
            )
        return value

    # -- files -------------------------------------------------------------------------------

    def files(self) -> list[Path]:
        """Every file or folder this artifact references (its `ArtifactPath` fields).

        Subclasses whose files are not plain fields (e.g. bin/idx prefixes) extend this list.
        """
        found: list[Path] = []
        for name, field in type(self).model_fields.items():
            if not _is_file_field(field):
                continue
            value = getattr(self, name)
            found.extend(value if isinstance(value, list) else [value] if value is not None else [])
        return found

    def check_files(self) -> None:
        for f in self.files():
            if not Path(f).exists():
                raise NemotronError(
                    f"{self.path / METADATA}: {self.type_name()} references {f}, which does not exist; "
                    "re-run the step that made it"
                )

    def compute_digest(self) -> str:
        h = hashlib.sha256()
        for ref in self.files():
            for f in _expand(Path(ref)):
                h.update(f"{_relative_name(f, self.path)}\0{sha256_file(f)}\n".encode())
        h.update(json.dumps(_without_locations(self.config), sort_keys=True, default=str).encode())
        for inp in self.inputs:
            h.update(f"\0{inp.type}\0{inp.digest}".encode())
        return h.hexdigest()

    def verify(self) -> None:
        """Check that the files behind this artifact are still the ones it was saved with."""
        self.check_files()
        if self.compute_digest() != self.digest:
            raise NemotronError(
                f"{self.path}: content digest differs from the saved one (files changed since the "
                "step ran); re-run the step, or with the recipe orchestrator pass --force"
            )

    @classmethod
    def reuse(cls, config: Any, inputs: list[Artifact] = ()) -> Self | None:
        """The artifact a step already made with exactly this config and these inputs, if intact.

        Lets an orchestrator skip finished steps: the step's `output_dir` holds a metadata.json
        whose saved config equals this config, whose recorded inputs are these very artifacts
        (same digests: an upstream step that re-ran invalidates everything after it), and whose
        files still match its digest.
        """
        folder = Path(config.output_dir)
        if not (folder / METADATA).exists():
            return None
        try:
            art = cls.from_path(folder)
            art.verify()
        except NemotronError as e:
            print(f"re-running {cls.type_name()}: {e}", file=sys.stderr)
            return None
        wanted = json.loads(json.dumps(dataclasses.asdict(config), default=str))
        saved = json.loads(json.dumps(art.config, default=str))
        if wanted != saved:
            changed = [f"{key} {saved.get(key)!r} -> {wanted.get(key)!r}" for key in sorted(set(wanted) | set(saved))
                       if wanted.get(key) != saved.get(key)]
            print(f"re-running {cls.type_name()}: settings changed since {folder} was made ({'; '.join(changed)}); "
                  "its outputs will be replaced", file=sys.stderr)
            return None
        recorded = {(ref.type, ref.digest) for ref in art.inputs}
        if any((inp.type, inp.digest) not in recorded for inp in inputs):
            print(f"re-running {cls.type_name()}: an input was re-made since {folder} was made from it; its "
                  "outputs will be replaced", file=sys.stderr)
            return None
        return art

    def ref(self) -> ArtifactRef:
        return ArtifactRef(type=self.type, path=str(self.path), digest=self.digest)

    # -- save --------------------------------------------------------------------------------

    def save(self, step: str | None = None) -> Self:
        """Fill producer, time and digest; write metadata.json atomically; tell the tracker.

        In memory (and on stdout) every path is absolute, so the artifact works from any working
        directory; in metadata.json they are relative to the folder (`portable_json`), so a moved or
        copied folder reads its own files.
        """
        from nemotron.trackers import get_lineage_tracker

        tracker = get_lineage_tracker()
        self.path = Path(self.path).resolve()
        self.path.mkdir(parents=True, exist_ok=True)
        for name in _location_fields(type(self)):
            value = getattr(self, name)
            if value is not None:
                resolved = [Path(v).resolve() for v in value] if isinstance(value, list) else Path(value).resolve()
                setattr(self, name, resolved)
        self.check_files()
        commit, dirty = git_revision()
        self.producer = Producer(
            step=step or _calling_step(),
            artifact_class=_class_spec(type(self)),
            git_commit=commit,
            git_dirty=dirty,
            run_id=tracker.run_id,
        )
        self.created_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.digest = self.compute_digest()
        atomic.write_text(self.path / METADATA, self.portable_json() + "\n")
        tracker.log_artifact(self)
        return self

    def portable_json(self) -> str:
        """The metadata.json text: paths inside the folder as `./name`, inputs that live under the
        same root as `../step`, so that `mv` or `cp -r` of a runs/ tree keeps every reference valid.
        Paths elsewhere (raw sources, a base model on shared storage) stay absolute."""
        data = json.loads(self.model_dump_json())
        data["path"] = "."
        for name in _location_fields(type(self)):
            value = data.get(name)
            if isinstance(value, list):
                data[name] = [_portable(v, self.path) for v in value]
            elif value is not None:
                data[name] = _portable(value, self.path)
        for ref in data["inputs"]:
            if (Path(ref["path"]) / METADATA).exists() and _share_a_root(Path(ref["path"]), self.path):
                ref["path"] = _relative(Path(ref["path"]), self.path)
        return json.dumps(data, indent=2)

    # -- load --------------------------------------------------------------------------------

    @classmethod
    def from_path(cls, path: str | Path, fix: str = "") -> Self:
        """Read and validate `<path>/metadata.json` (a path to metadata.json itself also works).

        Relative paths in the file are resolved against the folder it is in now, so a moved or
        copied artifact reads its own files. `fix` (how to give the right folder) ends the errors.
        """
        data = read_metadata(path, fix)
        return cls.from_dict(data, where=str(_metadata_file(path)))

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Self:
        if not isinstance(data, dict):
            raise NemotronError(f"{where}: expected an artifact JSON object, got {type(data).__name__}")
        if data.get("type") not in (None, cls.type_name()):
            raise NemotronError(
                f"{where}: artifact type is {data.get('type')!r} but this step needs "
                f"{cls.type_name()!r}; pass the output of the step that makes a {cls.type_name()}"
            )
        try:
            art = cls.model_validate(data)
        except ValidationError as e:
            raise NemotronError(f"{where}: invalid {cls.type_name()}: {_one_line(e)}") from None
        art.check_files()
        return art

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        tracked_artifact: str | None = None,
        scale: str | None = None,
        stdin: bool = True,
        flag: str | None = None,
    ) -> Self:
        """Resolve an input artifact: explicit path, else a tracked artifact, else stdin JSON.

        `tracked_artifact` names an artifact the active tracker knows (`pretraindataset:latest`);
        on stdin the artifact is found by its type, whatever key the previous step printed it under.

        Records the use with the active tracker. With `scale`, refuses an artifact of another
        scale (a tiny checkpoint fed to a small run is almost always a mistake). `flag` is the
        command-line flag of `path` (e.g. "--checkpoint-path"), named in the errors' fixes;
        `load_input(config, "checkpoint")` passes it for you.
        """
        from nemotron.trackers import get_lineage_tracker

        tracker = get_lineage_tracker()
        if path is not None:
            art = cls.from_path(path, fix=cls._fix(flag))
        elif tracked_artifact is not None:
            art = cls.from_path(tracker.resolve(tracked_artifact), fix=cls._fix(flag))
        elif stdin:
            art = cls._from_stdin(flag)
        else:
            raise NemotronError(f"no {cls.type_name()} given: {cls._fix(flag)}")
        if scale is not None and art.scale != scale:
            raise NemotronError(
                f"{art.path}: {cls.type_name()} was made at scale {art.scale!r} but this run is "
                f"{scale!r}; pass --scale {art.scale} or re-make the input at {scale!r}"
            )
        tracker.use_artifact(art)
        return art

    @classmethod
    def load_input(cls, config: Any, name: str, stdin: bool = True) -> Self:
        """`load` the input `name` of a step's Config: `config.<name>_path` (flag --<name>-path),
        else `config.<name>_artifact`, else stdin; refuses another scale than `config.scale`."""
        return cls.load(
            path=getattr(config, f"{name}_path", None),
            tracked_artifact=getattr(config, f"{name}_artifact", None),
            scale=getattr(config, "scale", None),
            stdin=stdin,
            flag=f"--{name.replace('_', '-')}-path",
        )

    @classmethod
    def producing_step(cls) -> str | None:
        """The command that makes this artifact: `python -m package.step` or `python script.py`."""
        step = cls.made_by
        if not step:
            if not callable(getattr(sys.modules.get(cls.__module__), "main", None)):
                return None  # defined in a library module, not by a step
            step = _class_spec(cls).rpartition(":")[0]
        return f"python {step}" if step.endswith(".py") else f"python -m {step}"

    @classmethod
    def _fix(cls, flag: str | None) -> str:
        """How to give this input: the flag, and the step that makes one."""
        where = f"with {flag}" if flag else "with the step's input path flag (see --help)"
        made = cls.producing_step()
        return f"pass the folder of a finished {cls.type_name()} {where}" + (f" (made by {made})" if made else "")

    @classmethod
    def _from_stdin(cls, flag: str | None = None) -> Self:
        fix = cls._fix(flag)
        found = find_on_stdin(cls.type_name(), fix=fix)
        if found is None:
            raise NemotronError(
                f"stdin carries {describe_stdin()} but this step needs a {cls.type_name()}: pipe in the step "
                f"that makes one, or {fix}"
            )
        key, data = found
        return cls.from_dict(data, where=f"stdin[{key!r}]")


# ---------------------------------------------------------------------------------------------
# Locations: absolute in memory, relative to the folder in metadata.json
# ---------------------------------------------------------------------------------------------


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


def read_metadata(path: str | Path, fix: str = "") -> dict:
    """The JSON of `<path>/metadata.json` with its locations resolved against the folder it is in now.

    `path` becomes the folder's absolute path; values written relative (`./file`, `../step`, at the
    top level and in `inputs`) become absolute. Errors say whether the folder does not exist or
    holds no artifact; `fix` is appended to them.
    """
    meta = _metadata_file(path)
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


def _metadata_file(path: str | Path) -> Path:
    path = Path(path)
    return path if path.name == METADATA else path / METADATA


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


def _location_fields(cls: type[Artifact]) -> list[str]:
    """The fields holding paths (`Path`, `ArtifactPath`, lists and optionals of them), except `path`."""
    def holds_path(annotation: Any) -> bool:
        if annotation is Path:
            return True
        return any(holds_path(arg) for arg in getattr(annotation, "__args__", ()))

    return [
        name for name, field in cls.model_fields.items()
        if name != "path" and (_is_file_field(field) or holds_path(field.annotation))
    ]


def _relative(target: Path, folder: Path) -> str:
    rel = os.path.relpath(target, folder)
    return rel if rel.startswith("..") else f"./{rel}"


def _portable(value: str, folder: Path) -> str:
    """`./name` for a path inside `folder`; anything else stays as it is (absolute)."""
    path = Path(value)
    return _relative(path, folder) if path.is_absolute() and path.is_relative_to(folder) else value


def _share_a_root(a: Path, b: Path) -> bool:
    """Two paths under a common folder other than the file-system root (e.g. one runs/ tree)."""
    try:
        common = Path(os.path.commonpath([a, b]))
    except ValueError:  # different drives
        return False
    return common != Path(common.anchor)


def _is_file_field(field: Any) -> bool:
    if any(isinstance(m, _MustExist) for m in field.metadata):
        return True
    # list[ArtifactPath]: the marker sits on the item type.
    for arg in getattr(field.annotation, "__args__", ()):
        if any(isinstance(m, _MustExist) for m in getattr(arg, "__metadata__", ())):
            return True
    return False


def _relative_name(f: Path, root: Path) -> str:
    try:
        return str(Path(f).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return Path(f).name


LOCATION_SUFFIXES = ("_dir", "_path", "_artifact")
# How a step was executed, not what it made: worker processes and threads give the same bytes.
EXECUTION_KEYS = {"workers", "num_threads", "force"}


def _without_locations(config: Any) -> Any:
    if isinstance(config, dict):
        return {
            k: _without_locations(v)
            for k, v in config.items()
            if not (k.endswith(LOCATION_SUFFIXES) or k in EXECUTION_KEYS)
        }
    if isinstance(config, list):
        return [_without_locations(v) for v in config]
    return config


def _one_line(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def _class_spec(cls: type) -> str:
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


def source_ref(path: str | Path, type: str = "source") -> ArtifactRef:
    """Lineage for a raw input (a file or a folder of files): its path and a sha256 of its content."""
    path = Path(path)
    if not path.exists():
        raise NemotronError(f"{path}: source does not exist; check the path in your config or blend")
    h = hashlib.sha256()
    for f in _expand(path):
        h.update(f"{_relative_name(f, path)}\0{sha256_file(f)}\n".encode())
    return ArtifactRef(type=type, path=str(path.resolve()), digest=h.hexdigest())


def _calling_step() -> str:
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


# Older name of `nemotron.atomic.write_text`, kept for code written against it.
atomic_write_text = atomic.write_text


# ---------------------------------------------------------------------------------------------
# stdin and stdout: how steps pipe
# ---------------------------------------------------------------------------------------------

_STDIN: dict[str, dict] | None = None


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


def print_complete(artifacts: dict[str, Artifact] | Artifact) -> None:
    """Write exactly one JSON document on stdout and a short human summary on stderr.

    Artifacts that came in on stdin are passed through, so later steps in a pipe can still use them.
    """
    if isinstance(artifacts, Artifact):
        artifacts = {artifacts.type: artifacts}
    passed = dict(_STDIN or {})
    out = {**passed, **{k: json.loads(a.model_dump_json()) for k, a in artifacts.items()}}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    for art in artifacts.values():
        print(summary_table(art), file=sys.stderr)


def summary_table(art: Artifact) -> str:
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
