"""The root a sandboxed command sees: the tree, plus the system entries bubblewrap fills.

Theory of operation
-------------------
``mountd run`` binds the mounted tree at the sandbox's ``/`` and then binds the host's ``/usr``
(and ``/bin``, ``/lib*``, ``/sbin`` where the host has directories), a fresh ``/proc`` and
``/dev``, a minimal ``/etc`` and, when the tree has none, a ``/tmp`` over it. Bubblewrap needs those
mount points to exist in the new root, and would ``mkdir`` (or ``symlink``) them in the tree if
they did not, which either fails (a tree that refuses writes there) or shows up in the agent's
changes. So :class:`SandboxRoot` serves them itself, in front of the tree:

- each :class:`SystemEntry` is an empty read-only directory, or a symlink with the host's target
  (``/bin -> usr/bin`` on a merged-``/usr`` host, so ``bwrap`` needs no ``--symlink``, which fails
  on an existing name);
- they are answered by ``lstat``/``stat``/``readlink`` and refuse every change (``EROFS``), but
  ``list("/")`` does **not** show them: ``git status``, ``git add -A`` and ``find /`` at the root
  then never walk into ``/usr`` or ``/proc``, while every path lookup (the kernel's, bwrap's)
  still finds them;
- everything else is the tree's, unchanged, so nothing bubblewrap does reaches the tree; root
  names given as ``unlisted`` are the tree's but, like the system entries, left out of
  ``list("/")`` (``mountd run`` serves the ``--allow`` directories there, for bubblewrap to bind
  from the mount).

The tree must not hold entries of those names at its root (:func:`conflicts` lists them; the
command line refuses to run over such a tree rather than hide part of it). :func:`host_layout`
reads the host's layout once, before anything is mounted.

A tree that does hold such names runs at a directory of its own instead (``mountd run --at
/work``): bubblewrap's root is then its own tmpfs, where it makes the mount points itself, so no
:class:`SandboxRoot` is needed; :func:`sandbox_dir` checks that directory (absolute, and outside
every name the sandbox provides, ``/tmp`` included).
"""

from __future__ import annotations

import builtins
import errno
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import vfs
from vfs._capabilities import buffers_writes, list_info_of, make_link, make_node
from vfs._merge import aclose
from vfs._paths import ROOT, normalize_path, split_path
from vfs._types import ChangeCallback

SYSTEM_DIRS = ("usr", "etc", "proc", "dev")
LINK_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
PROVIDED = (*SYSTEM_DIRS, *LINK_DIRS, "tmp")  # every root name the sandbox may fill

EntryKind = Literal["directory", "symlink"]


@dataclass(frozen=True)
class SystemEntry:
    """A root entry the sandbox provides: ``name``, and a symlink's ``target``.

    ``fill`` says what bubblewrap mounts there: ``ro-bind`` (the host's directory of that name),
    ``proc``, ``dev``, ``etc`` (a minimal read-only ``/etc``), ``tmpfs`` or ``none`` (a symlink).
    """

    name: str
    kind: EntryKind
    fill: str
    target: str | None = None


def host_layout(*, tmp: bool) -> tuple[SystemEntry, ...]:
    """The entries this host needs at a sandbox root; ``tmp`` adds a ``/tmp`` (a tmpfs)."""
    entries = [
        SystemEntry("usr", "directory", "ro-bind"),
        SystemEntry("etc", "directory", "etc"),
        SystemEntry("proc", "directory", "proc"),
        SystemEntry("dev", "directory", "dev"),
    ]
    for name in LINK_DIRS:
        host = "/" + name
        if os.path.islink(host):
            entries.append(SystemEntry(name, "symlink", "none", os.readlink(host)))
        elif os.path.isdir(host):
            entries.append(SystemEntry(name, "directory", "ro-bind"))
    if tmp:
        entries.append(SystemEntry("tmp", "directory", "tmpfs"))
    return tuple(sorted(entries, key=lambda entry: entry.name))


def sandbox_dir(text: str) -> str:
    """The normalized directory ``text`` names for serving a tree inside the sandbox (``--at``);
    ``ValueError`` (with the reason) when it is relative or lies in a name the sandbox provides."""
    if not text.startswith("/"):
        raise ValueError(f"--at {text}: give an absolute directory, e.g. --at /work")
    path = normalize_path(text)
    if path != ROOT and split_path(path)[0] in PROVIDED:
        top = "/" + split_path(path)[0]
        raise ValueError(
            f"--at {text}: inside {top}, which the sandbox provides; choose a directory "
            "elsewhere, e.g. --at /work"
        )
    return path


async def conflicts(tree: vfs.FileSystem, names: Sequence[str]) -> builtins.list[str]:
    """The root entries of ``tree`` that the sandbox would cover (``/usr`` and so on)."""
    view = vfs.posix_view(tree)
    found = []
    for name in names:
        if (await view.lstat("/" + name)).exists:
            found.append("/" + name)
    return found


def sandbox_root(
    tree: vfs.FileSystem, entries: Sequence[SystemEntry], *, unlisted: Sequence[str] = ()
) -> SandboxRoot:
    return SandboxRoot(tree, entries, unlisted=unlisted)


class SandboxRoot:
    """``tree`` with the sandbox's system entries at its root (see the module docstring)."""

    __slots__ = ("_entries", "_info", "_tree", "_unlisted", "_view", "buffers_writes")

    def __init__(
        self, tree: vfs.FileSystem, entries: Sequence[SystemEntry], *, unlisted: Sequence[str] = ()
    ) -> None:
        self._tree = tree
        self._view = vfs.posix_view(tree)
        self._entries = {entry.name: entry for entry in entries}
        # Root names never listed: the system entries, and the tree's own ``unlisted`` ones.
        self._unlisted = frozenset((*self._entries, *unlisted))
        self.buffers_writes = buffers_writes(self._view)
        now = time.time_ns()
        uid, gid = os.getuid(), os.getgid()
        self._info = {
            entry.name: vfs.FileInfo(
                entry.kind,
                len(entry.target or "") if entry.kind == "symlink" else 40,
                mode=0o777 if entry.kind == "symlink" else 0o755,
                mtime_ns=now,
                uid=uid,
                gid=gid,
                atime_ns=now,
                ctime_ns=now,
                nlink=1 if entry.kind == "symlink" else 2,
            )
            for entry in entries
        }

    def __repr__(self) -> str:
        return f"sandbox_root({self._tree!r}, {sorted(self._entries)})"

    @property
    def tree(self) -> vfs.FileSystem:
        return self._tree

    def _system(self, path: str) -> tuple[SystemEntry, bool] | None:
        """The system entry ``path`` is (``True``) or lies beneath (``False``), else ``None``."""
        if path == ROOT:
            return None
        parts = split_path(path)
        entry = self._entries.get(parts[0])
        if entry is None:
            return None
        return entry, len(parts) == 1

    def _refuse(self, path: str) -> NoReturn:
        raise vfs.ReadOnlyMountError(path)

    def _refuse_system(self, *paths: str) -> None:
        for path in paths:
            if self._system(path) is not None:
                self._refuse(path)

    def _lookup(self, path: str, *, follow: bool) -> vfs.FileInfo | None:
        """What a system path is, or ``None`` when the tree answers."""
        found = self._system(path)
        if found is None:
            return None
        entry, exact = found
        if not exact:
            return vfs.FileInfo("missing")
        if entry.kind == "symlink" and follow:
            return vfs.FileInfo("missing")  # its target lies in a (here empty) system directory
        return self._info[entry.name]

    # -- the eight verbs --------------------------------------------------------------------

    def list(self, prefix: str = ROOT) -> AsyncIterator[vfs.DirEntry]:
        path = normalize_path(prefix)
        if self._system(path) is not None:
            return _empty()
        source = self._view.list(path)
        if path != ROOT:
            return source
        return self._hidden(source)

    async def _hidden(self, source: AsyncIterator[vfs.DirEntry]) -> AsyncIterator[vfs.DirEntry]:
        try:
            async for entry in source:
                if split_path(entry.path)[0] not in self._unlisted:
                    yield entry
        finally:
            await aclose(source)

    async def list_info(
        self, prefix: str = ROOT
    ) -> builtins.list[tuple[vfs.DirEntry, vfs.FileInfo]]:
        path = normalize_path(prefix)
        if self._system(path) is not None:
            return []
        listing = await list_info_of(self._view)(path)
        if path != ROOT:
            return listing
        return [(entry, info) for entry, info in listing if entry.path[1:] not in self._unlisted]

    async def stat(self, path: str) -> vfs.FileInfo:
        path = normalize_path(path)
        info = self._lookup(path, follow=True)
        return info if info is not None else await self._view.stat(path)

    def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[vfs.DirEntry]:
        path = normalize_path(dir)
        if self._system(path) is not None:
            return _empty()
        return self._hidden(self._view.glob(pattern, path))

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        found = self._system(path)
        if found is not None:
            if found[1] and found[0].kind == "directory":
                raise vfs.IsADirectoryError(path)
            raise vfs.FileNotFoundError(path)
        return await self._view.read(path)

    def grep(self, query: vfs.GrepQuery) -> AsyncIterator[vfs.GrepResult]:
        if self._system(normalize_path(query.path)) is not None:
            return _empty()
        return self._view.grep(query)

    async def write(self, path: str, contents: str | bytes) -> None:
        path = normalize_path(path)
        self._refuse_system(path)
        await self._view.write(path, contents)

    async def delete(self, path: str) -> None:
        path = normalize_path(path)
        self._refuse_system(path)
        await self._view.delete(path)

    def search(self, query: vfs.SearchQuery) -> AsyncIterator[vfs.SearchResult]:
        return self._view.search(query)

    # -- the POSIX extension ----------------------------------------------------------------

    async def lstat(self, path: str) -> vfs.FileInfo:
        path = normalize_path(path)
        info = self._lookup(path, follow=False)
        return info if info is not None else await self._view.lstat(path)

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
    ) -> vfs.OpenFile:
        path = normalize_path(path)
        found = self._system(path)
        if found is not None:
            if write or create or truncate:
                self._refuse(path)
            if found[1] and found[0].kind == "directory":
                raise vfs.IsADirectoryError(path)
            raise vfs.FileNotFoundError(path)
        return await self._view.open(
            path,
            write=write,
            create=create,
            exclusive=exclusive,
            truncate=truncate,
            mode=mode,
            uid=uid,
            gid=gid,
        )

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        path = normalize_path(path)
        self._new_name(path)
        await self._view.mkdir(path, mode, uid=uid, gid=gid)

    async def rmdir(self, path: str) -> None:
        path = normalize_path(path)
        self._busy(path)
        await self._view.rmdir(path)

    async def unlink(self, path: str) -> None:
        path = normalize_path(path)
        self._busy(path)
        await self._view.unlink(path)

    def _new_name(self, path: str) -> None:
        """Refuse to make ``path`` where a system entry stands or the system owns the place."""
        found = self._system(path)
        if found is not None and found[1]:
            raise vfs.FileExistsError(path)
        self._refuse_system(path)

    def _busy(self, path: str, code: int = errno.EBUSY) -> None:
        """Refuse to change ``path`` where a system entry stands (``code``) or the system
        owns the place."""
        found = self._system(path)
        if found is not None and found[1]:
            raise vfs.PathError(path, errno=code)
        self._refuse_system(path)

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        src = normalize_path(src)
        dst = normalize_path(dst)
        self._busy(src)
        self._busy(dst)
        await self._view.rename(src, dst, noreplace=noreplace, exchange=exchange)

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
    ) -> vfs.FileInfo:
        path = normalize_path(path)
        self._refuse_system(path)
        return await self._view.setattr(
            path, size=size, mode=mode, uid=uid, gid=gid, atime_ns=atime_ns, mtime_ns=mtime_ns
        )

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        path = normalize_path(path)
        self._new_name(path)
        await self._view.symlink(path, target, uid=uid, gid=gid)

    async def mknod(
        self,
        path: str,
        special: vfs.Special,
        *,
        mode: int = 0o644,
        rdev: int = 0,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        path = normalize_path(path)
        self._new_name(path)
        await make_node(self._view, path, special, mode=mode, rdev=rdev, uid=uid, gid=gid)

    async def link(self, src: str, dst: str) -> None:
        src = normalize_path(src)
        dst = normalize_path(dst)
        self._busy(src, errno.EXDEV)  # a system entry is bound from another file system
        self._new_name(dst)
        await make_link(self._view, src, dst)

    async def readlink(self, path: str) -> str:
        path = normalize_path(path)
        found = self._system(path)
        if found is not None:
            entry, exact = found
            if exact and entry.target is not None:
                return entry.target
            if exact:
                raise vfs.PathError(path, errno=errno.EINVAL)
            raise vfs.FileNotFoundError(path)
        return await self._view.readlink(path)

    # -- changes ----------------------------------------------------------------------------

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        if isinstance(self._view, vfs.Watchable):
            return self._view.watch(callback)
        return _nothing


async def _empty() -> AsyncIterator[Any]:
    return
    yield


def _nothing() -> None:
    return None
