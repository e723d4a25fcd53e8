"""``dir_fs``: a host directory as a tree rooted at ``/``, and nothing outside it.

Theory of operation
-------------------
Confinement. The root is opened once as an ``O_PATH`` directory descriptor and every path is
resolved relative to it, never as a host path string:

* With ``openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`` the kernel resolves the whole path as
  if the root were ``/``: ``..`` stops at the root, and symlinks are followed *inside* the tree,
  an absolute target ``/x`` meaning the tree's ``/x`` (chroot semantics, the same as ``temp_fs``
  and as the kernel applies when the tree is mounted as a sandbox's ``/``). A rename racing with
  the lookup makes the kernel answer ``EAGAIN``; we retry, then fall back to the walk below.
* Without ``openat2`` the same semantics are walked by hand: one segment at a time with
  ``O_PATH | O_NOFOLLOW``, symlinks read and spliced into the remaining path (at most 40), and
  ``..`` popping our own stack of open directories, so it never climbs physically.

A symlink created or swapped in later changes nothing: each call resolves afresh under these rules.
Operations that must not follow the final segment (``lstat``, ``readlink``, ``unlink``, ``rmdir``,
``rename``, ``symlink``, ``mkdir``, ``setattr``, ``delete``) resolve the *parent* directory and
act on the final name with the ``*at`` syscalls and ``AT_SYMLINK_NOFOLLOW``/``O_NOFOLLOW``
(``lstat`` of a deeper path opens the entry itself with ``O_PATH | O_NOFOLLOW`` and ``fstat``s it).

Lookups only (``lstat``, ``stat`` of a non-link, ``readlink``) may take the parent directory from
a small cache of ``O_PATH`` descriptors (:meth:`DirFileSystem._cached_dir`): one ``fstatat`` then
answers instead of a resolution from the root. Only paths without symlinks are cached, resolved
with the same confinement flags (plus ``RESOLVE_NO_SYMLINKS``), so a cached descriptor stands for
exactly one tree path and the final name is still never followed. Changes made through the tree
drop the entries they affect; changes made on the host behind the tree's back are the
trade-off: a directory renamed on the host keeps answering *lookups* for its old tree path until
its entry expires (one second), even when it was moved out of the root. Contents (``read``,
``open``) and every change always resolve afresh, so nothing is ever read from or written to a
directory that left the root. Walks
(``list`` entries, ``glob``, ``grep``) open subdirectories with ``O_NOFOLLOW`` from their parent,
so they never descend a directory symlink; ``list``/``glob``/``grep`` roots and ``stat``/``read``
follow symlinks (inside the tree).

Mounts below the root. A tree does not descend into a mount below its root (as ``find -xdev``
does not), unless made with ``cross_mounts=True``; and no tree ever reaches this process's own
FUSE mountpoints (``vfs._disk.guard_mountpoint``, registered before the mount exists). Both
are one mechanism: a hidden path is missing for ``stat``/``read``, absent from listings and walks,
and ``PermissionDeniedError`` for mutations. It is needed because a FUSE daemon makes these
syscalls on its event loop's thread: through its own mount the request comes back to that
thread, and through a second FUSE mount whose tree reaches back into the first, each daemon waits
for the other, for ever.

What is hidden comes from two snapshots, compared by identity on every operation (no syscall):
the guard's registrations and, unless crossing, the mount table (``vfs._mounts.mountpoints``, at
most ``FRESH_FOR`` seconds old). From them :meth:`DirFileSystem._guards` makes a
``vfs._disk.GuardView``: guarded tree paths, and the ``(st_dev, st_ino)`` of every hidden
mountpoint's covered directory and of the directory holding it, taken without touching the mount
(``readdir`` of the holder reports the covered directory's inode). While anything is hidden,
resolution adds ``RESOLVE_NO_XDEV``: a path that crosses any mount is re-walked by hand, one
segment at a time, and a crossing is hidden when the tree hides every mount (else when it is a
guarded mountpoint by its identity). When a guarded mountpoint lies under this root,
``RESOLVE_NO_SYMLINKS`` too (a path through symlinks is re-walked by hand, which knows the
canonical path to compare: a guarded directory is hidden before it is mounted on). Nothing is
ever ``stat``ed across a mount crossing before it is checked. A final name is checked that way
only in a directory holding a hidden mountpoint (by its identity): no other directory can have
one among its names. Listings drop hidden names by the identity ``readdir`` reports, before
anything is ``stat``ed. A mount made after the last look at the table is refused at once inside
a path while the tree hides anything at all (as a daemon's tree always does: its own mountpoint),
since resolution then crosses no mount; as a final name or a listed entry, and in a tree that hid
nothing until then, it is caught once the snapshot has caught up (within ``FRESH_FOR``). The root itself must not be at or
under a guarded mountpoint when the tree is made (to serve a directory over itself, make the tree
before guarding and mounting: its descriptor then holds the covered directory); a root that is
itself a mount, or lies inside one, is fine.

``read_only=True`` refuses every mutation with ``ReadOnlyMountError`` before touching the disk;
handles are opened read-only.

Strict mode (``strict=True``, or :meth:`DirFileSystem.strict_view` of a tree) is for writing back
changes someone else made (``cow_fs``'s apply): a tree path names exactly one host entry or
nothing. Every resolution uses ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV
| RESOLVE_NO_MAGICLINKS)``, with no fallback: a symlink in any component (the final one too, for
calls that follow it) and any mount crossing (a bind mount inside the root, the final name too:
changes act on a name only after checking that it is no mount point) raise
:class:`vfs._errors.UnsafePathError` naming the path. Without ``openat2`` (or past ``PATH_MAX``)
the hand walk refuses the same, comparing each step's mount id with the root's. The parent cache
is not used for lookups (a strict view shares it only to drop what its changes affect).
``write`` always writes a new file and renames it over the old one (never through a hard link or
a symlink, never into a FIFO), and no mode set through the tree keeps a set-user-ID or
set-group-ID bit (``0o6000`` is cleared from ``open``, ``mkdir``, ``mknod`` and ``setattr``
modes, and from a replaced file's kept mode).

I/O policy. Local-disk syscalls are short and bounded, so they run directly on the event loop
thread (a worker-thread hop costs more than the syscall it would carry). ``fsync`` and reads of
big files go to a worker thread; walks yield to the loop every few dozen entries.

Errors are translated from ``OSError`` by errno in this module only (``vfs._disk.os_error``),
always about the tree path (``/a.txt``), never the host path.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import stat
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from time import monotonic

import anyio.lowlevel
import anyio.to_thread

from ._content import decode_contents, encode_contents
from ._disk import (
    NODE_PLACEHOLDER_MODE,
    NODE_XATTR,
    O_CLOEXEC,
    O_DIR,
    O_PATH,
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    RESOLVE_BENEATH,
    RESOLVE_IN_ROOT,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    RESOLVE_NO_XDEV,
    GuardView,
    Mountpoint,
    as_node,
    chmod_nofollow,
    data_extents,
    file_info,
    glob_fd,
    grep_fd,
    guard_view,
    guarded_mountpoints,
    have_openat2,
    is_node_placeholder,
    list_fd,
    list_info_fd,
    memory_backed,
    mounts_below,
    node_record,
    openat2,
    os_error,
    raise_errno,
    read_fd,
    read_node,
    read_whole,
    renameat2,
    with_mounts,
    write_all,
    write_error,
    write_file_at,
)
from ._errors import (
    FileNotFoundError,
    InvalidPathError,
    IsADirectoryError,
    PathError,
    PermissionDeniedError,
    ReadOnlyMountError,
    UnsafePathError,
)
from ._match import compile_glob, compile_grep
from ._mounts import mountpoints
from ._paths import ROOT, base_name, is_under, join_path, normalize_path, parent_path, split_path
from ._resolve import drive_sync, resolution
from ._types import (
    MISSING,
    SPECIAL_TYPE_BITS,
    ChangeCallback,
    DirEntry,
    DirListing,
    FileInfo,
    GrepQuery,
    GrepResult,
    Kind,
    NamedListing,
    OpenFile,
    SearchQuery,
    SearchResult,
    Special,
    dir_listing,
)
from ._walk import glob_start
from ._watch import Observers

_HOST_NODE_TYPES = frozenset({"fifo", "socket"})  # device nodes are emulated: DirFileSystem.mknod


def _info_at(st: os.stat_result, dirfd: int, name: str, dev: int) -> FileInfo:
    """The FileInfo of the entry ``name`` in ``dirfd`` that ``st`` describes (an emulated device
    node shown as one), with its host inode number if it is on device ``dev`` (the root's)."""
    info = file_info(st, dev)
    return as_node(info, f"/proc/self/fd/{dirfd}/{name}") if is_node_placeholder(st) else info


def _info_fd(st: os.stat_result, fd: int, dev: int) -> FileInfo:
    info = file_info(st, dev)
    return as_node(info, f"/proc/self/fd/{fd}", follow=True) if is_node_placeholder(st) else info


def _make_node_placeholder(dirfd: int, name: str, special: Special, rdev: int, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=dirfd)
    try:
        os.fchmod(fd, NODE_PLACEHOLDER_MODE)
        os.setxattr(fd, NODE_XATTR, node_record(special, rdev, mode))
    except OSError as error:
        os.close(fd)
        fd = -1
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dirfd)
        if error.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise_errno(errno.EPERM)  # no user xattrs here: no way to keep a node
        raise
    finally:
        if fd >= 0:
            os.close(fd)


def _set_node_mode(dirfd: int, name: str, mode: int) -> bool:
    """Change the recorded mode of an emulated device node (its placeholder keeps its own);
    False when ``name`` is no such node."""
    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    if not is_node_placeholder(st):
        return False
    where = f"/proc/self/fd/{dirfd}/{name}"
    node = read_node(where, follow=False)
    if node is None:
        return False
    special, rdev, _ = node
    os.setxattr(where, NODE_XATTR, node_record(special, rdev, mode), follow_symlinks=False)
    return True


_DIR_CACHE_SIZE = 64  # directory descriptors a tree keeps open for resolving parents
_DIR_CACHE_TTL = 1.0  # seconds a cached directory is trusted to still be at its tree path
_RETRIES = 8
_MISSING = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
_NO_SET_ID = 0o7777 & ~(stat.S_ISUID | stat.S_ISGID)


class _Hidden(Exception):
    """The path is (under) a guarded mountpoint."""


def dir_fs(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    cross_mounts: bool = False,
    strict: bool = False,
    set_id: bool = True,
) -> DirFileSystem:
    """The host directory ``path`` as a tree rooted at ``/`` (see the module docstring; ``strict``:
    its strict mode, which follows no symlink, crosses no mount and sets no set-id bit).
    ``set_id=False``: no set-id bit is set through it either (a mode asking for one gets the
    other bits), for a directory that a less trusted user writes on the host.

    Mounts below ``path`` are not part of the tree, as ``find -xdev`` leaves them out: a
    mountpoint is missing for ``stat``/``read``, absent from listings and walks, and
    ``PermissionDeniedError`` for changes. With ``cross_mounts=True`` the tree shows what is
    mounted there instead (only this process's own FUSE mountpoints stay hidden); a tree that
    serves a mount must then not reach another mount that can reach it back, or both wait for
    each other.

    Raises ``FileNotFoundError``/``NotADirectoryError`` (about the host path) when ``path`` is not
    a directory, and ``PermissionDeniedError`` when it is at or under a guarded mountpoint.
    """
    return DirFileSystem(
        path, read_only=read_only, cross_mounts=cross_mounts, strict=strict, set_id=set_id
    )


class DirFileSystem:
    """A confined host directory: :class:`vfs.FileSystem`, :class:`vfs.PosixFileSystem` and
    :class:`vfs.Watchable` (reports the changes made through it, not those made on the disk)."""

    __slots__ = (
        "__weakref__",
        "_close",
        "_cross_mounts",
        "_dev",
        "_dirs",
        "_guard_snapshot",
        "_guard_view",
        "_mounts_below",
        "_mounts_snapshot",
        "_observers",
        "_openat2",
        "_origin",
        "_read_only",
        "_real",
        "_root",
        "_root_checks_names",
        "_root_mount",
        "_set_id",
        "_strict",
    )

    # Handles are real descriptors: writes reach the host file at once, flush has nothing to do.
    buffers_writes = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        cross_mounts: bool = False,
        use_openat2: bool | None = None,
        strict: bool = False,
        set_id: bool = True,
    ) -> None:
        host = os.path.abspath(os.fspath(path))
        _refuse_guarded_root(host, guarded_mountpoints())
        try:
            root = os.open(host, O_PATH | os.O_DIRECTORY | O_CLOEXEC)
        except OSError as error:
            raise os_error(error, host) from None
        self._root = root
        # Entries on the root's device show their host inode numbers (FileInfo.ino): unique
        # there, while another device below (a btrfs subvolume, a crossed mount) reuses them.
        self._dev = os.fstat(root).st_dev
        self._dirs: OrderedDict[str, _CachedDir] = OrderedDict()
        self._close = weakref.finalize(self, _close_all, root, self._dirs)
        self._real = _fd_path(root, host)
        try:
            _refuse_guarded_root(self._real, guarded_mountpoints())
        except PermissionDeniedError:
            self._close()
            raise PermissionDeniedError(host) from None
        self._read_only = read_only
        # Strict mode refuses mounts (UnsafePathError) rather than leave them out.
        self._cross_mounts = cross_mounts or strict
        self._observers = Observers()
        self._openat2 = have_openat2() if use_openat2 is None else use_openat2 and have_openat2()
        self._guard_snapshot: tuple[Mountpoint, ...] = ()
        self._guard_view: GuardView | None = None
        self._mounts_snapshot: tuple[str, ...] = ()  # the mount table the view was made from
        self._mounts_below: tuple[str, ...] = ()  # its mountpoints below the root (tree paths)
        self._root_checks_names = False  # the root holds a hidden mountpoint
        self._strict = strict
        self._set_id = set_id and not strict
        self._root_mount = _mount_id(root) if strict else -1
        self._origin: DirFileSystem | None = None

    @property
    def host_root(self) -> str:
        """Where this tree's root directory is on the host now (the kernel's name for it)."""
        return _fd_path(self._root, self._real)

    def strict_view(self) -> DirFileSystem:
        """This tree in strict mode (see the module docstring): the same root directory, a
        descriptor of its own; its changes drop the entries they affect from this tree's cache
        and are reported to this tree's watchers."""
        view = object.__new__(DirFileSystem)
        root = os.dup(self._root)
        view._root = root
        view._dev = self._dev
        view._dirs = self._dirs  # shared for forgetting only: strict lookups never use it
        view._close = weakref.finalize(view, _close_all, root, OrderedDict())
        view._real = self._real
        view._read_only = self._read_only
        view._cross_mounts = True  # not hidden: strict mode refuses every mount crossing, loudly
        view._observers = self._observers
        view._openat2 = self._openat2
        view._guard_snapshot = ()
        view._guard_view = None
        view._mounts_snapshot = ()
        view._mounts_below = ()
        view._root_checks_names = False
        view._strict = True
        view._set_id = False
        view._root_mount = _mount_id(root)
        view._origin = self  # keeps this tree (and its cache's descriptors) alive
        return view

    @property
    def strict(self) -> bool:
        """Whether this tree is in strict mode (see the module docstring)."""
        return self._strict

    def close(self) -> None:
        """Close the root descriptor (and cached directories) now (they are also closed when the
        tree is collected)."""
        self._close()

    def __repr__(self) -> str:
        flags = ", read_only=True" if self._read_only else ""
        flags += ", strict=True" if self._strict else ""
        flags += ", set_id=False" if not self._set_id and not self._strict else ""
        flags += ", cross_mounts=True" if self._cross_mounts and not self._strict else ""
        return f"dir_fs({self._real!r}{flags})"

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        return self._observers.subscribe(callback)

    # ----------------------------------------------------------------------------------------
    # The eight verbs

    async def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        path = normalize_path(prefix)
        guard = self._guards()
        try:
            fd, canonical = self._open(path, O_DIR, guard)
        except _Hidden:
            return
        except OSError as error:
            if error.errno in _MISSING:
                return
            raise os_error(error, path) from None
        try:
            children = list_fd(fd, guard, canonical)
        except OSError as error:
            raise os_error(error, path) from None
        finally:
            os.close(fd)
        for count, (name, kind) in enumerate(children, start=1):
            yield DirEntry(join_path(path, name), kind)
            if count % 1024 == 0:
                await anyio.lowlevel.checkpoint()

    async def stat(self, path: str) -> FileInfo:
        path = normalize_path(path)
        guard = self._guards()
        if guard is None:
            # Most names are not symlinks: an lstat answers them with the fewest syscalls.
            try:
                with self._at(path, None, looking=True) as (dirfd, name):
                    found = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                    if not stat.S_ISLNK(found.st_mode):
                        return _info_at(found, dirfd, name, self._dev)
            except OSError as error:
                if error.errno in _MISSING:
                    return MISSING
                raise os_error(error, path) from None
        try:
            fd, _ = self._open(path, O_PATH, guard)
        except _Hidden:
            return MISSING
        except OSError as error:
            if error.errno in _MISSING:
                return MISSING
            raise os_error(error, path) from None
        try:
            return _info_fd(os.fstat(fd), fd, self._dev)
        finally:
            os.close(fd)

    async def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        directory = normalize_path(dir)
        plan = compile_glob(pattern)
        start = await glob_start(self.lstat, directory, plan.literal_prefix)
        if start is None:
            return
        guard = self._guards()
        try:
            fd, canonical = self._open(normalize_path(start), O_DIR, guard)
        except _Hidden:
            return
        except OSError as error:
            if error.errno in _MISSING:
                return
            raise os_error(error, directory) from None
        entries = glob_fd(fd, plan, directory, guard=guard, guard_base=canonical)
        async with contextlib.aclosing(entries):
            async for entry in entries:
                yield entry

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        try:
            fd, _ = self._open(path, os.O_RDONLY | os.O_NONBLOCK, self._guards())
        except _Hidden:
            raise FileNotFoundError(path) from None
        except OSError as error:
            if error.errno == errno.ENOTDIR:
                raise FileNotFoundError(path) from None
            raise os_error(error, path) from None
        try:
            data = await read_whole(fd, os.fstat(fd).st_size)
        except OSError as error:
            raise os_error(error, path) from None
        finally:
            os.close(fd)
        return decode_contents(path, data)

    async def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        root = normalize_path(query.path)
        compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=root)
        guard = self._guards()
        try:
            fd, canonical = self._open(root, os.O_RDONLY | os.O_NONBLOCK, guard)
        except _Hidden:
            return
        except OSError as error:
            if error.errno in _MISSING:
                return  # a missing virtual path yields nothing
            raise os_error(error, root) from None
        hits = grep_fd(fd, root, query, guard=guard, guard_base=canonical)
        async with contextlib.aclosing(hits):
            async for hit in hits:
                yield hit

    async def write(self, path: str, contents: str | bytes) -> None:
        path = normalize_path(path)
        data = encode_contents(contents)
        self._refuse_read_only(path)
        if path == ROOT:
            raise IsADirectoryError(path)
        guard = self._guards()

        def reopen() -> int:
            flags = os.O_WRONLY | os.O_TRUNC | os.O_CREAT | os.O_NONBLOCK
            return self._open(path, flags, guard, mode=0o666)[0]

        try:
            created_dir = self._make_parents(path, guard)
            with self._at(path, guard) as (dirfd, name):
                created = write_file_at(dirfd, name, data, reopen, in_place=not self._strict)
        except _Hidden:
            raise PermissionDeniedError(path) from None
        except OSError as error:
            raise write_error(error, path) from None
        if created_dir is not None:
            self._forget_dirs(created_dir)
            await self._observers.emit(created_dir, "entry")
        else:
            await self._observers.emit(path, "entry" if created else "content")

    def read_entries(
        self, paths: Iterable[str], limit: int
    ) -> builtins.list[tuple[FileInfo, bytes | None]]:
        """What ``lstat`` answers for each of ``paths`` and, for a regular file smaller than
        ``limit``, its bytes, in one go: many changed files without a trip each through
        :meth:`lstat` and :meth:`open` (one resolution and one descriptor a file). Synchronous,
        so the files are read as of one moment of the event loop. Each entry is opened for
        reading (a FIFO without blocking): meant for a tree whose device nodes are emulated, as
        this tree's ``mknod`` makes them (a checkpoint of a durable upper)."""
        guard = self._guards()
        found: builtins.list[tuple[FileInfo, bytes | None]] = []
        for path in paths:
            path = normalize_path(path)
            try:
                flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
                fd, _ = self._open(path, flags, guard, follow=False)
            except _Hidden:
                found.append((MISSING, None))
                continue
            except OSError:  # a symlink, a socket, no permission...: as lstat tells it
                found.append((self._lstat(path, guard), None))
                continue
            try:
                st = os.fstat(fd)
                info = _info_fd(st, fd, self._dev)
                data = None
                if stat.S_ISREG(st.st_mode) and info.special is None and st.st_size < limit:
                    data = read_fd(fd, st.st_size)
                found.append((info, data))
            except OSError:
                found.append((self._lstat(path, guard), None))
            finally:
                os.close(fd)
        return found

    def create_files(self, directory: str, files: Mapping[str, bytes]) -> None:
        """Create each of ``files`` (name -> bytes) in ``directory``, each whole or not at all
        (written under a stage name, then renamed over the name): a content-addressed store's
        write, which tells no watcher (nothing is served from it)."""
        directory = normalize_path(directory)
        self._refuse_read_only(directory)
        if not files:
            return
        try:
            dirfd, _ = self._open(directory, os.O_RDONLY | os.O_DIRECTORY, self._guards())
        except _Hidden:
            raise PermissionDeniedError(directory) from None
        except OSError as error:
            raise os_error(error, directory) from None
        try:
            for name, data in files.items():
                stage = f"{name}.stage"
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | O_CLOEXEC
                fd = os.open(stage, flags, 0o600, dir_fd=dirfd)
                try:
                    write_all(fd, data, 0)
                finally:
                    os.close(fd)
                os.rename(stage, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except OSError as error:
            raise write_error(error, join_path(directory, name)) from None
        finally:
            os.close(dirfd)

    async def delete(self, path: str) -> None:
        path = normalize_path(path)
        if self._read_only and not (await self.lstat(path)).exists:
            raise FileNotFoundError(path)  # nothing to refuse: the contract's answer is "missing"
        self._refuse_read_only(path)
        if path == ROOT:
            raise PathError(path, errno=errno.EBUSY)
        try:
            with self._at(path, self._guards()) as (dirfd, name):
                try:
                    os.unlink(name, dir_fd=dirfd)
                except builtins.IsADirectoryError:
                    os.rmdir(name, dir_fd=dirfd)  # an empty directory goes; a full one refuses
        except _Hidden:
            raise PermissionDeniedError(path) from None
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.ENOTDIR):
                raise FileNotFoundError(path) from None
            raise os_error(error, path) from None
        self._forget_dirs(path)
        await self._observers.emit(path, "entry")

    async def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        normalize_path(query.path)
        return
        yield  # no index: an async generator that yields nothing

    # ----------------------------------------------------------------------------------------
    # The POSIX extension

    async def lstat(self, path: str) -> FileInfo:
        return self._lstat(normalize_path(path), self._guards())

    def _lstat(self, path: str, guard: GuardView | None) -> FileInfo:
        try:
            fast = None if path == ROOT else self._in_parent(path, guard)
            if fast is not None:
                # One fstatat in the (cached) parent directory.
                found = os.stat(fast[1], dir_fd=fast[0], follow_symlinks=False)
                return _info_at(found, fast[0], fast[1], self._dev)
            # The entry itself, resolved once under the confinement rules with a final symlink
            # not followed, then fstat: fewer calls than resolving the parent and, under a
            # guard, checking the final name for a mount crossing separately.
            fd, _ = self._open(path, O_PATH, guard, follow=False)
        except _Hidden:
            return MISSING
        except OSError as error:
            if error.errno in _MISSING:
                return MISSING
            raise os_error(error, path) from None
        try:
            return _info_fd(os.fstat(fd), fd, self._dev)
        finally:
            os.close(fd)

    async def list_info(self, prefix: str = ROOT) -> DirListing:
        path = normalize_path(prefix)
        return dir_listing(path, self._children(path, None))

    async def list_info_reusing(self, prefix: str, known: Mapping[str, FileInfo]) -> NamedListing:
        # A name whose inode readdir reports unchanged takes the caller's FileInfo without an
        # fstatat: ~1 us an entry instead of ~8 (see vfs.ListsReusing).
        return self._children(normalize_path(prefix), known)

    def _children(self, path: str, known: Mapping[str, FileInfo] | None) -> NamedListing:
        guard = self._guards()
        try:
            fd, canonical = self._open(path, O_DIR, guard)
        except _Hidden:
            return []
        except OSError as error:
            if error.errno in _MISSING:
                return []
            raise os_error(error, path) from None
        try:
            return list_info_fd(fd, guard, canonical, known, self._dev)
        except OSError as error:
            raise os_error(error, path) from None
        finally:
            os.close(fd)

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
        if write or create or truncate:
            self._refuse_read_only(path)
        guard = self._guards()
        # A read-only handle opens the host file read-only: mode 0444 files stay readable by a
        # non-root daemon, and nothing written through this handle can reach the disk.
        access = os.O_RDWR if (write or create or truncate) else os.O_RDONLY
        base = os.O_NONBLOCK | (os.O_TRUNC if truncate else 0)
        created = False
        try:
            if create and exclusive:
                fd = self._open(path, access | base | os.O_CREAT | os.O_EXCL, guard, mode=0o600)[0]
                created = True
            else:
                fd, created = self._open_existing(path, access, base, create, guard)
            try:
                info = os.fstat(fd)
                if stat.S_ISDIR(info.st_mode):
                    raise_errno(errno.EISDIR)
                if created:
                    _own(fd, info, uid, gid)
                    os.fchmod(fd, self._mode_bits(mode))
            except BaseException:
                os.close(fd)
                raise
        except _Hidden:
            if create:
                raise PermissionDeniedError(path) from None
            raise FileNotFoundError(path) from None
        except OSError as error:
            raise os_error(error, path) from None
        if created:
            await self._observers.emit(path, "entry")
        elif truncate:
            await self._observers.emit(path, "content")
        return DiskFile(fd, path, self._observers, read_only=self._read_only, dev=self._dev)

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        path = normalize_path(path)
        self._refuse_read_only(path)
        try:
            with self._at(path, self._guards()) as (dirfd, name):
                os.mkdir(name, 0o700, dir_fd=dirfd)
                if uid is not None or gid is not None:
                    _chown_at(dirfd, name, uid, gid)
                chmod_nofollow(dirfd, name, self._mode_bits(mode))  # exact, whatever the umask
        except _Hidden:
            raise PermissionDeniedError(path) from None
        except OSError as error:
            raise os_error(error, path) from None
        self._forget_dirs(path)  # a directory removed behind the tree's back may be cached
        await self._observers.emit(path, "entry")

    async def rmdir(self, path: str) -> None:
        path = normalize_path(path)
        self._refuse_read_only(path)
        if path == ROOT:
            raise PathError(path, errno=errno.EBUSY)
        await self._remove(path, lambda dirfd, name: os.rmdir(name, dir_fd=dirfd), forget=True)

    async def unlink(self, path: str) -> None:
        path = normalize_path(path)
        self._refuse_read_only(path)
        if path == ROOT:
            raise IsADirectoryError(path)
        await self._remove(path, lambda dirfd, name: os.unlink(name, dir_fd=dirfd), forget=False)

    async def unlink_keeping(self, path: str, *, write: bool = False) -> DiskFile | None:
        """:meth:`unlink`, answering a descriptor of the removed file when it was a regular
        file, opened in the same parent just before the name goes (see
        :class:`vfs.lowlevel.UnlinksKeeping`)."""
        path = normalize_path(path)
        self._refuse_read_only(path)
        if path == ROOT:
            raise IsADirectoryError(path)
        kept: list[int] = []

        def remove(dirfd: int, name: str) -> None:
            fd = _open_regular(dirfd, name, write=write)
            try:
                os.unlink(name, dir_fd=dirfd)
            except BaseException:
                if fd is not None:
                    os.close(fd)
                raise
            if fd is not None:
                kept.append(fd)

        await self._remove(path, remove, forget=False)
        if not kept:
            return None
        return DiskFile(kept[0], path, self._observers, read_only=self._read_only, dev=self._dev)

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        src = normalize_path(src)
        dst = normalize_path(dst)
        self._refuse_read_only(src)
        if noreplace and exchange:
            raise PathError(src, errno=errno.EINVAL)
        flags = (RENAME_NOREPLACE if noreplace else 0) | (RENAME_EXCHANGE if exchange else 0)
        guard = self._guards()
        try:
            with (
                self._at(src, guard, denied=src) as at_src,
                self._at(dst, guard, denied=dst) as at_dst,
            ):
                renameat2(at_src[0], at_src[1], at_dst[0], at_dst[1], flags)
        except OSError as error:
            about_dst = error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR)
            raise os_error(error, dst if about_dst else src) from None
        self._forget_dirs(src, dst)
        await self._observers.emit(src, "entry")
        await self._observers.emit(dst, "entry")

    async def link(self, src: str, dst: str) -> None:
        """A hard link inside the host directory: both names are resolved beneath the root and
        the final one is never followed (a symlink is linked as itself), so no name made here
        reaches a file outside the root."""
        src = normalize_path(src)
        dst = normalize_path(dst)
        self._refuse_read_only(dst)
        guard = self._guards()
        try:
            with (
                self._at(src, guard, denied=src) as at_src,
                self._at(dst, guard, denied=dst) as at_dst,
            ):
                os.link(
                    at_src[1],
                    at_dst[1],
                    src_dir_fd=at_src[0],
                    dst_dir_fd=at_dst[0],
                    follow_symlinks=False,
                )
        except OSError as error:
            raise os_error(error, dst if error.errno == errno.EEXIST else src) from None
        self._forget_dirs(dst)
        await self._observers.emit(dst, "entry")
        await self._observers.emit(src, "metadata")  # one link more, a new ctime

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
        path = normalize_path(path)
        changes_anything = any(v is not None for v in (size, mode, uid, gid, atime_ns, mtime_ns))
        if changes_anything:
            self._refuse_read_only(path)
        try:
            with self._at(path, self._guards(), denied=path) as (dirfd, name):
                if size is not None:
                    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC
                    fd = os.open(name, flags, dir_fd=dirfd)
                    try:
                        os.ftruncate(fd, size)
                    finally:
                        os.close(fd)
                if uid is not None or gid is not None:
                    _chown_at(dirfd, name, uid, gid)  # before chmod: chown clears set-id bits
                if mode is not None and not _set_node_mode(dirfd, name, self._mode_bits(mode)):
                    chmod_nofollow(dirfd, name, self._mode_bits(mode))
                if atime_ns is not None or mtime_ns is not None:
                    if atime_ns is None or mtime_ns is None:
                        now = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                        atime_ns = now.st_atime_ns if atime_ns is None else atime_ns
                        mtime_ns = now.st_mtime_ns if mtime_ns is None else mtime_ns
                    os.utime(name, ns=(atime_ns, mtime_ns), dir_fd=dirfd, follow_symlinks=False)
                found = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                info = _info_at(found, dirfd, name, self._dev)
        except OSError as error:
            raise os_error(error, path) from None
        if size is not None:
            await self._observers.emit(path, "content")
        elif changes_anything:
            await self._observers.emit(path, "metadata")
        return info

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        path = normalize_path(path)
        self._refuse_read_only(path)
        if "\0" in target:
            raise InvalidPathError(path, "symlink target contains a NUL byte")
        try:
            with self._at(path, self._guards(), denied=path) as (dirfd, name):
                os.symlink(target, name, dir_fd=dirfd)
                if uid is not None or gid is not None:
                    _chown_at(dirfd, name, uid, gid)
        except OSError as error:
            raise os_error(error, path) from None
        self._forget_dirs(path)  # a directory removed behind the tree's back may be cached
        await self._observers.emit(path, "entry")

    async def mknod(
        self,
        path: str,
        special: Special,
        *,
        mode: int = 0o644,
        rdev: int = 0,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        """A FIFO or a socket in the host directory. A device node is never made on the host (it
        would be a real device there for anyone who can open it): it is emulated by an empty
        regular file (mode 1600) recording the node in an xattr (see ``vfs._disk``), and is
        shown as the node; where the host has no user xattrs, it is refused (``EPERM``)."""
        path = normalize_path(path)
        self._refuse_read_only(path)
        try:
            with self._at(path, self._guards(), denied=path) as (dirfd, name):
                if special not in _HOST_NODE_TYPES:
                    _make_node_placeholder(dirfd, name, special, rdev, self._mode_bits(mode))
                    if uid is not None or gid is not None:
                        _chown_at(dirfd, name, uid, gid)
                else:
                    # Private until it has its owner, as files are (see open).
                    os.mknod(name, SPECIAL_TYPE_BITS[special] | 0o600, dir_fd=dirfd)
                    if uid is not None or gid is not None:
                        _chown_at(dirfd, name, uid, gid)
                    chmod_nofollow(dirfd, name, self._mode_bits(mode))
        except OSError as error:
            raise os_error(error, path) from None
        self._forget_dirs(path)  # a directory removed behind the tree's back may be cached
        await self._observers.emit(path, "entry")

    async def readlink(self, path: str) -> str:
        path = normalize_path(path)
        try:
            with self._at(path, self._guards(), looking=True) as (dirfd, name):
                return os.readlink(name, dir_fd=dirfd)
        except _Hidden:
            raise FileNotFoundError(path) from None
        except OSError as error:
            raise os_error(error, path) from None

    # ----------------------------------------------------------------------------------------
    # Resolution

    def _mode_bits(self, mode: int) -> int:
        """The permission bits to set for ``mode``: no set-id bit in strict mode, nor with
        ``set_id=False``."""
        return mode & (0o7777 if self._set_id else _NO_SET_ID)

    def _refuse_read_only(self, path: str) -> None:
        if self._read_only:
            raise ReadOnlyMountError(path)

    def _guards(self) -> GuardView | None:
        """What this tree hides now: guarded mountpoints and, unless it crosses mounts, every
        mount below its root; ``None`` when that is nothing. The same object until one of the
        two snapshots it is made from changes (two identity checks per operation)."""
        snapshot = guarded_mountpoints()
        mounts = () if self._cross_mounts else mountpoints()
        if snapshot is self._guard_snapshot and mounts is self._mounts_snapshot:
            return self._guard_view
        real = _fd_path(self._root, self._real)  # where the root is now
        below = mounts_below(mounts, real)
        if snapshot is not self._guard_snapshot or below != self._mounts_below:
            view = guard_view(snapshot, real) if snapshot else None
            if below or (view is not None and not self._cross_mounts):
                # Hiding every mount also refuses, while resolving, one the table lists not yet.
                view = with_mounts(view, self._root, below, use_openat2=self._openat2)
            root = os.fstat(self._root)
            self._forget_dirs(ROOT)  # cached under the old view: no name checks recorded
            self._root_checks_names = (
                view is not None and (root.st_dev, root.st_ino) in view.parents
            )
            self._guard_view = view
            self._guard_snapshot = snapshot
            self._mounts_below = below
        self._mounts_snapshot = mounts
        return self._guard_view

    def _cached_dir(self, path: str, guard: GuardView | None) -> _CachedDir | None:
        """The cached ``O_PATH`` descriptor of the directory at tree path ``path`` (not the
        root), opened now if needed; ``None`` when the path cannot be cached (a symlink or a
        mount on the way, no ``openat2``): the caller then resolves it the uncached way.

        Only paths without symlinks are cached, so a descriptor stands for exactly one tree path;
        changes made through this tree drop what they affect (:meth:`_forget_dirs`) and every
        entry expires after :data:`_DIR_CACHE_TTL` seconds, which bounds how long a directory
        moved on the host behind the tree's back keeps answering for its old path. Raises
        ``OSError``/``_Hidden`` as :meth:`_open` does.
        """
        cache = self._dirs
        now = monotonic()
        entry = cache.get(path)
        if entry is not None:
            if entry.expires > now:
                cache.move_to_end(path)
                return entry
            del cache[path]
            os.close(entry.fd)
        if not self._openat2:
            return None
        if guard is not None and guard.hides(path):
            raise _Hidden
        resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS
        if guard is not None:
            resolve |= RESOLVE_NO_XDEV
        try:
            fd = openat2(self._root, path[1:], O_PATH | os.O_DIRECTORY, 0, resolve)
        except OSError as error:
            # ENAMETOOLONG: past PATH_MAX, which a mount's tree paths may be (see _open)
            if error.errno in (errno.ELOOP, errno.EXDEV, errno.EAGAIN, errno.ENAMETOOLONG):
                return None
            raise
        checks = False
        if guard is not None and guard.parents:
            try:
                found = os.fstat(fd)
            except BaseException:
                os.close(fd)
                raise
            checks = (found.st_dev, found.st_ino) in guard.parents
        entry = _CachedDir(fd, now + _DIR_CACHE_TTL, checks)
        cache[path] = entry
        if len(cache) > _DIR_CACHE_SIZE:
            os.close(cache.popitem(last=False)[1].fd)  # never the one just added
        return entry

    def _forget_dirs(self, *paths: str) -> None:
        """Close the cached directories at or under ``paths`` (they moved or went away)."""
        cache = self._dirs
        if not cache:
            return
        for path in paths:
            if path == ROOT:
                stale = list(cache)
            else:
                below = path + "/"
                stale = [key for key in cache if key == path or key.startswith(below)]
            for key in stale:
                os.close(cache.pop(key).fd)

    def _in_parent(self, path: str, guard: GuardView | None) -> tuple[int, str] | None:
        """``(cached directory fd, final name)`` of a path other than the root, when its parent
        is cached (or the root) and the name needs no mountpoint check; else ``None``. The fd
        belongs to the cache: use it before the next ``await``, never close it. Strict mode
        resolves every parent afresh (``None``)."""
        if self._strict:
            return None
        cut = path.rindex("/")
        name = path[cut + 1 :]
        if cut == 0:
            dirfd, checks = self._root, self._root_checks_names
        else:
            cached = self._cached_dir(path[:cut], guard)
            if cached is None:
                return None
            dirfd, checks = cached.fd, cached.check_names
        if guard is not None and (checks or guard.hides(path)):
            return None
        return dirfd, name

    def _open(
        self,
        path: str,
        flags: int,
        guard: GuardView | None,
        *,
        follow: bool = True,
        mode: int = 0,
    ) -> tuple[int, str]:
        """A descriptor for tree path ``path`` and, under a guard, its canonical path.

        Raises ``OSError`` (for the caller to translate) or ``_Hidden``.
        """
        if guard is not None and guard.hides(path):
            raise _Hidden
        if self._strict:
            return self._open_strict(path, flags, guard, follow, mode), path
        if guard is None and not flags & O_PATH and path != ROOT and path.count("/") == 1:
            # A name in the root: one plain openat, as confined as it gets, unless it is a
            # symlink, which the full resolution below follows inside the tree.
            try:
                return os.open(
                    path[1:], flags | os.O_NOFOLLOW | O_CLOEXEC, mode, dir_fd=self._root
                ), path
            except OSError as error:
                # O_DIRECTORY on a symlink answers ENOTDIR rather than ELOOP
                if error.errno not in (errno.ELOOP, errno.ENOTDIR) or not follow:
                    raise
        if self._openat2:
            resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS
            if guard is not None:
                resolve |= RESOLVE_NO_XDEV | (RESOLVE_NO_SYMLINKS if guard.tree_paths else 0)
            relative = "." if path == ROOT else path[1:]
            open_flags = flags if follow else flags | os.O_NOFOLLOW
            for _ in range(_RETRIES):
                try:
                    return openat2(self._root, relative, open_flags, mode, resolve), path
                except OSError as error:
                    if error.errno == errno.EAGAIN:
                        continue  # a rename raced with the lookup
                    if guard is not None and error.errno in (errno.EXDEV, errno.ELOOP):
                        break  # crosses a mount or a symlink: walk it by hand, checking
                    if error.errno == errno.ENAMETOOLONG:
                        # Past PATH_MAX: a mount hands over names one directory at a time,
                        # so its tree paths can be longer than any one syscall takes.
                        break
                    raise
        return self._walk(path, flags, guard, follow, mode)

    def _open_strict(
        self, path: str, flags: int, guard: GuardView | None, follow: bool, mode: int
    ) -> int:
        """Strict mode's resolution (see the module docstring): no symlink, no mount crossing."""
        if self._openat2:
            resolve = (
                RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS
            )
            relative = "." if path == ROOT else path[1:]
            open_flags = flags if follow else flags | os.O_NOFOLLOW
            for _ in range(_RETRIES):
                try:
                    return openat2(self._root, relative, open_flags, mode, resolve)
                except OSError as error:
                    if error.errno == errno.EAGAIN:
                        continue  # a rename raced with the lookup
                    if error.errno in (errno.ELOOP, errno.EXDEV):
                        raise UnsafePathError(path, errno=error.errno) from None
                    if error.errno != errno.ENAMETOOLONG:
                        raise
                    break  # past PATH_MAX (see _open): the walk takes it one name at a time
        return self._walk(path, flags, guard, follow, mode)[0]

    def _same_mount(self, fd: int, path: str) -> int:
        """``fd`` itself, unless strict mode's walk reached another mount with it (then
        ``UnsafePathError``, ``fd`` closed)."""
        if self._strict and _mount_id(fd) != self._root_mount:
            os.close(fd)
            raise UnsafePathError(path, errno=errno.EXDEV)
        return fd

    def _walk(
        self, path: str, flags: int, guard: GuardView | None, follow: bool, mode: int
    ) -> tuple[int, str]:
        """Resolve ``path`` one segment at a time, confined to the root, as ``openat2`` would:
        :mod:`vfs._resolve`'s rules, answered with ``O_PATH | O_NOFOLLOW`` descriptors of each
        real directory (never a path longer than one name, so past ``PATH_MAX`` too)."""
        dirs: dict[str, int] = {ROOT: self._root}  # the real directories reached, open

        def kind(real: str) -> Kind:
            try:
                step = self._step(dirs[parent_path(real)], base_name(real), real, guard)
            except builtins.FileNotFoundError:
                return "missing"
            fd = self._same_mount(step, path)
            info = os.fstat(fd)
            if stat.S_ISLNK(info.st_mode):
                os.close(fd)
                return "symlink"
            if guard is not None and guard.hides_identity(info.st_dev, info.st_ino):
                os.close(fd)
                raise _Hidden
            if stat.S_ISDIR(info.st_mode):
                dirs[real] = fd
                return "directory"
            os.close(fd)
            return "file"

        def target(real: str) -> str:  # asked only of a link the resolution follows
            if self._strict:
                raise UnsafePathError(path, errno=errno.ELOOP)
            return os.readlink(base_name(real), dir_fd=dirs[parent_path(real)])

        try:
            found = drive_sync(resolution(path, follow=follow), kind, target).check(path)
            if found.path == ROOT:
                return os.open(".", flags | O_CLOEXEC, mode, dir_fd=self._root), ROOT
            if found.kind != "missing" and flags & os.O_CREAT and flags & os.O_EXCL:
                raise_errno(errno.EEXIST)
            if found.kind == "missing" and not flags & os.O_CREAT:
                raise_errno(errno.ENOENT)
            parent = dirs[parent_path(found.path)]
            name = base_name(found.path)
            fd = os.open(name, flags | os.O_NOFOLLOW | O_CLOEXEC, mode, dir_fd=parent)
            return self._same_mount(fd, path), found.path
        finally:
            for real, fd in dirs.items():
                if real != ROOT:
                    os.close(fd)

    def _step(self, top: int, name: str, canonical: str, guard: GuardView | None) -> int:
        """``O_PATH | O_NOFOLLOW`` descriptor of ``name`` in ``top``, refusing guarded places
        before anything beyond a mount crossing is touched."""
        flags = O_PATH | os.O_NOFOLLOW | O_CLOEXEC
        if guard is None:
            return os.open(name, flags, dir_fd=top)
        if guard.hides(canonical):
            raise _Hidden
        if self._openat2:
            try:
                return openat2(top, name, flags, 0, RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS)
            except OSError as error:
                if error.errno != errno.EXDEV:
                    raise
            if guard.hides_mounts or _covered_by_guard(top, name, guard):
                raise _Hidden
        elif _same_device_as_guard(top, guard) and _covered_by_guard(top, name, guard):
            raise _Hidden
        return os.open(name, flags, dir_fd=top)

    def _refuse_mount_name(self, dirfd: int, name: str, path: str) -> None:
        """Strict mode acts on a final name only when it is no mount point (a change of a
        mounted directory's name would change the mounted tree's root)."""
        try:
            if self._openat2:
                resolve = RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS
                fd = openat2(dirfd, name, O_PATH | os.O_NOFOLLOW, 0, resolve)
            else:
                fd = os.open(name, O_PATH | os.O_NOFOLLOW | O_CLOEXEC, dir_fd=dirfd)
        except builtins.FileNotFoundError:
            return  # a new name
        except OSError as error:
            if error.errno == errno.EXDEV:
                raise UnsafePathError(path, errno=errno.EXDEV) from None
            raise
        os.close(self._same_mount(fd, path))

    def _check_name(self, top: int, name: str, canonical: str, guard: GuardView | None) -> None:
        """Refuse ``name`` in ``top`` when it is, or covers, a guarded mountpoint."""
        if guard is None:
            return
        os.close(self._step(top, name, canonical, guard))

    def _parent(self, path: str, guard: GuardView | None) -> tuple[int, str, bool]:
        """``(directory fd, final name, fd is ours to close)``; the root is ``(root, ".")``."""
        if path == ROOT:
            return self._root, ".", False
        parent = parent_path(path)
        name = base_name(path)
        if parent == ROOT:
            dirfd, canonical, owned = self._root, ROOT, False
        else:
            dirfd, canonical = self._open(parent, O_PATH | os.O_DIRECTORY, guard)
            owned = True
        if self._strict:
            try:
                self._refuse_mount_name(dirfd, name, path)
            except BaseException:
                if owned:
                    os.close(dirfd)
                raise
        if guard is not None:
            try:
                # Only a directory holding a guarded mountpoint (by identity, so also through a
                # bind mount) can have one among its names: check names in those alone.
                if guard.hides(join_path(canonical, name)) or (
                    self._root_checks_names if not owned else _holds_guarded(dirfd, guard)
                ):
                    self._check_name(dirfd, name, join_path(canonical, name), guard)
            except builtins.FileNotFoundError:
                pass  # a new name: nothing to hide
            except BaseException:
                if owned:
                    os.close(dirfd)
                raise
        return dirfd, name, owned

    @contextlib.contextmanager
    def _at(
        self,
        path: str,
        guard: GuardView | None,
        *,
        denied: str | None = None,
        looking: bool = False,
    ) -> Iterator[tuple[int, str]]:
        """The parent directory of ``path`` and its final name, for ``*at`` syscalls.

        With ``denied``, a guarded path raises ``PermissionDeniedError`` about it. ``looking``
        (an operation that only reads metadata) may use a cached parent directory (see
        :meth:`_cached_dir`); changes always resolve the parent afresh.
        """
        fast = self._in_parent(path, guard) if looking and path != ROOT else None
        if fast is not None:
            yield fast
            return
        try:
            dirfd, name, owned = self._parent(path, guard)
        except _Hidden:
            if denied is None:
                raise
            raise PermissionDeniedError(denied) from None
        try:
            yield dirfd, name
        finally:
            if owned:
                os.close(dirfd)

    def _open_existing(
        self, path: str, access: int, base: int, create: bool, guard: GuardView | None
    ) -> tuple[int, bool]:
        """Open ``path`` (creating it when ``create``); ``(fd, whether we created it)``.

        With ``create`` the exclusive create comes first: a mount asks to create names it
        believes missing, so that is usually the only call.
        """
        for _ in range(_RETRIES):
            if create:
                try:
                    flags = access | base | os.O_CREAT | os.O_EXCL
                    return self._open(path, flags, guard, mode=0o600)[0], True
                except builtins.FileExistsError:
                    pass  # there already (or created by someone else just now): open that one
            try:
                return self._open_access(path, access, base, guard), False
            except builtins.FileNotFoundError:
                if not create:
                    raise
        raise_errno(errno.EAGAIN)
        raise AssertionError  # unreachable

    def _open_access(self, path: str, access: int, base: int, guard: GuardView | None) -> int:
        try:
            return self._open(path, access | base, guard)[0]
        except builtins.PermissionError:
            if access != os.O_RDWR or base & os.O_TRUNC:
                raise
        return self._open(path, os.O_RDONLY | base, guard)[0]  # a read-only file reads

    def _make_parents(self, path: str, guard: GuardView | None) -> str | None:
        """Create the missing directories above ``path``; the topmost one created, if any."""
        parent = parent_path(path)
        if parent == ROOT:
            return None
        try:
            os.close(self._open(parent, O_PATH | os.O_DIRECTORY, guard)[0])
            return None
        except builtins.FileNotFoundError:
            pass
        created: str | None = None
        current = ROOT
        for segment in split_path(parent):
            current = join_path(current, segment)
            with self._at(current, guard) as (dirfd, name):
                try:
                    os.mkdir(name, 0o777, dir_fd=dirfd)
                except builtins.FileExistsError:
                    continue
            created = created or current
        return created

    async def _remove(self, path: str, remove: Callable[[int, str], None], *, forget: bool) -> None:
        try:
            with self._at(path, self._guards(), denied=path) as (dirfd, name):
                remove(dirfd, name)
        except OSError as error:
            raise os_error(error, path) from None
        if forget:
            self._forget_dirs(path)
        await self._observers.emit(path, "entry")


def _open_regular(dirfd: int, name: str, *, write: bool) -> int | None:
    """A descriptor of ``name`` in ``dirfd`` when it is a regular file (read-write when
    ``write`` and allowed, else read-only), ``None`` for anything else or nothing. Never opens
    a FIFO or a device for I/O: the entry is examined through ``O_PATH`` first, and the file
    opened must be the one examined."""
    try:
        probe = os.open(name, O_PATH | os.O_NOFOLLOW | O_CLOEXEC, dir_fd=dirfd)
    except OSError as error:
        if error.errno in _MISSING:
            return None  # the unlink says what is wrong
        raise
    try:
        found = os.fstat(probe)
        if not stat.S_ISREG(found.st_mode) or is_node_placeholder(found):
            return None  # (a placeholder stands for a device, FIFO or socket: see _disk)
        for access in (os.O_RDWR, os.O_RDONLY) if write else (os.O_RDONLY,):
            try:
                fd = os.open(name, access | os.O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC, dir_fd=dirfd)
            except builtins.PermissionError:
                continue
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) == (found.st_dev, found.st_ino):
                return fd
            os.close(fd)  # replaced between the two opens: keep nothing
            return None
        return None
    finally:
        os.close(probe)


class DiskFile:
    """An open file of a :class:`DirFileSystem`: a real descriptor, so it keeps reading and
    writing the file it opened after a rename or unlink of its name."""

    __slots__ = ("_dev", "_fd", "_in_memory", "_observers", "_path", "_read_only")

    def __init__(
        self, fd: int, path: str, observers: Observers, *, read_only: bool, dev: int = -1
    ) -> None:
        self._dev = dev  # the tree's root device: stat shows host inode numbers of files there
        self._fd = fd
        self._in_memory: bool | None = None  # on tmpfs/ramfs (decided at the first fsync)
        self._path = path
        self._observers = observers
        self._read_only = read_only

    def _live(self) -> int:
        if self._fd < 0:
            raise PathError(self._path, errno=errno.EBADF)
        return self._fd

    async def read(self, offset: int, size: int) -> bytes:
        try:
            return os.pread(self._live(), size, offset)
        except OSError as error:
            raise os_error(error, self._path) from None

    async def write(self, offset: int, data: bytes) -> int:
        if self._read_only:
            raise ReadOnlyMountError(self._path)
        try:
            written = write_all(self._live(), data, offset)
        except OSError as error:
            raise os_error(error, self._path) from None
        await self._observers.emit(self._path, "content")
        return written

    async def truncate(self, size: int) -> None:
        if self._read_only:
            raise ReadOnlyMountError(self._path)
        try:
            os.ftruncate(self._live(), size)
        except OSError as error:
            raise os_error(error, self._path) from None
        await self._observers.emit(self._path, "content")

    def data_extents(self, size: int) -> list[tuple[int, int]]:
        """The ``(start, end)`` spans within ``size`` that hold data (the rest are holes)."""
        return data_extents(self._live(), size)

    async def flush(self) -> None:
        self._live()  # writes went straight to the kernel: nothing is buffered here

    async def stat(self) -> FileInfo:
        try:
            return file_info(os.fstat(self._live()), self._dev)
        except OSError as error:
            raise os_error(error, self._path) from None

    async def fsync(self, datasync: bool = False) -> None:
        fd = self._live()
        sync = os.fdatasync if datasync else os.fsync
        try:
            if self._in_memory is None:
                self._in_memory = memory_backed(fd)
            if self._in_memory:
                sync(fd)  # nothing to wait for: a thread hop would cost more than the call
            else:
                await anyio.to_thread.run_sync(sync, fd)
        except OSError as error:
            raise os_error(error, self._path) from None

    async def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # A handle dropped unclosed (its owner gone) gives its descriptor back, as a Python
        # file object does (``os`` bound early: this may run at interpreter exit).
        fd, self._fd = self._fd, -1
        if fd >= 0:
            try:  # noqa: SIM105 (contextlib may be gone at exit)
                _close(fd)
            except OSError:
                pass


def _refuse_guarded_root(host: str, snapshot: tuple[Mountpoint, ...]) -> None:
    for mountpoint in snapshot:
        if is_under(host, mountpoint.path) or is_under(host, mountpoint.real):
            raise PermissionDeniedError(host)


def _mount_id(fd: int) -> int:
    """The id of the mount ``fd`` is on (``mnt_id`` in ``/proc/self/fdinfo``; -1 if unknown)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as info:
            for line in info:
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def _fd_path(fd: int, fallback: str) -> str:
    """The host path the kernel holds for ``fd`` (no lookup, so nothing is re-resolved)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(fallback)


def _own(fd: int, info: os.stat_result, uid: int | None, gid: int | None) -> None:
    want_uid = info.st_uid if uid is None else uid
    want_gid = info.st_gid if gid is None else gid
    if (want_uid, want_gid) != (info.st_uid, info.st_gid):
        os.fchown(fd, want_uid, want_gid)


def _chown_at(dirfd: int, name: str, uid: int | None, gid: int | None) -> None:
    os.chown(
        name,
        -1 if uid is None else uid,
        -1 if gid is None else gid,
        dir_fd=dirfd,
        follow_symlinks=False,
    )


def _holds_guarded(dirfd: int, guard: GuardView) -> bool:
    """Whether the directory ``dirfd`` holds a guarded mountpoint (see ``GuardView.parents``)."""
    found = os.fstat(dirfd)
    return (found.st_dev, found.st_ino) in guard.parents


def _same_device_as_guard(top: int, guard: GuardView) -> bool:
    dev = os.fstat(top).st_dev
    return any(dev == guarded_dev for guarded_dev, _ in guard.identities)


def _covered_by_guard(top: int, name: str, guard: GuardView) -> bool:
    """Whether ``name`` in ``top`` is a guarded mountpoint, by the inode ``readdir`` reports
    (the covered directory's, even while a mount sits on it), without touching the mount."""
    dev = os.fstat(top).st_dev
    fd = os.open(".", O_DIR, dir_fd=top)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.name == name:
                    return guard.hides_identity(dev, entry.inode())
    finally:
        os.close(fd)
    return False


class _CachedDir:
    """A cached directory descriptor: ``fd`` until ``expires`` (monotonic seconds);
    ``check_names``: it holds a guarded mountpoint, so names in it are checked one by one."""

    __slots__ = ("check_names", "expires", "fd")

    def __init__(self, fd: int, expires: float, check_names: bool) -> None:
        self.fd = fd
        self.expires = expires
        self.check_names = check_names


def _close_all(root: int, dirs: OrderedDict[str, _CachedDir]) -> None:
    while dirs:
        os.close(dirs.popitem()[1].fd)
    os.close(root)
