"""Atomic writes: a reader sees the old file (or folder), or the complete new one, never half of it.

Every output of a step is written under a temporary name beside its final place and renamed over it
with `os.replace` once it is complete; on an exception the temporary is removed and the final path
is untouched. A process killed mid-write leaves only a hidden `.<name>.<random>.tmp` beside it,
which the next run ignores or tidies.

    atomic.write_text(path, text)                  # a small text file, fsync'ed before the rename
    atomic.write_bytes(path, data)
    with atomic.output_file(path, "w") as f:       # a stream; published when the block ends
        f.write(...)
    with atomic.output_path(path) as temp:         # a temp path, for writers that want a file name
        pq.write_table(table, temp)                #   (pyarrow, matplotlib, torch.save)
    with atomic.output_folder(folder) as staging:  # a folder built whole, then swapped in
        model.save_pretrained(staging)

Files and folders get the permissions the umask allows (0644 / 0755 under the usual umask 022),
like any file a program opens, not the owner-only 0600 / 0700 of `tempfile.mkstemp`/`mkdtemp`: an
artifact folder is meant to be read by other users and services (a shared cluster file system, a
web server showing the report).

An existing folder cannot be renamed over. On Linux `replace_folder` swaps the two folders in one
step (`exchange_folders`: renameat2 with RENAME_EXCHANGE), so the folder's name always holds a
complete folder, the old one or the new one; then it deletes the old one. Where the kernel or the
file system cannot exchange, it moves the old one aside and renames the new one in: between the two
renames (microseconds) the folder is absent, never half written.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

TEMP_SUFFIX = ".tmp"


def temp_path_beside(final: Path | str, suffix: str = TEMP_SUFFIX) -> Path:
    """Create a new empty file `.<name>.<random><suffix>` next to `final` (umask permissions)."""
    final = Path(final)
    while True:
        temp = final.with_name(f".{final.name}.{secrets.token_hex(4)}{suffix}")
        try:
            # 0o666 filtered by the umask, exactly like open(path, "w"); O_EXCL: never reuse a name.
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temp
        except FileExistsError:
            continue


def _temp_folder_beside(final: Path, kind: str) -> Path:
    while True:
        temp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.{kind}")
        try:
            temp.mkdir(mode=0o777)  # filtered by the umask
            return temp
        except FileExistsError:
            continue


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def output_path(path: Path | str, fsync: bool = False) -> Iterator[Path]:
    """Yield a temp file path beside `path`; on success rename it to `path`, on error remove it.

    `fsync=True` flushes the file to disk before the rename, so that after a power loss the new name
    never points at an empty file (worth it for small commit-point files: metadata, receipts).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path_beside(path)
    try:
        yield temp
        if fsync:
            _fsync(temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


@contextmanager
def output_file(path: Path | str, mode: str = "w", fsync: bool = False, **open_kwargs) -> Iterator[IO]:
    """Yield an open stream to a temp file beside `path`; published as `path` when the block ends.

    Text modes default to UTF-8 and "\\n" line endings, so the bytes do not depend on the platform.
    """
    if "b" not in mode:
        open_kwargs.setdefault("encoding", "utf-8")
        open_kwargs.setdefault("newline", "\n")
    with output_path(path, fsync=False) as temp:
        with open(temp, mode, **open_kwargs) as stream:
            yield stream
            if fsync:
                stream.flush()
                os.fsync(stream.fileno())


def write_text(path: Path | str, text: str, fsync: bool = True) -> Path:
    """Write a whole text file atomically (UTF-8, fsync'ed before the rename); returns `path`."""
    with output_file(path, "w", fsync=fsync) as stream:
        stream.write(text)
    return Path(path)


def write_bytes(path: Path | str, data: bytes, fsync: bool = True) -> Path:
    """Write a whole binary file atomically (fsync'ed before the rename); returns `path`."""
    with output_file(path, "wb", fsync=fsync) as stream:
        stream.write(data)
    return Path(path)


@contextmanager
def output_folder(folder: Path | str) -> Iterator[Path]:
    """Yield an empty staging folder beside `folder`; on success it replaces `folder` whole.

    An existing `folder` is replaced only once the new one is complete; on an exception the staging
    folder is deleted and `folder` is left as it was.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = _temp_folder_beside(folder, "tmp")
    try:
        yield staging
        replace_folder(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def replace_folder(new: Path | str, folder: Path | str) -> None:
    """Rename the complete folder `new` to `folder`, deleting what was there (it must be a sibling)."""
    new, folder = Path(new), Path(folder)
    if not folder.exists():
        os.replace(new, folder)
        return
    retired = _temp_folder_beside(folder, "old")
    if exchange_folders(new, folder):
        os.replace(new, retired / folder.name)  # `new` now names the old folder
    else:
        # rename() cannot replace a non-empty folder: move the old one aside, move the new one in.
        os.replace(folder, retired / folder.name)
        os.replace(new, folder)
    shutil.rmtree(retired, ignore_errors=True)


_RENAME_EXCHANGE = 2  # <linux/fs.h>
_AT_FDCWD = -100


def exchange_folders(a: Path | str, b: Path | str) -> bool:
    """Swap two existing paths in one atomic step (Linux renameat2 RENAME_EXCHANGE): True when done.

    False, with nothing changed, where the platform or the file system cannot (not Linux, glibc
    older than 2.28, a file system without the flag): the caller falls back to two renames.
    """
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))
