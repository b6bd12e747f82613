"""Artifacts: the validated JSON records that every recipe step reads and writes.

A step never hands the next step a bare path. It saves an `Artifact`: a pydantic model written as
`<path>/metadata.json` that says what was made (typed, validated fields such as file paths and
counts), how (the full step `config`, `scale`, `seed`), from what (`inputs`: references to the
artifacts it consumed, so lineage is recorded on the consumer), by whom (`producer`), and a content
`digest` so two runs can be compared bit for bit.

    dataset = PretrainDataset.load(path=cfg.dataset_path, tracked_artifact=cfg.dataset_artifact)  # or stdin
    ...train...
    return Checkpoint(path=out, config=asdict(cfg), scale=cfg.scale, seed=cfg.seed,
                      inputs=[dataset], model_dir=out / "model", training_loss=loss).save()

A step that leaves out `config=` or `inputs=` still records them: `save()` takes the Config that
`nemotron.cli.run` parsed, and every artifact the process loaded (`provenance.loaded_refs`). Its typed
fields, plain `Path` fields included, are checked and digested (`digest`).

Where an input comes from (`Artifact.load`), in this order:
  1. an explicit path (`--dataset-path runs/x`), the folder holding metadata.json;
  2. a tracked artifact (`--dataset-artifact name:latest`, `tracked_artifact=`), resolved by the tracker;
  3. the JSON the previous step printed on stdin, only when stdin is not a terminal.

This module is the contract (the `Artifact` model, `apply_scale`); one concept per module beside it:
`locations` (absolute in memory, relative in metadata.json; `ArtifactPath`, `ArtifactPrefix`,
`mark_unfinished`), `digest` (what the content hash covers), `fields` (a Config field's role: content,
location, execution, bookkeeping), `provenance` (`Producer`, `ArtifactRef`, `source_ref`, git, what this
process loaded), `pipe` (stdin and stdout between steps), `lock` (one run per output folder), `lineage`
and `upstream`.
The names steps use from the first five (`__all__`) are importable from `nemotron.artifact` too.

Run `python -m nemotron.artifact show|lineage|verify PATH` to inspect a saved artifact.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nemotron import atomic
from nemotron.artifact.digest import content_digest, file_hashes, files_changed, sha256_file, with_location_names
from nemotron.artifact.fields import EXECUTION_KEYS, LOCATION_SUFFIXES, bookkeeping, execution
from nemotron.artifact.locations import (
    LOCK,
    METADATA,
    ArtifactPath,
    ArtifactPrefix,
    file_fields,
    location_fields,
    mark_unfinished,
    metadata_file,
    portable,
    read_metadata,
)
from nemotron.artifact.pipe import (
    describe_stdin,
    find_on_stdin,
    print_complete,
    read_stdin_artifacts,
    summary_table,
)
from nemotron.artifact.provenance import (
    ArtifactRef,
    Producer,
    calling_config,
    calling_step,
    class_spec,
    flag_given,
    git_revision,
    loaded_refs,
    record_loaded,
    run_facts,
    source_ref,
    step_config,
)
from nemotron.errors import NemotronError, expect_missing, report_in_one_line
from nemotron.trackers import get_lineage_tracker

# The public names, wherever they live: `from nemotron.artifact import X` keeps working for each.
__all__ = [
    "EXECUTION_KEYS", "LOCATION_SUFFIXES", "LOCK", "METADATA", "SCALES", "SCHEMA_VERSION", "TINY_CAP",
    "Artifact", "ArtifactPath", "ArtifactPrefix", "ArtifactRef", "Producer", "apply_scale",
    "bookkeeping",
    "execution", "find_on_stdin",
    "git_revision", "mark_unfinished", "print_complete", "read_metadata", "read_stdin_artifacts", "sha256_file",
    "source_ref", "summary_table",
]

SCHEMA_VERSION = 1

report_in_one_line()  # a step that ends with a bare `tyro.cli(main)` fails in one line too (nemotron.errors)

# Scale: one knob that shrinks every recipe from a cluster run to a laptop run.
SCALES = {"tiny": 0.01, "small": 0.10, "medium": 0.30, "full": 1.0}
TINY_CAP = 10_000


def apply_scale(n: int, scale: str) -> int:
    """Scale a full-size count: tiny 1% (at most 10,000), small 10%, medium 30%, full 100%; >= 1."""
    if scale not in SCALES:
        raise NemotronError(f"unknown scale {scale!r}: use one of {', '.join(SCALES)}")
    scaled = max(1, int(n * SCALES[scale]))
    return min(scaled, TINY_CAP) if scale == "tiny" else scaled


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
    # sha256 of each file the artifact vouches for, by its name relative to the folder: what `verify`
    # compares to name the file that changed. None in metadata.json written before it was recorded.
    file_hashes: dict[str, str] | None = None
    # The file fields that named no file when the step saved (a declared `valid_path` never written): kept
    # as the step gave them, neither checked nor hashed; a step that reads one is refused in one line.
    missing_files: list[str] | None = None

    # The fields the digest leaves out (where, when, who, how fast) or covers on their own (files,
    # config, inputs): see `nemotron.artifact.digest`.
    NOT_IDENTITY: ClassVar[frozenset[str]] = frozenset(
        {"path", "created_at", "producer", "metrics", "digest", "file_hashes", "config", "inputs", "missing_files"})

    # The step that makes this artifact ("package.module" or a script path), named in errors when an
    # input is missing. Default: the module that defines the class, when that module is a step.
    made_by: ClassVar[str] = ""

    # The `type` field (how stdin finds it, and the default stdin key): the class name in lower case.
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

    def field_files(self, missing: bool = False) -> list[tuple[str, Path]]:
        """(field, path) for each file this artifact's fields reference: its `ArtifactPath` and plain
        `Path` fields (single, optional or lists); those recorded missing only with `missing=True`."""
        found = []
        for name in file_fields(type(self).model_fields):
            value = getattr(self, name)
            if missing or name not in (self.missing_files or ()):
                found += [(name, Path(v)) for v in (value if isinstance(value, list) else [value]) if v is not None]
        return found

    def files(self) -> list[Path]:
        """Every file or folder this artifact references (its file fields, `field_files`).

        Subclasses whose files are not plain fields (e.g. bin/idx prefixes) extend this list.
        """
        return [path for _, path in self.field_files()]

    def check_files(self) -> None:
        """Refuse an artifact read back whose files are gone, naming the field where one names it."""
        fields = {path: name for name, path in self.field_files()}
        for f in self.files():
            if not Path(f).exists():
                which = f"field {fields[f]} references" if f in fields else "references"
                raise NemotronError(
                    f"{self.path / METADATA}: {self.type_name()} {which} {f}, which does not exist; "
                    "re-run the step that made it"
                )

    def record_missing_files(self) -> None:
        """The rule for a declared file that does not exist at save: the field is recorded in `missing_files`
        with a one-line warning on stderr, and the artifact is saved without it (not hashed, not checked on
        load); the step that then reads the file is refused in one line (`errors.missing_file`)."""
        missing = sorted({name for name, f in self.field_files(missing=True) if not f.exists()})
        for name in missing:
            print(f"warning: {type(self).__name__}.{name} is {getattr(self, name)}, which does not exist: "
                  "recorded as missing; a step that reads it will be refused", file=sys.stderr)
        self.missing_files = missing or None

    def hash_files(self) -> dict[str, str]:
        """The sha256 of every file under `files()`, by its name relative to the folder (`file_hashes`)."""
        return file_hashes(self.files(), self.path)

    def identity(self) -> dict:
        """The fields the digest covers besides files, config and inputs: type, scale, seed and every typed
        field, as JSON, with locations named relative to the folder (`digest.with_location_names`)."""
        fields = self.model_dump(mode="json", exclude=set(self.NOT_IDENTITY))
        return with_location_names(fields, self.path, location_fields(type(self).model_fields))

    def compute_digest(self, hashes: dict[str, str] | None = None) -> str:
        """The content digest (`nemotron.artifact.digest`): type and typed fields, files, config without
        locations, inputs. `hashes` are the files' hashes when already computed (`hash_files`)."""
        hashes = self.hash_files() if hashes is None else hashes
        return content_digest(self.identity(), hashes, self.config, [(i.type, i.digest) for i in self.inputs])

    def verify(self) -> None:
        """Check that the files and fields behind this artifact are still the ones it was saved with;
        the error names the files that differ (relative to the folder), or says a field was edited."""
        self.check_files()
        hashes = self.hash_files()
        if self.file_hashes is not None and hashes != self.file_hashes:
            raise NemotronError(
                f"{self.path}: {files_changed(self.file_hashes, hashes)} since the step saved it; re-run the step, "
                "or with the recipe orchestrator pass --force"
            )
        if self.compute_digest(hashes) != self.digest:
            cause = ("its files are unchanged, so a field of metadata.json was edited" if self.file_hashes is not None
                     else "files or fields changed since the step ran, or an older nemotron saved it")
            raise NemotronError(
                f"{self.path / METADATA}: content digest differs from the saved one ({cause}); re-run the step, "
                "or with the recipe orchestrator pass --force"
            )

    @classmethod
    def reuse(cls, config: Any, inputs: list[Artifact] = ()) -> Self | None:
        """The artifact a step already made in `config.output_dir` with this config and these inputs,
        if intact; else None. Where a run lives is not part of it (`nemotron.artifact.uptodate`,
        which also says why a step is not up to date)."""
        from nemotron.artifact.uptodate import up_to_date

        return up_to_date(cls, config, inputs)[0]

    def ref(self) -> ArtifactRef:
        return ArtifactRef(type=self.type, path=str(self.path), digest=self.digest)

    # -- save --------------------------------------------------------------------------------

    def save(self, step: str | None = None) -> Self:
        """Check the files, fill inputs and config if the step gave none, producer, time and digest; write
        metadata.json atomically; tell the tracker.

        In memory (and on stdout) every path is absolute, so the artifact works from any working
        directory; in metadata.json they are relative to the folder (`portable_json`), so a moved or
        copied folder reads its own files.
        """
        tracker = get_lineage_tracker()
        self.path = Path(self.path).resolve()
        self.path.mkdir(parents=True, exist_ok=True)
        for name in location_fields(type(self).model_fields):
            value = getattr(self, name)
            if value is not None:
                resolved = [Path(v).resolve() for v in value] if isinstance(value, list) else Path(value).resolve()
                setattr(self, name, resolved)
        self.record_missing_files()
        self.check_files()
        # What the step did not say, the process remembers: the artifacts it loaded are its inputs,
        # the Config `nemotron.cli.run` parsed (or, under a bare `tyro.cli(main)`, main's Config argument)
        # is its config, and that Config's scale and seed are its own (an explicit argument wins).
        if "inputs" not in self.model_fields_set:
            self.inputs = loaded_refs(excluding=self.path)
        if "config" not in self.model_fields_set and (config := step_config() or calling_config()) is not None:
            self.config = config
        for key, kind in (("scale", str), ("seed", int)):
            if key not in self.model_fields_set and isinstance(self.config.get(key), kind):
                setattr(self, key, self.config[key])
        commit, dirty = git_revision()
        self.producer = Producer(
            step=step or calling_step(),
            artifact_class=class_spec(type(self)),
            git_commit=commit,
            git_dirty=dirty,
            run_id=tracker.run_id,
            **run_facts(),
        )
        self.created_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        self.file_hashes = self.hash_files()
        self.digest = self.compute_digest(self.file_hashes)
        atomic.write_text(self.path / METADATA, self.portable_json() + "\n")
        tracker.log_artifact(self)
        return self

    def portable_json(self) -> str:
        """The metadata.json text: paths inside the folder as `./name`, inputs that live under the
        same root as `../step` (`nemotron.artifact.locations.portable`); paths elsewhere stay absolute."""
        data = json.loads(self.model_dump_json())
        return json.dumps(portable(data, self.path, location_fields(type(self).model_fields)), indent=2)

    # -- load --------------------------------------------------------------------------------

    @classmethod
    def from_path(cls, path: str | Path, fix: str = "") -> Self:
        """Read and validate `<path>/metadata.json` (a path to metadata.json itself also works).

        Relative paths in the file are resolved against the folder it is in now, so a moved or
        copied artifact reads its own files. `fix` (how to give the right folder) ends the errors.
        """
        data = read_metadata(path, fix)
        return cls.from_dict(data, where=str(metadata_file(path)))

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
        for name, f in art.field_files(missing=True):
            if name in (art.missing_files or ()):
                expect_missing(f, f"{where}: {cls.type_name()}.{name} was recorded missing when its step saved it")
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
        tracker = get_lineage_tracker()
        flag = flag or flag_given(path)
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
        record_loaded(art.ref())  # an input of what this process saves next, unless the step says otherwise
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
            step = class_spec(cls).rpartition(":")[0]
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


def _one_line(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
