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
- they are answered by ``lstat``/``stat``/``readlink`` and refuse every change (``EROFS``;
  making a name where one stands is ``EEXIST``, removing or renaming one ``EBUSY``, as for a
  mount point, and linking from one ``EXDEV``), but listings of the root do **not** show them:
  ``git status``, ``git add -A`` and ``find /`` at the root then never walk into ``/usr`` or
  ``/proc``, while every path lookup (the kernel's, bwrap's) still finds them;
- everything else is the tree's, unchanged, so nothing bubblewrap does reaches the tree; root
  names given as ``unlisted`` are the tree's but, like the system entries, left out of
  ``list("/")`` (``mountd run`` serves the ``--allow`` directories there, for bubblewrap to bind
  from the mount).

These rules are one hook around every verb of :mod:`vfs._forward`'s table, by what the verb's
row says it does at each path, so the root has exactly the tree's capabilities (``link``,
``list_info_reusing``...) and a verb the table gains is refused at the system entries too.

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
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import vfs
from vfs import normalize_path
from vfs.lowlevel import ROOT, ForwardingTree, PathArg, Verb, split_path

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


class SandboxRoot(ForwardingTree):
    """``tree`` with the sandbox's system entries at its root (see the module docstring)."""

    __slots__ = ("_entries", "_info", "_tree", "_unlisted")

    def __init__(
        self, tree: vfs.FileSystem, entries: Sequence[SystemEntry], *, unlisted: Sequence[str] = ()
    ) -> None:
        self._tree = tree
        self._entries = {entry.name: entry for entry in entries}
        # Root names never listed: the system entries, and the tree's own ``unlisted`` ones.
        self._unlisted = frozenset((*self._entries, *unlisted))
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
        self._forward_to(vfs.posix_view(tree))

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

    def _listed(self, path: str, kind: str) -> bool:
        """Whether a listing of the root shows ``path`` (anything beneath an unlisted name)."""
        return split_path(path)[0] not in self._unlisted

    # -- every verb -------------------------------------------------------------------------

    async def _around(self, verb: Verb, args: tuple[Any, ...]) -> Any:
        if verb.results:  # list_info and the like
            path = normalize_path(verb.path_values(args)[0])
            if self._system(path) is not None:
                return []
            listing = await verb.call(self._inner, args)
            return listing if path != ROOT else verb.kept(listing, path, self._listed)
        for arg, given in zip(verb.paths, verb.path_values(args), strict=True):
            path = normalize_path(given)
            found = self._system(path)
            if found is None:
                continue
            entry, exact = found
            access = verb.access(arg, args)
            if access == "look":
                return self._answer(verb, arg, path, entry, exact)
            if access == "make" and exact:
                raise vfs.FileExistsError(path)
            if access == "remove" and exact:
                raise vfs.PathError(path, errno=errno.EBUSY)  # a mount point
            if verb.name == "link" and exact:
                raise vfs.PathError(path, errno=errno.EXDEV)  # bound from another file system
            raise vfs.ReadOnlyMountError(path)
        return await verb.call(self._inner, args)

    def _answer(
        self, verb: Verb, arg: PathArg, path: str, entry: SystemEntry, exact: bool
    ) -> vfs.FileInfo | str:
        """What a look at a system path answers: each is an empty directory or a symlink whose
        target lies in one."""
        if verb.name in ("stat", "lstat"):
            if not exact or (entry.kind == "symlink" and arg.follows):
                return vfs.FileInfo("missing")
            return self._info[entry.name]
        if verb.name == "readlink":
            if exact and entry.target is not None:
                return entry.target
            if exact:
                raise vfs.PathError(path, errno=errno.EINVAL)
            raise vfs.FileNotFoundError(path)
        if exact and entry.kind == "directory":
            raise vfs.IsADirectoryError(path)  # read, open...
        raise vfs.FileNotFoundError(path)

    def _around_stream(self, verb: Verb, args: tuple[Any, ...]) -> AsyncIterator[Any]:
        path = normalize_path(verb.path_values(args)[0])
        if self._system(path) is not None:
            return _empty()
        source: AsyncIterator[Any] = verb.call(self._inner, args)
        if path != ROOT or verb.results != "entries":
            return source  # (grep and search hits are the tree's files)
        return verb.kept_stream(source, path, self._listed)


async def _empty() -> AsyncIterator[Any]:
    return
    yield
