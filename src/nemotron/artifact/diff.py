"""What differs between two artifacts, or two runs, and the first step at which their lineages part.

    diff_paths(a, b)   the report: every pair of artifacts compared, and the first difference
    render(report)     the same report as lines of text (`python -m nemotron.artifact diff A B`)

A and B are two artifact folders (each holding metadata.json) or two run folders (any folder with
artifact folders below it). Runs pair their artifacts by the path relative to the run folder; two
artifacts pair their upstream artifacts by following `inputs` (same type, same position). Each pair
is reported in groups kept apart, because they mean different things:

- type and `config` fields (nested keys dotted): what the step was asked to make; the typed fields
  of its class (counts, losses): what it made;
- locations (`*_dir`, `*_path`, `*_artifact`) and execution keys (`workers`, `num_threads`, `force`):
  where and how it ran, never what it made (the digest leaves them out too, `nemotron.artifact.digest`);
- content: each file the artifact vouches for, by its sha256 and its name relative to the folder;
  "data identical" when every file is equal, even where the digests differ (a config change that
  removed nothing, say);
- inputs whose recorded digest differs; metrics with their deltas (new - old); producer facts (the
  command, code, torch version, threads, device) that explain last-bit differences.

Two lineages part at the most upstream pair whose digest differs while every artifact input it
recorded is the same on both sides: "first difference: stage0_pretrain/data_curation: num_shards 4 -> 8".
Identical means every pair has the same type, config, typed fields, files, inputs and digest; locations,
execution keys, metrics and producer facts are reported but do not make two runs differ.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.artifact.digest import files_under, relative_name, sha256_file
from nemotron.artifact.fields import EXECUTION_KEYS, is_location
from nemotron.artifact.lineage import load_any
from nemotron.artifact.locations import METADATA, read_metadata
from nemotron.errors import NemotronError

# Top-level metadata keys with a group of their own; every other key is a typed field of the class.
# `file_hashes` (each file's sha256, as saved) is the content group's, which reads the files themselves.
BASE_KEYS = ("type", "path", "created_at", "producer", "config", "inputs", "metrics", "digest", "file_hashes",
             "missing_files")
# Producer facts that change how a run ran (the last bits of its numbers), with their words in a summary.
PRODUCER_FACTS = {
    "command": "command", "num_threads": "thread count", "torch_version": "torch version",
    "device": "device", "python_version": "python version", "version": "nemotron version",
    "git_commit": "code (git commit)", "git_dirty": "uncommitted changes", "step": "step",
}
SHOWN_CHANGES = 3  # config changes named in a one-line reason before "and N more"


@dataclass
class Facts:
    """One artifact as the diff sees it: its metadata (locations resolved) and its files' sha256."""

    path: Path
    data: dict[str, Any]
    files: dict[str, str]  # name relative to the artifact folder -> sha256

    @classmethod
    def read(cls, path: Path) -> Facts:
        data = read_metadata(path)
        art = load_any(path)  # the class that saved it knows which files it vouches for
        files = {relative_name(f, art.path): sha256_file(f) for ref in art.files() for f in files_under(Path(ref))}
        return cls(Path(data["path"]), data, dict(sorted(files.items())))


@dataclass
class Catalog:
    """Facts read once per artifact folder (a browse page compares every pair of many artifacts)."""

    known: dict[Path, Facts] = field(default_factory=dict)

    def get(self, path: str | Path) -> Facts:
        path = Path(path).resolve()
        if path not in self.known:
            self.known[path] = Facts.read(path)
        return self.known[path]


# ------------------------------------------------------------------ one pair


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys: {"a": {"b": 1}} -> {"a.b": 1}; lists and scalars are leaves."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value} if prefix else {}


def changes(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Keys whose values differ (absent counts as None), sorted, with `delta` = b - a for two numbers."""
    found = []
    for key in sorted(set(a) | set(b)):
        old, new = a.get(key), b.get(key)
        if old == new:
            continue
        change = {"key": key, "a": old, "b": new}
        if is_number(old) and is_number(new):
            change["delta"] = new - old
        found.append(change)
    return found


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_location_key(dotted: str) -> bool:
    return any(is_location(part) for part in dotted.split("."))


def is_path_value(value: Any) -> bool:
    """A typed field holding paths (see `as_seen_from`): where the files are, not what they are."""
    values = value if isinstance(value, list) and value else [value]
    return all(isinstance(v, str) and (v == "." or v.startswith(("/", "./", "../"))) for v in values)


def as_seen_from(value: Any, folder: Path) -> Any:
    """Absolute paths relative to the artifact's folder (`.`, `./model`, `../data_curation`), as
    metadata.json writes them: two runs in two folders then show no location difference for the
    same layout, and a path that leaves their common tree stays absolute."""
    if isinstance(value, list):
        return [as_seen_from(v, folder) for v in value]
    if isinstance(value, str) and value.startswith("/"):
        common = os.path.commonpath([value, str(folder)])
        if common != "/":
            rel = os.path.relpath(value, folder)
            return rel if rel.startswith("..") else f"./{rel}" if rel != "." else "."
    return value


def compare(a: Facts, b: Facts, name: str) -> dict[str, Any]:
    """Everything that differs between two artifacts, in separate groups (see the module docstring)."""
    config = changes(*({k: as_seen_from(v, f.path) for k, v in flatten(f.data.get("config") or {}).items()}
                       for f in (a, b)))
    typed_a = {k: as_seen_from(v, a.path) for k, v in a.data.items() if k not in BASE_KEYS}
    typed_b = {k: as_seen_from(v, b.path) for k, v in b.data.items() if k not in BASE_KEYS}
    typed = changes(typed_a, typed_b)
    located = [c for c in config if is_location_key(c["key"])]
    located += [c for c in typed if is_location_key(c["key"]) or is_path_value(c["a"] or c["b"])]
    execution = [c for c in config if c["key"].rsplit(".", 1)[-1] in EXECUTION_KEYS and c not in located]
    asked = [c for c in config if c not in located and c not in execution]
    made = [c for c in typed if c not in located]
    matched = matched_files(a.files, b.files)
    files = [{"name": n, "a": ha, "b": hb} for n, ha, hb in matched if ha != hb]
    producer = changes({k: v for k, v in (a.data.get("producer") or {}).items() if k in PRODUCER_FACTS},
                       {k: v for k, v in (b.data.get("producer") or {}).items() if k in PRODUCER_FACTS})
    inputs = input_changes(a.data.get("inputs") or [], b.data.get("inputs") or [])
    kinds = {"a": a.data.get("type"), "b": b.data.get("type")}
    type_change = None if kinds["a"] == kinds["b"] else kinds
    differs = bool(type_change or asked or made or files or inputs) or a.data.get("digest") != b.data.get("digest")
    pair = {
        "name": name, "a": str(a.path), "b": str(b.path), "differs": differs,
        "type": type_change or a.data.get("type"),
        "digest": {"a": a.data.get("digest"), "b": b.data.get("digest")},
        "config": asked, "fields": made, "locations": located, "execution": execution,
        "content": {"files_a": len(a.files), "files_b": len(b.files), "files": len(matched), "differing_files": files,
                    "data_identical": bool(a.files) and not files},
        "inputs": inputs,
        "metrics": changes(flatten(a.data.get("metrics") or {}), flatten(b.data.get("metrics") or {})),
        "producer": producer,
    }
    pair["summary"] = summary(pair)
    return pair


RUN_HASH = re.compile(r"[0-9a-f]{12,64}")  # a folder named by a run's hash (`train/3f9c0a1b2d4e5f60/...`)


def matched_files(a: dict[str, str], b: dict[str, str]) -> list[tuple[str, str | None, str | None]]:
    """Each file of A beside its file in B: (name, sha256 in A, sha256 in B), None where a side has none.

    Files pair by their name relative to the artifact; those left pair by content (the same bytes under
    another run-hash folder are the same file), then by their name with run-hash folders left out (the
    file the other run wrote in its place). So every file is counted once, and "N of M differ" adds up.
    """
    pairs = [(n, a[n], b[n]) for n in a if n in b]
    left_a, left_b = {n: h for n, h in a.items() if n not in b}, {n: h for n, h in b.items() if n not in a}
    for same in (lambda na, ha, nb, hb: ha == hb, lambda na, ha, nb, hb: without_run_hash(na) == without_run_hash(nb)):
        for na, ha in list(left_a.items()):
            nb = next((nb for nb, hb in left_b.items() if same(na, ha, nb, hb)), None)
            if nb is not None:
                pairs.append((f"{na} | {nb}", ha, left_b.pop(nb)))
                del left_a[na]
    pairs += [(n, h, None) for n, h in left_a.items()] + [(n, None, h) for n, h in left_b.items()]
    return sorted(pairs)


def without_run_hash(name: str) -> str:
    return "/".join("*" if RUN_HASH.fullmatch(part) else part for part in name.split("/"))


def input_changes(a: list[dict], b: list[dict]) -> list[dict[str, Any]]:
    """Recorded inputs whose digest differs, paired by type and position among inputs of that type."""
    found = []
    for (kind, index), (ref_a, ref_b) in sorted(paired_inputs(a, b).items()):
        if ref_a is None or ref_b is None or ref_a.get("digest") != ref_b.get("digest"):
            found.append({"type": kind, "index": index,
                          "a": ref_a and {"path": ref_a.get("path"), "digest": ref_a.get("digest")},
                          "b": ref_b and {"path": ref_b.get("path"), "digest": ref_b.get("digest")}})
    return found


def paired_inputs(a: list[dict], b: list[dict]) -> dict[tuple[str, int], tuple[dict | None, dict | None]]:
    def keyed(refs: list[dict]) -> dict[tuple[str, int], dict]:
        seen: dict[str, int] = {}
        out = {}
        for ref in refs:
            kind = str(ref.get("type"))
            out[(kind, seen.get(kind, 0))] = ref
            seen[kind] = seen.get(kind, 0) + 1
        return out

    ka, kb = keyed(a), keyed(b)
    return {key: (ka.get(key), kb.get(key)) for key in set(ka) | set(kb)}


def summary(pair: dict[str, Any]) -> str:
    """One line: "same config, data identical, other thread count (2 -> 1)"."""
    changed = len(pair["config"])
    parts = ["same config" if not changed else f"{plural(changed, 'config field')} differ{'s' * (changed == 1)}"]
    if pair["fields"]:
        parts.append(f"{plural(len(pair['fields']), 'typed field')} differ{'s' * (len(pair['fields']) == 1)}")
    content = pair["content"]
    if content["data_identical"]:
        parts.append("data identical")
    elif content["differing_files"]:
        total = content.get("files", max(content["files_a"], content["files_b"]))
        parts.append(f"{len(content['differing_files'])} of {total} files differ")
    for change in pair["producer"]:
        parts.append(f"other {PRODUCER_FACTS[change['key']]} ({short(change['a'])} -> {short(change['b'])})")
    return ", ".join(parts)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def short(value: Any) -> str:
    """A value as a diff line shows it: digests and commits cut to 12 characters, floats to 6 digits."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str) and len(value) >= 40 and all(c in "0123456789abcdef" for c in value):
        return value[:12]
    return "None" if value is None else str(value)


def reason(pair: dict[str, Any]) -> str:
    """Why a pair whose inputs are the same differs, in one line (the first difference's words)."""
    if isinstance(pair["type"], dict):
        return f"type {pair['type']['a']} -> {pair['type']['b']}"
    if pair["config"]:
        named = "; ".join(f"{c['key']} {short(c['a'])} -> {short(c['b'])}" for c in pair["config"][:SHOWN_CHANGES])
        more = len(pair["config"]) - SHOWN_CHANGES
        return named + (f"; and {more} more" if more > 0 else "")
    if pair["inputs"]:
        change = pair["inputs"][0]
        where = (change["a"] or change["b"])["path"]
        return f"input {change['type']} {where} changed ({short((change['a'] or {}).get('digest'))} -> " \
               f"{short((change['b'] or {}).get('digest'))})"
    if pair["content"]["differing_files"] or pair["fields"]:
        return pair["summary"].replace("same config", "same config, other content", 1)
    return f"digest {short(pair['digest']['a'])} -> {short(pair['digest']['b'])}; nothing else recorded differs"


# ------------------------------------------------------------------ two runs or two artifacts


def is_artifact(path: Path) -> bool:
    return (path / METADATA).is_file()


def artifacts_under(root: Path) -> dict[str, Path]:
    """The artifact folders below a run folder, by their path relative to it."""
    found = {str(meta.parent.relative_to(root)): meta.parent for meta in root.rglob(METADATA)}
    return dict(sorted(found.items()))


def lineage_pairs(a: Path, b: Path, catalog: Catalog) -> list[tuple[Path, Path]]:
    """(a, b) and, following inputs of the same type and position, every upstream pair of artifacts."""
    pairs: list[tuple[Path, Path]] = []
    todo = [(a, b)]
    while todo:
        pa, pb = todo.pop(0)
        if (pa, pb) in pairs:
            continue
        pairs.append((pa, pb))
        fa, fb = catalog.get(pa), catalog.get(pb)
        for _, (ra, rb) in sorted(paired_inputs(fa.data.get("inputs") or [], fb.data.get("inputs") or []).items()):
            if ra and rb and is_artifact(Path(ra["path"])) and is_artifact(Path(rb["path"])):
                todo.append((Path(ra["path"]).resolve(), Path(rb["path"]).resolve()))
    return pairs


def names_of(paths: list[Path]) -> dict[Path, str]:
    """Short names: each path relative to the folder all of them share ("stage0_pretrain/data_curation")."""
    if len(paths) == 1:
        return {paths[0]: paths[0].name}
    common = Path(os.path.commonpath([str(p) for p in paths]))
    return {p: str(p.relative_to(common)) if p != common else p.name for p in paths}


def diff_paths(a: str | Path, b: str | Path, catalog: Catalog | None = None) -> dict[str, Any]:
    """The whole report for two artifact folders or two run folders (see the module docstring)."""
    catalog = catalog or Catalog()
    a, b = Path(a).resolve(), Path(b).resolve()
    for side in (a, b):
        if not side.is_dir():
            raise NemotronError(f"{side} is not a folder; pass two artifact folders or two run folders")
    only_a: list[str] = []
    only_b: list[str] = []
    if is_artifact(a) and is_artifact(b):
        mode = "artifacts"
        pairs = lineage_pairs(a, b, catalog)
        names = names_of(sorted({pa for pa, _ in pairs}))
        named = [(names[pa], pa, pb) for pa, pb in pairs]
    elif not is_artifact(a) and not is_artifact(b):
        mode = "runs"
        under_a, under_b = artifacts_under(a), artifacts_under(b)
        for side, under in ((a, under_a), (b, under_b)):
            if not under:
                raise NemotronError(f"{side} holds no artifact folder (no metadata.json below it); "
                                    "pass a run's output folder")
        named = [(n, under_a[n].resolve(), under_b[n].resolve()) for n in under_a if n in under_b]
        only_a, only_b = [n for n in under_a if n not in under_b], [n for n in under_b if n not in under_a]
    else:
        artifact, run = (a, b) if is_artifact(a) else (b, a)
        raise NemotronError(f"{artifact} is an artifact folder but {run} is not; pass two artifact folders "
                            "or two run folders")
    compared = {pa: compare(catalog.get(pa), catalog.get(pb), name) for name, pa, pb in named}
    ordered = upstream_first(compared, catalog)
    first = first_difference(ordered, compared, catalog)
    return {
        "a": str(a), "b": str(b), "mode": mode,
        "identical": not (only_a or only_b or any(p["differs"] for p in compared.values())),
        "first_difference": first,
        "only_in_a": only_a, "only_in_b": only_b,
        "artifacts": [compared[p] for p in ordered],
    }


def upstream_first(compared: dict[Path, dict], catalog: Catalog) -> list[Path]:
    """The A-side paths in lineage order: every artifact after the artifacts it recorded as inputs."""
    depth: dict[Path, int] = {}

    def depth_of(path: Path, stack: tuple[Path, ...] = ()) -> int:
        if path not in depth:
            ups = [Path(r["path"]).resolve() for r in catalog.get(path).data.get("inputs") or []]
            ups = [u for u in ups if u in compared and u not in stack]
            depth[path] = 1 + max((depth_of(u, (*stack, path)) for u in ups), default=-1)
        return depth[path]

    return sorted(compared, key=lambda p: (depth_of(p), compared[p]["name"]))


def first_difference(ordered: list[Path], compared: dict[Path, dict], catalog: Catalog) -> dict | None:
    """The most upstream differing pair whose artifact inputs (those compared here) are all the same."""
    for path in ordered:
        pair = compared[path]
        if not pair["differs"]:
            continue
        ups = [Path(r["path"]).resolve() for r in catalog.get(path).data.get("inputs") or []]
        if any(compared[u]["differs"] for u in ups if u in compared):
            continue
        return {"name": pair["name"], "a": pair["a"], "b": pair["b"], "reason": reason(pair)}
    return None


# ------------------------------------------------------------------ the text view


def render(report: dict[str, Any]) -> list[str]:
    """The report as text: the verdict and first difference, then each pair (one line when the same)."""
    lines = [f"A: {report['a']}", f"B: {report['b']}"]
    first = report["first_difference"]
    if report["identical"]:
        lines.append(f"identical: {plural(len(report['artifacts']), 'artifact')}, same digests")
    elif first:
        lines.append(f"first difference: {first['name']}: {first['reason']}")
    for name in report["only_in_a"]:
        lines.append(f"only in A: {name}")
    for name in report["only_in_b"]:
        lines.append(f"only in B: {name}")
    lines.append("")
    for pair in report["artifacts"]:
        lines += render_pair(pair)
    return lines


def render_pair(pair: dict[str, Any]) -> list[str]:
    digest = pair["digest"]
    kind = pair["type"] if isinstance(pair["type"], str) else f"{pair['type']['a']} -> {pair['type']['b']}"
    if not pair["differs"]:
        head = f"same     {pair['name']}  {kind}  {short(digest['a'])}"
        return [head + (f"  ({pair['summary']})" if pair["producer"] else "")]
    lines = [f"differs  {pair['name']}  {kind}  {short(digest['a'])} -> {short(digest['b'])}",
             f"  {pair['summary']}"]

    def group(title: str, items: list[dict]) -> None:
        for i, c in enumerate(items):
            delta = f"  ({c['delta']:+.6g})" if "delta" in c else ""
            lines.append(f"  {title if i == 0 else '':<10} {c['key']}: {short(c['a'])} -> {short(c['b'])}{delta}")

    group("config", pair["config"])
    group("fields", pair["fields"])
    group("execution", pair["execution"])
    group("locations", pair["locations"])
    content = pair["content"]
    if content["data_identical"]:
        lines.append(f"  {'content':<10} data identical ({plural(content['files_a'], 'file')})")
    for i, f in enumerate(content["differing_files"]):
        lines.append(f"  {'content' if i == 0 else '':<10} {f['name']}: {short(f['a'])} -> {short(f['b'])}")
    for i, c in enumerate(pair["inputs"]):
        a, b = c["a"] or {}, c["b"] or {}
        lines.append(f"  {'inputs' if i == 0 else '':<10} {c['type']} {a.get('path') or b.get('path')}: "
                     f"{short(a.get('digest'))} -> {short(b.get('digest'))}")
    group("metrics", pair["metrics"])
    group("producer", pair["producer"])
    return [*lines, ""]
