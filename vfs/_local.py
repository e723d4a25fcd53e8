"""``local_file_system``: the host disk itself, as the host-default agent sees it.

Theory of operation
-------------------
This is the tree an agent gets when its author names no ``root``: the host disk, as the native
file tools see it. It is not confined (it *is* the host disk) and it speaks host paths:

* A relative path resolves against ``cwd``; an absolute path is used as-is; ``""`` and ``"."``
  (and every omitted optional scope) mean ``cwd``. ``..`` is resolved lexically
  (``os.path.normpath``), as the native tools do, not by the kernel. A NUL byte or a segment
  longer than 255 bytes (or a lone surrogate that names no byte) is refused with
  ``InvalidPathError``, as every tree refuses them.
* Yielded paths are host paths (``/home/me/repo/src/a.py``), never rewritten to ``/``.
* ``list``/``glob``/``grep`` do not descend directory symlinks (``memory/`` included: it is
  listed as ``symlink``), exactly like native LS/Glob/Grep; an exact-path ``read``/``stat``, and
  the directory a ``list``/``glob``/``grep`` starts from, follow them.
* ``grep`` on a search root that does not exist raises ``FileNotFoundError`` (a host search root
  is an argument the user typed); a missing virtual path yields nothing, but this is not virtual.
* ``search`` is empty: the host index is the native tool's business.

The walks, the atomic ``write`` and the error translation are shared with ``dir_fs``
(``vfs._disk``), including the I/O policy (syscalls inline on the event loop, long walks
yield, big reads on a worker thread) and the mountpoint guard (walks skip a directory this process
is serving as a FUSE mount, so they never read through it). Unlike ``dir_fs`` it crosses every
other mount, as the native tools do: it is the host disk, mounts included.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import posixpath
from collections.abc import AsyncIterator

import anyio.lowlevel

from ._content import decode_contents, encode_contents
from ._dir import DiskFile
from ._disk import (
    O_CLOEXEC,
    O_DIR,
    O_PATH,
    GuardView,
    file_info,
    glob_fd,
    grep_fd,
    guard_view,
    guarded_mountpoints,
    list_fd,
    os_error,
    raise_errno,
    read_whole,
    write_error,
    write_file_at,
)
from ._errors import DirectoryNotEmptyError, FileNotFoundError, InvalidPathError
from ._match import compile_glob, compile_grep
from ._paths import join_path, segment_size
from ._types import (
    MISSING,
    DirEntry,
    FileInfo,
    GrepQuery,
    GrepResult,
    OpenFile,
    SearchQuery,
    SearchResult,
)
from ._walk import glob_start
from ._watch import Observers

_MISSING = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})


def local_file_system(cwd: str | os.PathLike[str]) -> LocalFileSystem:
    """The host disk, with relative paths resolved against ``cwd`` (see the module docstring)."""
    return LocalFileSystem(cwd)


class LocalFileSystem:
    """The eight verbs over the host disk, speaking host paths."""

    __slots__ = ("_cwd",)

    def __init__(self, cwd: str | os.PathLike[str]) -> None:
        self._cwd = "/"
        self._cwd = self.resolve(os.path.abspath(os.fspath(cwd)))

    @property
    def cwd(self) -> str:
        return self._cwd

    def __repr__(self) -> str:
        return f"local_file_system({self._cwd!r})"

    def resolve(self, path: str) -> str:
        """The absolute, lexically normalized host path for ``path``."""
        if not isinstance(path, str):
            raise TypeError(f"path must be str, not {type(path).__name__}")
        if "\0" in path:
            raise InvalidPathError(path.replace("\0", "\\0"), "path contains a NUL byte")
        host = posixpath.normpath(posixpath.join(self._cwd, path) if path else self._cwd)
        if host.startswith("//"):
            host = "/" + host.lstrip("/")  # POSIX lets "//" mean something else; Linux does not
        for segment in host.split("/"):
            segment_size(segment, host)
        return host

    async def list(self, prefix: str = "") -> AsyncIterator[DirEntry]:
        directory = self.resolve(prefix)
        try:
            fd = os.open(directory, O_DIR)
        except OSError as error:
            if error.errno in _MISSING:
                return
            raise os_error(error, directory) from None
        try:
            children = list_fd(fd, *_guard(directory))
        except OSError as error:
            raise os_error(error, directory) from None
        finally:
            os.close(fd)
        for count, (name, kind) in enumerate(children, start=1):
            yield DirEntry(join_path(directory, name), kind)
            if count % 1024 == 0:
                await anyio.lowlevel.checkpoint()

    async def stat(self, path: str) -> FileInfo:
        host = self.resolve(path)
        try:
            return file_info(os.stat(host))
        except OSError as error:
            if error.errno in _MISSING:
                return MISSING
            raise os_error(error, host) from None

    async def glob(self, pattern: str, dir: str = "") -> AsyncIterator[DirEntry]:
        directory = self.resolve(dir)
        plan = compile_glob(pattern)
        start = await glob_start(_lstat, directory, plan.literal_prefix)
        if start is None:
            return
        try:
            fd = os.open(start, O_DIR)
        except OSError as error:
            if error.errno in _MISSING:
                return
            raise os_error(error, directory) from None
        guard, base = _guard(start)
        entries = glob_fd(fd, plan, directory, guard=guard, guard_base=base)
        async with contextlib.aclosing(entries):
            async for entry in entries:
                yield entry

    async def read(self, path: str) -> str | bytes:
        host = self.resolve(path)
        try:
            fd = os.open(host, os.O_RDONLY | os.O_NONBLOCK | O_CLOEXEC)
        except OSError as error:
            if error.errno == errno.ENOTDIR:
                raise FileNotFoundError(host) from None
            raise os_error(error, host) from None
        try:
            data = await read_whole(fd, os.fstat(fd).st_size)
        except OSError as error:
            raise os_error(error, host) from None
        finally:
            os.close(fd)
        return decode_contents(host, data)

    async def open_for_reading(self, path: str) -> OpenFile:
        """A read-only handle on the host file (what ``vfs._reading`` streams from); errors as
        ``read`` raises them."""
        host = self.resolve(path)
        try:
            fd = os.open(host, os.O_RDONLY | os.O_NONBLOCK | O_CLOEXEC)
        except OSError as error:
            if error.errno == errno.ENOTDIR:
                raise FileNotFoundError(host) from None
            raise os_error(error, host) from None
        return DiskFile(fd, host, Observers(), read_only=True)

    async def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        root = self.resolve(query.path)
        compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=root)
        try:
            fd = os.open(root, os.O_RDONLY | os.O_NONBLOCK | O_CLOEXEC)
        except OSError as error:
            if error.errno in _MISSING:
                raise FileNotFoundError(root) from None  # a missing host search root raises
            raise os_error(error, root) from None
        guard, base = _guard(root)
        hits = grep_fd(fd, root, query, guard=guard, guard_base=base)
        async with contextlib.aclosing(hits):
            async for hit in hits:
                yield hit

    async def write(self, path: str, contents: str | bytes) -> None:
        host = self.resolve(path)
        data = encode_contents(contents)
        parent, name = posixpath.split(host)
        if not name:
            raise write_error(OSError(errno.EISDIR, "is a directory"), host)

        def reopen() -> int:
            flags = os.O_WRONLY | os.O_TRUNC | os.O_CREAT | os.O_NONBLOCK | O_CLOEXEC
            return os.open(host, flags, 0o666)

        try:
            try:
                os.makedirs(parent, exist_ok=True)
            except builtins.FileExistsError:
                raise_errno(errno.ENOTDIR)  # a file stands where a parent directory should
            dirfd = os.open(parent, O_PATH | os.O_DIRECTORY | O_CLOEXEC)
            try:
                write_file_at(dirfd, name, data, reopen)
            finally:
                os.close(dirfd)
        except OSError as error:
            raise write_error(error, host) from None

    async def delete(self, path: str) -> None:
        host = self.resolve(path)
        try:
            try:
                os.unlink(host)
            except builtins.IsADirectoryError:
                os.rmdir(host)  # an empty directory goes; a full one refuses
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.ENOTDIR):
                raise FileNotFoundError(host) from None
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise DirectoryNotEmptyError(host) from None
            raise os_error(error, host) from None

    async def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        self.resolve(query.path)
        return
        yield  # no host index here: an async generator that yields nothing


async def _lstat(host: str) -> FileInfo:
    try:
        return file_info(os.lstat(host))
    except OSError:
        return MISSING


def _guard(directory: str) -> tuple[GuardView | None, str]:
    """The mountpoint guard for a walk from host ``directory`` (host paths are tree paths)."""
    snapshot = guarded_mountpoints()
    if not snapshot:
        return None, directory
    return guard_view(snapshot, "/"), directory
