"""Where data lives: local paths, or object stores through fsspec (`s3://`, `gs://`, `hf://`).

A data-prep run reads its input and writes its shards, receipts and summary through these few
functions, so the same run works on a laptop folder and on a bucket:

    open_read(path)            a seekable binary stream (the shard planner seeks to byte offsets)
    size(path)  exists(path)  sha256(path)  list_names(folder, suffix)  remove(path)
    read_text(path)            write_text(path, text)  (atomic)
    publish(local_file, path)  move a finished local file to its final name (atomic)
    join(folder, name)         a Path for local folders, a "scheme://..." string for URLs
    local_copy(path)           a local file for readers that need one (a URL is downloaded to a temp file)

Local paths go straight to the same calls as before (`open`, `Path.stat`, `nemotron.atomic`), so the
local path costs nothing extra and writes the same bytes.

Atomic on an object store: a run never streams into the final object name. A worker writes a shard
to a local scratch folder, checksums it, and then *publishes* it with one upload (`put_file`). S3
and GCS make an object visible only when its upload completes (a single PUT, or the final
CompleteMultipartUpload of a multipart upload), so a reader sees the whole object or none; a killed
upload leaves nothing under the final name. The receipt is published last, as on a local disk, so it
is still the commit point. There is no rename on an object store, and none is needed.

Endpoints and credentials are the backend's own: s3fs reads the usual AWS variables
(`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL` for an S3-compatible server such
as MinIO or moto), gcsfs the Google ones, `hf://` the Hugging Face token. `s3fs` ships with
nemotron; `gs://` needs `pip install gcsfs`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from nemotron import atomic
from nemotron.errors import NemotronError

PathLike = Path | str
_BACKENDS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "hf": "huggingface_hub"}
_CHUNK = 1 << 20


def is_url(path: PathLike) -> bool:
    """True for "scheme://..." locations (s3://, gs://, hf://, memory://); False for local paths."""
    return "://" in str(path) and not str(path).startswith("file://")


def local(path: PathLike) -> Path:
    """A local location as a Path (file:// URLs included)."""
    return Path(str(path).removeprefix("file://"))


def join(folder: PathLike, *names: str) -> PathLike:
    """`folder/name`: a Path for a local folder, a URL string for a URL."""
    if is_url(folder):
        return "/".join([str(folder).rstrip("/"), *names])
    return local(folder).joinpath(*names)


def filesystem(url: str):
    """(fsspec filesystem, path inside it) for a URL; a missing backend is one clear error."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as error:
        scheme = url.split("://", 1)[0]
        package = _BACKENDS.get(scheme, f"the fsspec backend for {scheme}://")
        raise NemotronError(f"{url}: reading {scheme}:// needs {package}; pip install {package}") from error
    except ValueError as error:
        raise NemotronError(f"{url}: not a storage location fsspec knows ({error})") from error


def _fresh(url: str):
    """The filesystem with its listing cache dropped: other processes (shard workers) write too."""
    fs, path = filesystem(url)
    fs.invalidate_cache()
    return fs, path


def exists(path: PathLike) -> bool:
    if not is_url(path):
        return local(path).is_file()
    fs, inner = _fresh(str(path))
    return fs.isfile(inner)


def size(path: PathLike) -> int:
    if not is_url(path):
        return local(path).stat().st_size
    fs, inner = _fresh(str(path))
    return int(fs.size(inner))


def open_read(path: PathLike) -> IO[bytes]:
    """A binary, seekable stream; URLs read through fsspec in large blocks."""
    if not is_url(path):
        return open(local(path), "rb")
    fs, inner = filesystem(str(path))
    return fs.open(inner, "rb", block_size=8 * _CHUNK)


def sha256(path: PathLike) -> str:
    """Hex sha256 of a file's bytes, streamed (an object is downloaded once, never held whole)."""
    digest = hashlib.sha256()
    with open_read(path) as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_text(path: PathLike) -> str:
    if not is_url(path):
        return local(path).read_text(encoding="utf-8")
    fs, inner = filesystem(str(path))
    try:
        return fs.cat_file(inner).decode("utf-8")
    except FileNotFoundError:
        raise
    except OSError as error:
        raise NemotronError(f"cannot read {path}: {error}") from error


def write_text(path: PathLike, text: str) -> PathLike:
    """Write a whole text file atomically: a local temp + rename, or one PUT of the whole object."""
    if not is_url(path):
        return atomic.write_text(local(path), text)
    fs, inner = filesystem(str(path))
    fs.pipe_file(inner, text.encode("utf-8"))
    return path


def publish(local_file: Path, path: PathLike) -> None:
    """Move the finished `local_file` to `path`: a rename locally, one upload to an object store."""
    if not is_url(path):
        os.replace(local_file, local(path))
        return
    fs, inner = filesystem(str(path))
    fs.put_file(str(local_file), inner)
    local_file.unlink()


def remove(path: PathLike) -> bool:
    """Delete a file if it exists; True if there was one."""
    if not is_url(path):
        if local(path).exists():
            local(path).unlink()
            return True
        return False
    fs, inner = _fresh(str(path))
    if not fs.isfile(inner):
        return False
    fs.rm_file(inner)
    return True


def list_names(folder: PathLike, suffix: str = "") -> list[str]:
    """Sorted names of the files directly in `folder` ending with `suffix` (none if it is missing)."""
    if not is_url(folder):
        folder = local(folder)
        return sorted(p.name for p in folder.glob(f"*{suffix}") if p.is_file()) if folder.is_dir() else []
    fs, inner = _fresh(str(folder))
    try:
        entries = fs.ls(inner, detail=True)
    except FileNotFoundError:
        return []
    names = [entry["name"].rstrip("/").rsplit("/", 1)[-1] for entry in entries if entry["type"] == "file"]
    return sorted(name for name in names if name.endswith(suffix))


def make_folder(folder: PathLike) -> None:
    """Create a local folder (object stores have no folders: a key prefix exists once a key does)."""
    if not is_url(folder):
        local(folder).mkdir(parents=True, exist_ok=True)


@contextmanager
def local_copy(path: PathLike, base_dir: PathLike = ".") -> Iterator[Path]:
    """A local file or folder holding `path`'s data: itself (relative to `base_dir`), or for a URL a
    temporary download of the object, removed when the block ends."""
    if not is_url(path):
        yield local(base_dir) / local(path)
        return
    fs, inner = filesystem(str(path))
    if not fs.isfile(inner):
        raise NemotronError(f"source not found: {path}; check the bucket, the key and the credentials")
    with tempfile.TemporaryDirectory(prefix="nemotron-source-") as folder:
        copy = Path(folder) / inner.rstrip("/").rsplit("/", 1)[-1]
        fs.get_file(inner, str(copy))
        yield copy
