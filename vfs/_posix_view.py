"""``posix_view``: the POSIX extension on top of a tree that has only the eight verbs.

Theory of operation
-------------------
:func:`posix_view` returns a :class:`PosixFileSystem` tree unchanged and wraps any other tree in a
:class:`PosixView`, which is what lets a user's own tree mount and compose with everything.

Directories are derived from the tree: a path with children is a directory. ``mkdir`` cannot make
an empty directory in such a tree, so the view remembers the directories it created that hold no
file yet ("pending" directories, in memory, per view). A pending directory implies its ancestors,
shows in ``list``/``stat`` until it is ``rmdir``'d, and is forgotten once something is created
beneath it through the view (the tree then derives it). Removing the last entry of a directory
through the POSIX verbs (``unlink``, ``rename``, ``rmdir``) keeps the directory as pending, as
POSIX does; the eight verbs keep the tree's own rule (``delete`` of the last file removes it).

Open files are buffers: ``open`` reads the whole file once (the tree's exact bytes where it can
give them, as :func:`vfs._capabilities.read_bytes` says; else ``read()``, text encoded as UTF-8),
reads and writes act on the buffer, and ``flush``/``fsync``/``close`` write the buffer back with
``write`` only when it changed (as ``str`` when it is valid UTF-8 and not an image, else
``bytes``). Write-back errors propagate from ``flush``/``close``. Handles of one path share one
buffer while any of them is open, so two handles and ``setattr(size=)`` see each other's bytes;
``unlink`` (or a rename over the name) detaches the buffer, so a late flush never resurrects a
removed file, and ``rename`` moves the buffer with the file. Creating a file writes it (empty)
at once, so it exists for ``stat``.

Limits, by design: ``rename`` is read + write + delete (a directory moves file by file), so it is
not atomic and a failure midway leaves both names partly populated; ``RENAME_EXCHANGE`` and
symlinks are not supported (``EOPNOTSUPP``); ``readlink`` answers ``EINVAL`` (nothing is a link).
The tree keeps no modes, owners or times, so ``setattr`` accepts and ignores them and only
``size`` changes the file. Bytes that are not UTF-8 in a non-image file come back from the
``read`` of a tree without ``read_bytes`` with replacement characters, so there such a file does
not survive a rename or a truncate (``host_fs`` has ``read_bytes``: its files keep every byte).

Where the tree can give a file's exact bytes (``read_bytes``), the view can too, so that a
wrapper over the view keeps that capability.

Changes: when the wrapped tree is :class:`Watchable`, ``watch`` subscribes to it and the view adds
only its own pending-directory changes; otherwise the view reports every change made through it.
"""

from __future__ import annotations

import builtins
import errno
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

from ._capabilities import list_info, read_bytes
from ._clock import now_ns
from ._content import contents_for, encode_contents
from ._errors import (
    DirectoryNotEmptyError,
    FileExistsError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    NotSupportedError,
    PathError,
)
from ._forward import offer
from ._merge import aclose, merge_sorted, path_key, unique_by_path
from ._paths import ROOT, is_strictly_under, is_under, join_path, normalize_path, parent_path
from ._types import (
    Change,
    ChangeCallback,
    ChangeKind,
    DirEntry,
    DirListing,
    FileInfo,
    FileSystem,
    GrepQuery,
    GrepResult,
    OpenFile,
    PosixFileSystem,
    ReadsBytes,
    SearchQuery,
    SearchResult,
    Watchable,
)
from ._walk import glob_tree, walk
from ._watch import Observers


def posix_view(fs: FileSystem) -> PosixFileSystem:
    """``fs`` itself when it implements :class:`PosixFileSystem`, else a :class:`PosixView`."""
    if isinstance(fs, PosixFileSystem):
        return fs
    return PosixView(fs)


def _resize(data: bytearray, size: int) -> None:
    if size < len(data):
        del data[size:]
    else:
        data.extend(bytes(size - len(data)))


class PosixView:
    """The POSIX extension over an eight-verb tree (see the module docstring)."""

    __slots__ = ("_buffers", "_dirs", "_fs", "_gid", "_observers", "_uid", "_watchable")

    # Open files are whole-file buffers written back on flush/close: a mount must forward FLUSH.
    buffers_writes = True

    def __init__(self, fs: FileSystem) -> None:
        self._fs = fs
        self._dirs: dict[str, int] = {}  # pending directory -> mtime_ns
        self._buffers: dict[str, _Buffer] = {}  # path -> the buffer its open handles share
        self._observers = Observers()
        self._watchable = isinstance(fs, Watchable)
        self._uid = os.getuid()
        self._gid = os.getgid()
        if isinstance(fs, ReadsBytes):
            offer(self, {"read_bytes": PosixView._read_bytes})

    def __repr__(self) -> str:
        return f"posix_view({self._fs!r})"

    @property
    def wrapped(self) -> FileSystem:
        return self._fs

    # Pending directories.

    def _pending(self, path: str) -> int | None:
        """The mtime of a pending directory at ``path`` (or implied by one beneath it)."""
        if path in self._dirs:
            return self._dirs[path]
        for pending, mtime in self._dirs.items():
            if is_strictly_under(pending, path):
                return mtime
        return None

    def _dir_info(self, mtime_ns: int) -> FileInfo:
        return FileInfo(
            "directory", mode=0o755, mtime_ns=mtime_ns, uid=self._uid, gid=self._gid, nlink=2
        )

    def _realized(self, path: str) -> None:
        """Something now exists at ``path`` in the tree: its ancestors are no longer pending."""
        if not self._dirs:
            return
        probe = path
        while probe != ROOT:
            probe = parent_path(probe)
            self._dirs.pop(probe, None)

    async def _keep_ancestors(self, path: str) -> None:
        """After removing ``path``: directories the tree dropped with it stay, as pending."""
        probe = parent_path(path)
        now = now_ns()
        while probe != ROOT and probe not in self._dirs:
            if (await self._fs.stat(probe)).kind != "missing":
                return
            self._dirs[probe] = now
            probe = parent_path(probe)

    async def _has_children(self, path: str) -> bool:
        entries = self.list(path)
        try:
            async for _ in entries:
                return True
            return False
        finally:
            await aclose(entries)

    async def _check_parent(self, path: str) -> None:
        """Creating ``path`` needs an existing parent directory (``ENOENT``/``ENOTDIR``)."""
        parent = parent_path(path)
        if parent == ROOT:
            return
        kind = (await self.stat(parent)).kind
        if kind == "missing":
            raise FileNotFoundError(path)
        if kind != "directory":
            raise NotADirectoryError(path)

    # Changes.

    async def _emit(self, path: str, kind: ChangeKind) -> None:
        """Report a change made through the tree, unless the tree reports it itself."""
        if not self._watchable:
            await self._observers.emit(path, kind)

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        own = self._observers.subscribe(callback)
        if not self._watchable:
            return own

        def forward(change: Change) -> Awaitable[None] | None:
            pending = callback(change)
            if change.kind != "entry" or change.path == ROOT:
                return pending
            return self._report_vanished_parents(change.path, callback, pending)

        inner = cast(Watchable, self._fs).watch(forward)

        def unsubscribe() -> None:
            own()
            inner()

        return unsubscribe

    async def _report_vanished_parents(
        self, path: str, callback: ChangeCallback, pending: Awaitable[None] | None
    ) -> None:
        """The tree's directories exist while they hold something, so a removal at ``path``
        (made through the tree's API) can take its parents with it: report the topmost that is
        gone, as a removal of its own, so that a mount forgets it and lists its parent again."""
        if pending is not None:
            await pending
        gone = None
        probe = parent_path(path)
        while probe != ROOT and (await self.stat(probe)).kind == "missing":
            gone = probe
            probe = parent_path(probe)
        if gone is not None:
            result = callback(Change(gone, "entry"))
            if result is not None:
                await result

    # Buffers of open files.

    def _detach(self, path: str) -> None:
        """The name is gone: its open handles keep their bytes but never write them back."""
        buffer = self._buffers.pop(path, None)
        if buffer is not None:
            buffer.path = None

    async def _write_back(self, path: str, data: bytes) -> None:
        await self._fs.write(path, contents_for(path, data))
        await self._emit(path, "content")

    # The eight verbs.

    def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        path = normalize_path(prefix)
        if not self._dirs:
            return self._fs.list(path)
        depth = 0 if path == ROOT else path.count("/")
        pending = sorted(
            {
                join_path(path, pending.split("/")[depth + 1])
                for pending in self._dirs
                if is_strictly_under(pending, path)
            }
        )
        sources = [self._fs.list(path), _entries(pending)]
        merged = merge_sorted(sources, path_key)
        return unique_by_path(merged)

    async def stat(self, path: str) -> FileInfo:
        path = normalize_path(path)
        info = await self._fs.stat(path)
        if info.kind == "missing":
            mtime = self._pending(path) if self._dirs else None
            if mtime is not None:
                return self._dir_info(mtime)
            if path == ROOT:
                return self._dir_info(0)
        return info

    def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        if not self._dirs:
            return self._fs.glob(pattern, normalize_path(dir))
        return glob_tree(self, pattern, dir)

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        try:
            return await self._fs.read(path)
        except builtins.FileNotFoundError:
            if self._dirs and self._pending(path) is not None:
                raise IsADirectoryError(path) from None
            raise

    async def _read_bytes(self, path: str) -> bytes:
        """The tree's ``read_bytes`` (offered where it has one), as ``read`` answers."""
        path = normalize_path(path)
        try:
            return await cast(ReadsBytes, self._fs).read_bytes(path)
        except builtins.FileNotFoundError:
            if self._dirs and self._pending(path) is not None:
                raise IsADirectoryError(path) from None
            raise

    def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        return self._fs.grep(query)

    async def write(self, path: str, contents: str | bytes) -> None:
        path = normalize_path(path)
        if self._dirs and self._pending(path) is not None:
            raise IsADirectoryError(path)
        await self._fs.write(path, contents)
        self._realized(path)
        buffer = self._buffers.get(path)
        if buffer is not None and not buffer.dirty:
            buffer.data = bytearray(encode_contents(contents))
        await self._emit(path, "entry")

    async def delete(self, path: str) -> None:
        path = normalize_path(path)
        try:
            await self._fs.delete(path)
        except builtins.FileNotFoundError:
            if path not in self._dirs:
                raise
            await self._rmdir_pending(path)
            return
        self._detach(path)
        await self._emit(path, "entry")

    def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        return self._fs.search(query)

    # The POSIX extension.

    async def lstat(self, path: str) -> FileInfo:
        return await self.stat(path)

    async def list_info(self, prefix: str = ROOT) -> DirListing:
        return await list_info(self, prefix)

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
        # ``write`` needs nothing here: a handle only writes back what was written through it,
        # and the kernel enforces the descriptor's access mode.
        path = normalize_path(path)
        info = await self.stat(path)
        buffer = self._buffers.get(path)
        if info.kind == "directory":
            raise IsADirectoryError(path)
        if info.kind == "missing":
            if not create:
                raise FileNotFoundError(path)
            await self._check_parent(path)
            await self._fs.write(path, "")
            self._realized(path)
            self._detach(path)  # a buffer of a name removed behind our back
            buffer = None
            data = bytearray()
            await self._emit(path, "entry")
        elif create and exclusive:
            raise FileExistsError(path)
        elif buffer is not None and buffer.dirty:
            data = buffer.data  # unflushed writes of another handle are the file's bytes
        else:
            data = bytearray(await read_bytes(self._fs, path))
        if truncate and data:
            data = bytearray()
            if buffer is not None:
                buffer.dirty = False
            await self._write_back(path, b"")
        if buffer is None:
            buffer = _Buffer(self, path, data)
            self._buffers[path] = buffer
        else:
            buffer.data = data
        buffer.refs += 1
        return _BufferedFile(buffer)

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        path = normalize_path(path)
        if (await self.stat(path)).exists:
            raise FileExistsError(path)
        await self._check_parent(path)
        self._dirs[path] = now_ns()
        await self._observers.emit(path, "entry")

    async def rmdir(self, path: str) -> None:
        path = normalize_path(path)
        if path == ROOT:
            raise PathError(path, errno=errno.EBUSY)
        kind = (await self.stat(path)).kind
        if kind == "missing":
            raise FileNotFoundError(path)
        if kind != "directory":
            raise NotADirectoryError(path)
        await self._rmdir_pending(path)

    async def _rmdir_pending(self, path: str) -> None:
        if await self._has_children(path):
            raise DirectoryNotEmptyError(path)
        if path not in self._dirs:
            raise NotSupportedError(path)  # an empty directory the tree itself reports
        del self._dirs[path]
        await self._keep_ancestors(path)
        await self._observers.emit(path, "entry")

    async def unlink(self, path: str) -> None:
        path = normalize_path(path)
        kind = (await self.stat(path)).kind
        if kind == "missing":
            raise FileNotFoundError(path)
        if kind == "directory":
            raise IsADirectoryError(path)
        await self._fs.delete(path)
        self._detach(path)
        await self._keep_ancestors(path)
        await self._emit(path, "entry")

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        src = normalize_path(src)
        dst = normalize_path(dst)
        if exchange:
            raise NotSupportedError(src)
        if ROOT in (src, dst):
            raise PathError(ROOT, errno=errno.EBUSY)
        source = await self.stat(src)
        if not source.exists:
            raise FileNotFoundError(src)
        if src == dst:
            return
        if is_strictly_under(dst, src):
            raise PathError(dst, errno=errno.EINVAL)
        target = await self.stat(dst)
        if target.exists and noreplace:
            raise FileExistsError(dst)
        await self._check_parent(dst)
        if source.kind == "directory":
            if target.exists and target.kind != "directory":
                raise NotADirectoryError(dst)
            if target.exists:
                if await self._has_children(dst):
                    raise DirectoryNotEmptyError(dst)
                self._dirs.pop(dst, None)
            await self._move_tree(src, dst)
        else:
            if target.kind == "directory":
                raise IsADirectoryError(dst)
            await self._move_file(src, dst)
        await self._keep_ancestors(src)
        await self._observers.emit(src, "entry")
        await self._observers.emit(dst, "entry")

    async def _move_file(self, src: str, dst: str) -> None:
        buffer = self._buffers.get(src)
        if buffer is not None:
            await buffer.flush()
        contents = await self._fs.read(src)
        await self._fs.write(dst, contents)
        self._realized(dst)
        await self._fs.delete(src)
        self._detach(dst)
        if buffer is not None:
            del self._buffers[src]
            buffer.path = dst
            self._buffers[dst] = buffer

    async def _move_tree(self, src: str, dst: str) -> None:
        files = [entry.path async for entry in walk(self._fs, src) if entry.kind != "directory"]
        for path in files:
            await self._move_file(path, dst + path[len(src) :])
        for pending in [other for other in self._dirs if is_under(other, src)]:
            self._dirs[dst + pending[len(src) :]] = self._dirs.pop(pending)

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
        # Modes, owners and times are accepted and ignored: the tree keeps no such metadata.
        path = normalize_path(path)
        info = await self.stat(path)
        if not info.exists:
            raise FileNotFoundError(path)
        if size is not None:
            if size < 0:
                raise PathError(path, errno=errno.EINVAL)
            if info.kind == "directory":
                raise IsADirectoryError(path)
            buffer = self._buffers.get(path)
            if buffer is not None:
                _resize(buffer.data, size)
                buffer.dirty = True
                await buffer.flush()
            else:
                data = bytearray(await read_bytes(self._fs, path))
                _resize(data, size)
                await self._write_back(path, bytes(data))
        return await self.lstat(path)

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        raise NotSupportedError(normalize_path(path))

    async def readlink(self, path: str) -> str:
        path = normalize_path(path)
        if not (await self.stat(path)).exists:
            raise FileNotFoundError(path)
        raise PathError(path, errno=errno.EINVAL)  # not a symlink


async def _entries(paths: list[str]) -> AsyncIterator[DirEntry]:
    for path in paths:
        yield DirEntry(path, "directory")


class _Buffer:
    """The bytes of one open file, shared by its handles; ``path`` is None once detached."""

    __slots__ = ("data", "dirty", "path", "refs", "view")

    def __init__(self, view: PosixView, path: str, data: bytearray) -> None:
        self.view = view
        self.path: str | None = path
        self.data = data
        self.dirty = False
        self.refs = 0

    async def flush(self) -> None:
        if not self.dirty or self.path is None:
            return
        self.dirty = False  # writes landing during the write-back make it dirty again
        try:
            await self.view._write_back(self.path, bytes(self.data))
        except BaseException:
            self.dirty = True
            raise

    def release(self) -> None:
        self.refs -= 1
        if self.refs <= 0 and self.path is not None:
            buffers = self.view._buffers
            if buffers.get(self.path) is self:
                del buffers[self.path]


class _BufferedFile:
    """An :class:`OpenFile` over a shared :class:`_Buffer`."""

    __slots__ = ("_buffer", "_closed")

    def __init__(self, buffer: _Buffer) -> None:
        self._buffer = buffer
        self._closed = False

    def _live(self) -> _Buffer:
        if self._closed:
            raise PathError(self._buffer.path or "", errno=errno.EBADF)
        return self._buffer

    async def read(self, offset: int, size: int) -> bytes:
        return bytes(self._live().data[offset : offset + size])

    async def write(self, offset: int, data: bytes) -> int:
        buffer = self._live()
        if offset > len(buffer.data):
            _resize(buffer.data, offset)
        buffer.data[offset : offset + len(data)] = data
        buffer.dirty = True
        return len(data)

    async def truncate(self, size: int) -> None:
        buffer = self._live()
        _resize(buffer.data, size)
        buffer.dirty = True

    async def flush(self) -> None:
        await self._live().flush()

    async def fsync(self, datasync: bool = False) -> None:
        await self._live().flush()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._buffer.flush()
        finally:
            self._buffer.release()
