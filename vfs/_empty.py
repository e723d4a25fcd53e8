"""``empty_fs``: a tree with no files (an overlay leaf, or a catalog that is missing).

Theory of operation
-------------------
Only the root exists, as an empty directory owned by this process. Walk verbs are empty, ``stat``
of anything but the root is missing, reads miss (``FileNotFoundError``), and every change is
refused with ``ReadOnlyMountError``. Paths are still validated (``normalize_path``) and grep
patterns still compiled, so a bad argument fails here exactly as it does on any other tree. The
tree is :class:`Watchable` for uniformity with the other layers, and never reports a change.
"""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Callable
from typing import NoReturn

from ._clock import now_ns
from ._errors import FileNotFoundError, IsADirectoryError, PathError, ReadOnlyMountError
from ._match import compile_grep
from ._paths import ROOT, normalize_path
from ._types import (
    MISSING,
    ChangeCallback,
    DirEntry,
    FileInfo,
    GrepQuery,
    GrepResult,
    OpenFile,
    SearchQuery,
    SearchResult,
)


class EmptyFileSystem:
    """No files: reads miss, writes are read-only, walks are empty."""

    __slots__ = ("_root",)

    # No file ever opens, so none holds writes back (a union with an empty mount would
    # otherwise count as buffering: see vfs._capabilities.buffers_writes).
    buffers_writes = False

    def __init__(self) -> None:
        now = now_ns()
        self._root = FileInfo(
            "directory",
            40,  # an empty tmpfs directory's size
            mode=0o755,
            mtime_ns=now,
            uid=os.getuid(),
            gid=os.getgid(),
            atime_ns=now,
            ctime_ns=now,
            nlink=2,
        )

    def __repr__(self) -> str:
        return "empty_fs()"

    def _refuse(self, path: str) -> NoReturn:
        raise ReadOnlyMountError(normalize_path(path))

    # -- the eight verbs --------------------------------------------------------------------

    async def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        normalize_path(prefix)
        return
        yield

    async def stat(self, path: str) -> FileInfo:
        return self._root if normalize_path(path) == ROOT else MISSING

    async def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        normalize_path(dir)
        return
        yield

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        if path == ROOT:
            raise IsADirectoryError(path)
        raise FileNotFoundError(path)

    async def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        root = normalize_path(query.path)
        compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=root)
        return
        yield

    async def write(self, path: str, contents: str | bytes) -> None:
        self._refuse(path)

    async def delete(self, path: str) -> None:
        if normalize_path(path) != ROOT:
            raise FileNotFoundError(normalize_path(path))  # missing, as every path but the root
        self._refuse(path)

    async def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        normalize_path(query.path)
        return
        yield

    # -- the POSIX extension ----------------------------------------------------------------

    async def lstat(self, path: str) -> FileInfo:
        return await self.stat(path)

    async def open(
        self,
        path: str,
        *,
        write: bool = False,
        create: bool = False,
        exclusive: bool = False,
        truncate: bool = False,
        mode: int = 0o644,
        uid: int | None = None,
        gid: int | None = None,
    ) -> OpenFile:
        path = normalize_path(path)
        if path == ROOT:
            raise IsADirectoryError(path)
        if create:
            raise ReadOnlyMountError(path)
        raise FileNotFoundError(path)

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        self._refuse(path)

    async def rmdir(self, path: str) -> None:
        self._refuse(path)

    async def unlink(self, path: str) -> None:
        self._refuse(path)

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        normalize_path(dst)
        self._refuse(src)

    async def setattr(
        self,
        path: str,
        *,
        size: int | None = None,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
        atime_ns: int | None = None,
        mtime_ns: int | None = None,
    ) -> FileInfo:
        self._refuse(path)

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        self._refuse(path)

    async def readlink(self, path: str) -> str:
        path = normalize_path(path)
        if path == ROOT:
            raise PathError(path, errno=errno.EINVAL)
        raise FileNotFoundError(path)

    # -- Watchable --------------------------------------------------------------------------

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        return _nothing


def _nothing() -> None:
    return None


def empty_fs() -> EmptyFileSystem:
    """A tree with no files: reads miss, every change raises ``ReadOnlyMountError``."""
    return EmptyFileSystem()
