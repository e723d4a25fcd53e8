"""Host-disk plumbing shared by ``dir_fs`` and ``local_file_system``.

Theory of operation
-------------------
Everything here works on directory file descriptors and single names, never on host path strings
that the kernel would re-resolve, so a caller that holds a confined directory fd stays confined:

* :func:`os_error` / :func:`write_error` are the one place an ``OSError`` becomes a project error
  (by errno), about the caller's path (a tree path for ``dir_fs``, a host path for the local tree).
* :func:`openat2`, :func:`renameat2` and :func:`chmod_nofollow` bind the Linux syscalls the standard
  library lacks (ctypes; probed once, see :func:`have_openat2`).
* :func:`walk_fd` is the native walk: ``os.scandir`` on directory fds, children opened with
  ``O_NOFOLLOW`` (so a walk never leaves the directory it started in and never descends a
  directory symlink), in exact lexicographic path order (an entry ``name``, then a sibling such as
  ``name-x``, then the subtree ``name/...``, as ``vfs._walk`` orders it). :func:`glob_fd` and
  :func:`grep_fd` stream on top of it and stop early.
* :func:`write_file_at` replaces a file atomically (temporary file in the same directory, then
  ``rename``), except where that would change what the name means: a symlink is written through
  and a hard-linked file is written in place, so the other names see the new bytes (a strict
  ``dir_fs`` asks for a replacement even there: it never writes through a link).

Syscalls on the local disk are short and bounded, so the callers make them directly on the event
loop thread: a hop to a worker thread costs more than a ``stat`` or a small ``read``. Long walks
yield to the loop every :data:`CHECKPOINT_EVERY` entries; only ``fsync`` goes to a thread.

Process-wide state: the mountpoint guard
-----------------------------------------
:func:`guard_mountpoint` registers a directory that this process is about to mount a FUSE
filesystem on. It is process-wide state (as is the mount table, ``vfs._mounts``), and has to be: a FUSE daemon
serves its mount from its own event loop, so if any tree in the same process looks *through* that
mount (a ``dir_fs`` over the cwd while the mount sits at ``./mnt``), the kernel sends the request
back to the daemon, which is blocked waiting for it: a deadlock. Every host tree in the process
must therefore avoid the mountpoint, whichever tree object it was reached from. The guard records
the mountpoint's host path and its ``(st_dev, st_ino)`` before the mount covers it;
:class:`GuardView` tells a tree which of its paths and which directory identities to hide.
A ``dir_fs`` that does not cross mounts hides every other mount below its root the same way
(:func:`with_mounts` adds them to its view from the mount table): a tree reaching into another
FUSE mount whose tree reaches back would deadlock the two daemons. ``local_file_system`` is the
host disk as the native tools see it, so it crosses mounts and hides only guarded mountpoints.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import errno
import functools
import os
import platform
import re
import secrets
import stat
import struct
import sys
import threading
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import cast

import anyio.lowlevel
import anyio.to_thread

from ._content import is_image_path
from ._errors import (
    CrossMountError,
    DirectoryNotEmptyError,
    FileExistsError,
    FileNotFoundError,
    FileTooLargeError,
    IsADirectoryError,
    NotADirectoryError,
    NotSupportedError,
    PathError,
    PermissionDeniedError,
    ReadOnlyMountError,
    WriteFailedError,
)
from ._match import GlobPlan, LineGrep, compile_grep, compile_grep_glob
from ._paths import is_under
from ._types import (
    SPECIAL_OF_TYPE_BITS,
    DirEntry,
    FileInfo,
    GrepQuery,
    GrepResult,
    Kind,
    Special,
)

CHECKPOINT_EVERY = 64
"""A long walk yields to the event loop after this many entries."""

O_CLOEXEC = os.O_CLOEXEC
O_PATH = getattr(os, "O_PATH", 0o10000000)
O_DIR = os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC
O_DIR_NOFOLLOW = O_DIR | os.O_NOFOLLOW

# --------------------------------------------------------------------------------------------
# Errors: the one boundary where OSError becomes a project error.

_BY_ERRNO: dict[int, type[PathError]] = {
    errno.ENOENT: FileNotFoundError,
    errno.EEXIST: FileExistsError,
    errno.ENOTDIR: NotADirectoryError,
    errno.EISDIR: IsADirectoryError,
    errno.ENOTEMPTY: DirectoryNotEmptyError,
    errno.EACCES: PermissionDeniedError,
    errno.EPERM: PermissionDeniedError,
    errno.EROFS: ReadOnlyMountError,
    errno.EXDEV: CrossMountError,
    errno.EFBIG: FileTooLargeError,
    errno.EOPNOTSUPP: NotSupportedError,
}

# What write() reports as itself; every other failure of a write is "write failed: <path>".
_WRITE_KEEPS = frozenset(
    {errno.EISDIR, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.EEXIST}
)


def os_error(error: OSError, path: str) -> PathError:
    """The project error for ``error`` about ``path`` (a project error passes through)."""
    if isinstance(error, PathError):
        return error
    code = error.errno if error.errno is not None else errno.EIO
    cls = _BY_ERRNO.get(code)
    if cls is None:
        return PathError(path, errno=code)
    return cls(path, errno=code)


def write_error(error: OSError, path: str) -> PathError:
    """Like :func:`os_error`, but I/O failures of ``write`` are ``WriteFailedError``."""
    if isinstance(error, PathError):
        return error
    code = error.errno if error.errno is not None else errno.EIO
    if code in _WRITE_KEEPS:
        return os_error(error, path)
    return WriteFailedError(path, errno=code)


def raise_errno(code: int) -> None:
    raise OSError(code, os.strerror(code))


# --------------------------------------------------------------------------------------------
# Syscalls the standard library lacks.

_LIBC = ctypes.CDLL(None, use_errno=True)
_syscall = _LIBC.syscall
_syscall.restype = ctypes.c_long

# openat2 and fchmodat2 come after the syscall tables were unified: same number everywhere.
_SYS_OPENAT2 = 437
_SYS_FCHMODAT2 = 452
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}.get(platform.machine())

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100


def _check(result: int) -> int:
    if result < 0:
        raise_errno(ctypes.get_errno())
    return result


# A function pointer of its own with fixed argument types: no per-call wrapper objects (this call
# sits on every path lookup of dir_fs).
_openat2_call = _LIBC["syscall"]
_openat2_call.restype = ctypes.c_long
_openat2_call.argtypes = [
    ctypes.c_long,
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_size_t,
]


@functools.lru_cache(maxsize=128)
def _open_how(flags: int, mode: int, resolve: int) -> bytes:
    """``struct open_how`` (three u64) for these arguments; a handful of combinations recur."""
    return struct.pack("=QQQ", flags, mode, resolve)


def openat2(dirfd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    """``openat2(2)``: open ``path`` relative to ``dirfd`` under the ``RESOLVE_*`` rules."""
    how = _open_how(flags | O_CLOEXEC, mode if flags & os.O_CREAT else 0, resolve)
    encoded = path.encode("utf-8", "surrogateescape")
    return _check(_openat2_call(_SYS_OPENAT2, dirfd, encoded, how, 24))


@functools.cache
def have_openat2() -> bool:
    """Whether this kernel (and seccomp policy) lets us call ``openat2``; probed once."""
    try:
        os.close(openat2(AT_FDCWD, "/", O_PATH, 0, RESOLVE_NO_MAGICLINKS))
    except OSError:
        return False
    return True


_renameat2_fn = getattr(_LIBC, "renameat2", None)


def renameat2(src_dir: int, src: str, dst_dir: int, dst: str, flags: int) -> None:
    """``renameat2(2)``; ``flags`` 0 is a plain ``renameat``."""
    if flags == 0:
        os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
        return
    args = (
        ctypes.c_int(src_dir),
        ctypes.c_char_p(os.fsencode(src)),
        ctypes.c_int(dst_dir),
        ctypes.c_char_p(os.fsencode(dst)),
        ctypes.c_uint(flags),
    )
    if _renameat2_fn is not None:
        _check(_renameat2_fn(*args))
    elif _SYS_RENAMEAT2 is not None:
        _check(_syscall(ctypes.c_long(_SYS_RENAMEAT2), *args))
    else:
        raise_errno(errno.EINVAL)


_MEMORY_FS_TYPES = frozenset({0x01021994, 0x858458F6})  # TMPFS_MAGIC, RAMFS_MAGIC
_fstatfs = _LIBC.fstatfs
_fstatfs.restype = ctypes.c_int
_fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]


def memory_backed(fd: int) -> bool:
    """Whether ``fd`` lives on a file system that keeps data in memory only (tmpfs, ramfs),
    where ``fsync`` returns at once and need not go to a worker thread."""
    buffer = ctypes.create_string_buffer(256)  # struct statfs (120 bytes on 64-bit Linux)
    if _fstatfs(fd, buffer) != 0:
        return False
    width = ctypes.sizeof(ctypes.c_long)  # f_type (__fsword_t) comes first
    f_type = int.from_bytes(buffer.raw[:width], sys.byteorder) & 0xFFFFFFFF
    return f_type in _MEMORY_FS_TYPES


@functools.cache
def _have_fchmodat2() -> bool:
    # An invalid descriptor and an empty path without AT_EMPTY_PATH: EBADF/ENOENT where the
    # call exists, never a change. (AT_FDCWD with AT_EMPTY_PATH would chmod the cwd to 0.)
    result = _syscall(
        ctypes.c_long(_SYS_FCHMODAT2),
        ctypes.c_int(-1),
        ctypes.c_char_p(b""),
        ctypes.c_uint(0),
        ctypes.c_uint(0),
    )
    return not (result < 0 and ctypes.get_errno() == errno.ENOSYS)


def chmod_nofollow(dirfd: int, name: str, mode: int) -> None:
    """Set the permission bits of ``name`` in ``dirfd`` exactly, never through a symlink.

    ``fchmodat2(AT_SYMLINK_NOFOLLOW)`` (Linux 6.6) does it in one call; older kernels chmod the
    ``O_PATH`` descriptor through ``/proc/self/fd``, which names that exact inode.
    """
    if _have_fchmodat2():
        _check(
            _syscall(
                ctypes.c_long(_SYS_FCHMODAT2),
                ctypes.c_int(dirfd),
                ctypes.c_char_p(os.fsencode(name)),
                ctypes.c_uint(mode),
                ctypes.c_uint(AT_SYMLINK_NOFOLLOW),
            )
        )
        return
    fd = os.open(name, O_PATH | os.O_NOFOLLOW | O_CLOEXEC, dir_fd=dirfd)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise_errno(errno.EOPNOTSUPP)
        os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Metadata and contents.


def kind_of(mode: int) -> Kind:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "file"


_KIND_OF_TYPE: dict[int, Kind] = {stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink"}


def file_info(st: os.stat_result, dev: int = -1) -> FileInfo:
    """A :class:`FileInfo` holding everything ``st`` says (built for every lstat: kept lean),
    with its host inode number as ``ino`` when it is on device ``dev`` (a tree's root's)."""
    mode = st.st_mode
    fmt = stat.S_IFMT(mode)
    special = SPECIAL_OF_TYPE_BITS.get(fmt)
    return FileInfo(
        _KIND_OF_TYPE.get(fmt, "file"),
        0 if special else st.st_size,
        st.st_mtime,
        mode & 0o7777,
        st.st_mtime_ns,
        st.st_uid,
        st.st_gid,
        st.st_atime_ns,
        st.st_ctime_ns,
        st.st_nlink,
        special,
        st.st_rdev if special in ("char", "block") else 0,
        # Which host file (names of one file share it; a replaced file gets another).
        None if fmt == stat.S_IFDIR else st.st_dev << 64 | st.st_ino,
        st.st_blocks,
        st.st_ino if st.st_dev == dev else None,
    )


# Device nodes are never made on the host (one there would be a real device for anyone who can
# open it): a tree's char or block node is an empty regular file of this unusual mode (sticky,
# owner read-write), which is what the host sees, with its type, rdev and mode in this xattr.
NODE_PLACEHOLDER_MODE = 0o1600
NODE_XATTR = "user.agentroot.node"


def is_node_placeholder(st: os.stat_result) -> bool:
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_mode & 0o7777 == NODE_PLACEHOLDER_MODE
        and st.st_size == 0
    )


def node_record(special: str, rdev: int, mode: int) -> bytes:
    return f"{special} {rdev} {mode & 0o7777:o}".encode()


def read_node(where: str, *, follow: bool) -> tuple[Special, int, int] | None:
    """The emulated node recorded on the placeholder at ``where`` (a ``/proc/self/fd`` path),
    or ``None`` for a plain empty file."""
    try:
        text = os.getxattr(where, NODE_XATTR, follow_symlinks=follow).decode()
        kind, rdev, mode = text.split()
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if kind not in ("char", "block"):
        return None
    return cast(Special, kind), int(rdev), int(mode, 8)


def as_node(info: FileInfo, where: str, *, follow: bool = False) -> FileInfo:
    """``info`` of a placeholder (:func:`is_node_placeholder`) as the device node it stands for,
    if ``where`` (its ``/proc/self/fd`` path) records one."""
    node = read_node(where, follow=follow)
    if node is None:
        return info
    special, rdev, mode = node
    return replace(info, special=special, rdev=rdev, mode=mode, file_id=None)


def read_fd(fd: int, size: int | None = None) -> bytes:
    """Every byte from the current offset of ``fd`` to its end (``size``: its ``fstat``
    size, when the caller has it)."""
    size = os.fstat(fd).st_size if size is None else size
    want = size + 1 if size else 1 << 16
    first = os.read(fd, want)
    if len(first) < want and size:
        return first  # a short read of a regular file is its end
    chunks = [first]
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes | memoryview, offset: int | None = None) -> int:
    """Write every byte of ``data`` (at ``offset`` with ``pwrite``); return the count."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        chunk = view[done:]
        written = os.write(fd, chunk) if offset is None else os.pwrite(fd, chunk, offset + done)
        if written == 0:
            raise_errno(errno.EIO)
        done += written
    return done


def write_file_at(
    dirfd: int, name: str, data: bytes, reopen: Callable[[], int], *, in_place: bool = True
) -> bool:
    """Create or replace file ``name`` in ``dirfd`` with ``data``; True when it was created.

    A new or singly-linked regular file is replaced atomically: readers see the old bytes or the
    new ones, never a torn file, and a failed write leaves the old file intact. The replacement
    keeps the old file's permission bits (and owner, where the process may set it). Not fsynced:
    atomic against concurrent readers and a crashed process, not against power loss. A symlink
    (``reopen`` opens the final path following it, with the caller's confinement), a hard-linked
    file or a special file is written in place, so every name keeps meaning the same file.
    ``in_place=False`` (a strict tree) replaces those too, never writing through a link: the new
    file keeps a regular file's mode less its set-id bits (and owner); other entries are
    replaced as a new file would be made.
    """
    try:
        old: os.stat_result | None = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except builtins.FileNotFoundError:
        old = None
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise_errno(errno.EISDIR)
    if not in_place and old is not None and not stat.S_ISREG(old.st_mode):
        old = None  # a symlink or special file: replaced by a new file
        replacing = True
    else:
        replacing = False
    if old is not None and in_place and not (stat.S_ISREG(old.st_mode) and old.st_nlink == 1):
        fd = reopen()
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        return False
    temp = f".agentroot-{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | O_CLOEXEC
    fd = os.open(temp, flags, 0o666 if old is None else 0o600, dir_fd=dirfd)
    try:
        try:
            write_all(fd, data)
            if old is not None:
                _keep_owner(fd, old)
                kept = stat.S_IMODE(old.st_mode)
                os.fchmod(fd, kept if in_place else kept & ~(stat.S_ISUID | stat.S_ISGID))
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dirfd)
        raise
    return old is None and not replacing


def _keep_owner(fd: int, old: os.stat_result) -> None:
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (old.st_uid, old.st_gid):
        with contextlib.suppress(PermissionError):  # only root may give a file away
            os.fchown(fd, old.st_uid, old.st_gid)


# --------------------------------------------------------------------------------------------
# The mountpoint guard: the one piece of process-wide state (see the module docstring).


@dataclass(frozen=True, slots=True)
class Mountpoint:
    """A directory this process mounts on: its path as given, its real path, its identity and
    the identity of the directory holding it, all taken before the mount covers it."""

    path: str
    real: str
    dev: int
    ino: int
    parent_dev: int = -1
    parent_ino: int = -1


class _Registry:
    __slots__ = ("counts", "entries", "lock", "snapshot")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.entries: dict[str, Mountpoint] = {}
        self.snapshot: tuple[Mountpoint, ...] = ()


_REGISTRY = _Registry()


def guard_mountpoint(path: str) -> None:
    """Hide the directory ``path`` from every host tree of this process; call before mounting.

    ``mountd`` calls this before it mounts on ``path`` and :func:`release_mountpoint` (with the
    same spelling) after unmounting. Guards nest: each guard needs its own release.
    """
    key = os.path.abspath(path)
    real = os.path.realpath(key)
    st = os.stat(real)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(key)
    parent = os.stat(os.path.dirname(real))
    entry = Mountpoint(key, real, st.st_dev, st.st_ino, parent.st_dev, parent.st_ino)
    with _REGISTRY.lock:
        _REGISTRY.counts[key] = _REGISTRY.counts.get(key, 0) + 1
        _REGISTRY.entries.setdefault(key, entry)
        _REGISTRY.snapshot = tuple(_REGISTRY.entries.values())


def release_mountpoint(path: str) -> None:
    """Undo one :func:`guard_mountpoint` of ``path``; never touches the (mounted) directory."""
    key = os.path.abspath(path)
    with _REGISTRY.lock:
        count = _REGISTRY.counts.get(key, 0)
        if count <= 1:
            _REGISTRY.counts.pop(key, None)
            _REGISTRY.entries.pop(key, None)
        else:
            _REGISTRY.counts[key] = count - 1
        _REGISTRY.snapshot = tuple(_REGISTRY.entries.values())


def guarded_mountpoints() -> tuple[Mountpoint, ...]:
    """The mountpoints guarded right now (an immutable snapshot; a new object on each change)."""
    return _REGISTRY.snapshot


@dataclass(frozen=True, slots=True)
class GuardView:
    """What one tree must hide: guarded mountpoints strictly below its root, as tree paths, and
    the directory identities of every guarded mountpoint (reachable through bind mounts).
    ``parents`` are the identities of the directories holding them: only a name in one of
    those directories can be a guarded mountpoint (directories have one parent, and a bind
    mount shows the same directory).

    ``hides_mounts``: every mount below the root is hidden too, not only guarded ones (a
    ``dir_fs`` that does not cross mounts, see :func:`with_mounts`): any mount crossing found
    while resolving is hidden, and the mounts known from the mount table (on directories or on
    files) are in ``identities`` and ``parents`` like guarded ones, so final names and listings
    drop them untouched."""

    tree_paths: tuple[str, ...]
    identities: frozenset[tuple[int, int]]
    parents: frozenset[tuple[int, int]] = frozenset()
    hides_mounts: bool = False

    def hides(self, tree_path: str) -> bool:
        return any(is_under(tree_path, hidden) for hidden in self.tree_paths)

    def hides_identity(self, dev: int, ino: int) -> bool:
        return (dev, ino) in self.identities


def guard_view(snapshot: tuple[Mountpoint, ...], root_real: str) -> GuardView:
    """The view of ``snapshot`` for a tree whose ``/`` is the host directory ``root_real``."""
    tree_paths: set[str] = set()
    for mountpoint in snapshot:
        for host in (mountpoint.real, mountpoint.path):
            if root_real == "/":
                if host != "/":
                    tree_paths.add(host)
            elif host.startswith(root_real + "/"):
                tree_paths.add(host[len(root_real) :])
    return GuardView(
        tuple(sorted(tree_paths)),
        frozenset((m.dev, m.ino) for m in snapshot),
        frozenset((m.parent_dev, m.parent_ino) for m in snapshot),
    )


def mounts_below(mounts: tuple[str, ...], root_real: str) -> tuple[str, ...]:
    """The mountpoints among ``mounts`` (canonical host paths) strictly below the host directory
    ``root_real``, as tree paths, outermost only: a mount on a mount below the root is out of
    reach once the lower one is hidden."""
    prefix = root_real.rstrip("/") + "/"
    found: set[str] = set()
    for host in mounts:
        if host.startswith(prefix) and len(host) > len(prefix):
            found.add("/" + host[len(prefix) :])
    outermost = []
    for path in found:
        up = path.rpartition("/")[0]
        while up and up not in found:
            up = up.rpartition("/")[0]
        if not up:
            outermost.append(path)
    return tuple(sorted(outermost))


def with_mounts(
    view: GuardView | None, root: int, below: tuple[str, ...], *, use_openat2: bool
) -> GuardView:
    """``view`` (or nothing guarded) for a tree whose root descriptor is ``root``, also hiding
    every mount: the mountpoints ``below`` it (tree paths, from :func:`mounts_below`) join its
    identities and parents.

    A covered directory's (or file's) identity is taken without touching its mount: the holding
    directory's ``st_dev`` and the name's inode as ``readdir`` of the holding directory reports
    it (the covered one's, the mount notwithstanding). The holding directories are opened from
    ``root`` without crossing a mount and without following a symlink; one that moved or went
    away since the mount table was read is left out (resolving through it still refuses the
    crossing)."""
    identities = set(view.identities) if view is not None else set()
    parents = set(view.parents) if view is not None else set()
    names: dict[str, set[str]] = {}
    for path in below:
        head, _, name = path.rpartition("/")
        names.setdefault(head or "/", set()).add(name)
    for holder, wanted in names.items():
        try:
            fd = _open_holder(root, holder, use_openat2)
        except OSError:
            continue
        try:
            found = os.fstat(fd)
            parents.add((found.st_dev, found.st_ino))
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name in wanted:
                        identities.add((found.st_dev, entry.inode()))
        except OSError:
            continue
        finally:
            os.close(fd)
    return GuardView(
        view.tree_paths if view is not None else (),
        frozenset(identities),
        frozenset(parents),
        hides_mounts=True,
    )


def _open_holder(root: int, path: str, use_openat2: bool) -> int:
    """A readable descriptor of the directory at tree path ``path`` below ``root``, reached
    without crossing a mount or following a symlink."""
    if use_openat2:
        relative = "." if path == "/" else path[1:]
        resolve = RESOLVE_IN_ROOT | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
        return openat2(root, relative, O_DIR, 0, resolve)
    fd = os.open(".", O_DIR, dir_fd=root)
    for name in path.split("/"):
        if name:
            try:
                child = os.open(name, O_DIR_NOFOLLOW, dir_fd=fd)
            finally:
                os.close(fd)
            fd = child
    return fd


# --------------------------------------------------------------------------------------------
# Native walks over directory descriptors.

WalkItem = tuple[str, str, Kind, bool, int]
"""``(relative path, name, kind, is a regular file, fd of the directory holding it)``; the fd is
valid until the walk is advanced."""

_Listed = tuple[str, str, Kind, bool, bool]  # (sort key, name, kind, regular, descend)


def _join(base: str, rel: str) -> str:
    return base + rel if base == "/" else base + "/" + rel


def _listing(
    fd: int, rel_dir: str, descend: bool, guard: GuardView | None, base: str
) -> list[_Listed]:
    items: list[_Listed] = []
    identities = guard.identities if guard is not None else frozenset()
    hidden_paths = guard.tree_paths if guard is not None else ()
    dev = os.fstat(fd).st_dev if identities else 0
    with os.scandir(fd) as entries:
        for entry in entries:
            name = entry.name
            # By the inode readdir reports, before the type: where readdir gives no type, asking
            # for it is an lstat, which would cross the mount. (A file can be a mountpoint too.)
            if identities and (dev, entry.inode()) in identities:
                continue
            try:
                if entry.is_symlink():
                    kind: Kind = "symlink"
                    regular = is_dir = False
                else:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    regular = not is_dir and entry.is_file(follow_symlinks=False)
                    kind = "directory" if is_dir else "file"
            except builtins.FileNotFoundError:
                continue  # removed while we listed
            if is_dir and hidden_paths and guard is not None:
                rel = name if not rel_dir else rel_dir + "/" + name
                if guard.hides(_join(base, rel)):
                    continue
            items.append((name, name, kind, regular, False))
            if is_dir and descend:
                items.append((name + "/", name, kind, regular, True))
    items.sort(key=lambda item: item[0])
    return items


def list_fd(fd: int, guard: GuardView | None = None, base: str = "/") -> list[tuple[str, Kind]]:
    """The direct children of the (readable) directory ``fd``: ``(name, kind)`` sorted by name."""
    return [(item[1], item[2]) for item in _listing(fd, "", False, guard, base)]


def list_info_fd(
    fd: int,
    guard: GuardView | None = None,
    base: str = "/",
    known: Mapping[str, FileInfo] | None = None,
    home_dev: int = -1,
) -> list[tuple[str, FileInfo]]:
    """The direct children of the (readable) directory ``fd`` with their ``lstat``, by name.

    Each entry is examined with ``fstatat(fd, name, AT_SYMLINK_NOFOLLOW)`` (a single name,
    relative to ``fd``: nothing is resolved beyond it). Under ``guard``, hidden entries are
    dropped by the identity and tree path ``readdir`` reports, before anything is ``stat``ed, so
    the listing never touches a guarded mount. Entries that vanish meanwhile are left out.
    An entry named in ``known`` whose inode ``readdir`` reports as that FileInfo's ``file_id``
    answers it unexamined (see :class:`vfs.ListsReusing`). Entries on device ``home_dev`` show
    their host inode numbers (:func:`file_info`).
    """
    found: list[tuple[str, FileInfo]] = []
    identities = guard.identities if guard is not None else frozenset()
    hidden_paths = guard is not None and bool(guard.tree_paths)
    dev = os.fstat(fd).st_dev if identities or known else 0
    with os.scandir(fd) as entries:
        for entry in entries:
            name = entry.name
            if identities and (dev, entry.inode()) in identities:
                continue
            if hidden_paths and guard is not None and guard.hides(_join(base, name)):
                continue
            if known:
                info = known.get(name)
                if info is not None and info.file_id == dev << 64 | entry.inode():
                    found.append((name, info))
                    continue
            try:
                st = entry.stat(follow_symlinks=False)
            except builtins.FileNotFoundError:
                continue  # removed while we listed
            info = file_info(st, home_dev)
            if is_node_placeholder(st):
                info = as_node(info, f"/proc/self/fd/{fd}/{name}")
            found.append((name, info))
    found.sort(key=_first)
    return found


def _first(item: tuple[str, FileInfo]) -> str:
    return item[0]


def walk_fd(
    top: int, *, max_depth: int | None = None, guard: GuardView | None = None, base: str = "/"
) -> Generator[WalkItem, None, None]:
    """Every entry beneath the readable directory ``top`` (not ``top`` itself), in path order.

    Subdirectories are opened with ``O_NOFOLLOW`` relative to their parent, so the walk stays
    inside ``top`` and lists directory symlinks as ``symlink`` without descending them.
    Unreadable or vanished subdirectories are skipped. ``base`` is the tree path of ``top``
    (for ``guard``). Closes every descriptor it opened, also when closed early; not ``top``.
    """
    if max_depth is not None and max_depth <= 0:
        return
    stack: list[tuple[int, str, Iterator[_Listed], int]] = []
    try:
        descend = max_depth is None or max_depth > 1
        stack.append((top, "", iter(_listing(top, "", descend, guard, base)), 1))
        while stack:
            fd, rel_dir, items, depth = stack[-1]
            item = next(items, None)
            if item is None:
                stack.pop()
                if fd != top:
                    os.close(fd)
                continue
            _, name, kind, regular, into = item
            rel = name if not rel_dir else rel_dir + "/" + name
            if not into:
                yield (rel, name, kind, regular, fd)
                continue
            try:
                child = os.open(name, O_DIR_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue  # unreadable, replaced by a symlink, or gone: skip, as rg does
            try:
                deeper = max_depth is None or depth + 1 < max_depth
                listing = _listing(child, rel, deeper, guard, base)
            except OSError:
                os.close(child)
                continue
            stack.append((child, rel, iter(listing), depth + 1))
    finally:
        for fd, *_ in stack:
            if fd != top:
                os.close(fd)


async def glob_fd(
    start: int,
    plan: GlobPlan,
    directory: str,
    *,
    guard: GuardView | None = None,
    guard_base: str = "/",
) -> AsyncGenerator[DirEntry, None]:
    """``glob`` under the directory whose path is ``directory``, yielding ``directory``-joined
    paths. ``start`` is the readable fd of ``directory`` joined with the plan's literal prefix
    (the caller resolved it), ``guard_base`` the guard's path for ``start``. Owns ``start``."""
    prefix = "/".join(plan.literal_prefix)
    depth = None if plan.max_depth is None else plan.max_depth - len(plan.literal_prefix)
    walker = walk_fd(start, max_depth=depth, guard=guard, base=guard_base)
    try:
        for count, (rel, _, kind, _, _) in enumerate(walker, start=1):
            full = prefix + "/" + rel if prefix else rel
            if plan.match(full):
                yield DirEntry(_join(directory, full), kind)
            if count % CHECKPOINT_EVERY == 0:
                await anyio.lowlevel.checkpoint()
    finally:
        walker.close()
        os.close(start)


_BIG_FILE = 4 << 20  # read files bigger than this on a worker thread


async def grep_fd(
    fd: int,
    path: str,
    query: GrepQuery,
    *,
    guard: GuardView | None = None,
    guard_base: str = "/",
) -> AsyncGenerator[GrepResult, None]:
    """``grep`` of the file or directory open as ``fd`` (readable), whose path is ``path``.

    Files are read with ``O_NOFOLLOW`` (symlinks are skipped, as ripgrep skips them without
    ``--follow``), images and files with a NUL in their first 8 KiB are skipped, the rest is
    decoded as UTF-8 with replacement, a chunk at a time (:func:`grep_file_fd`). Owns ``fd``.
    Stops after ``query.max_results`` hits.
    """
    try:
        regex = compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=path)
        limit = query.max_results
        if limit is not None and limit <= 0:
            return
        file_filter = compile_grep_glob(query.glob)
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            if not stat.S_ISREG(st.st_mode):
                return
            name = path.rsplit("/", 1)[-1]
            if (file_filter is not None and not file_filter(name)) or is_image_path(path):
                return
            async with contextlib.aclosing(grep_file_fd(fd, regex)) as hits:
                async for number, line in hits:
                    yield GrepResult(path, number, line)
                    if limit is not None:
                        limit -= 1
                        if limit <= 0:
                            return
            return
        walker = walk_fd(fd, guard=guard, base=guard_base)
        try:
            for count, (rel, name, _, regular, parent) in enumerate(walker, start=1):
                if count % CHECKPOINT_EVERY == 0:
                    await anyio.lowlevel.checkpoint()
                if not regular or (file_filter is not None and not file_filter(rel)):
                    continue
                if is_image_path(name):
                    continue
                try:
                    child = os.open(
                        name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | O_CLOEXEC, dir_fd=parent
                    )
                except OSError:
                    continue  # unreadable or gone: skip, as rg does
                full = _join(path, rel)
                try:
                    async with contextlib.aclosing(grep_file_fd(child, regex)) as hits:
                        async for number, line in hits:
                            yield GrepResult(full, number, line)
                            if limit is not None:
                                limit -= 1
                                if limit <= 0:
                                    return
                finally:
                    os.close(child)
        finally:
            walker.close()
    finally:
        os.close(fd)


_GREP_CHUNK = 1 << 16
_CHUNKS_BETWEEN_CHECKPOINTS = 16


async def grep_file_fd(fd: int, regex: re.Pattern[str]) -> AsyncGenerator[tuple[int, str], None]:
    """The hits of ``regex`` in the regular file open as ``fd``, read a chunk at a time (never
    whole: :class:`vfs._match.LineGrep`); a read error ends the file, as ripgrep skips it.
    Does not close ``fd``."""
    grep = LineGrep(regex)
    offset = 0
    reads = 0
    while True:
        try:
            chunk = os.pread(fd, _GREP_CHUNK, offset)
        except OSError:
            return
        if not chunk:
            break
        offset += len(chunk)
        for hit in grep.feed(chunk):
            yield hit
        if grep.binary:
            return
        reads += 1
        if reads % _CHUNKS_BETWEEN_CHECKPOINTS == 0:
            await anyio.lowlevel.checkpoint()
    for hit in grep.end():
        yield hit


async def read_whole(fd: int, size: int) -> bytes:
    """The bytes of ``fd`` (of ``size`` by ``fstat``); big files are read on a worker thread."""
    if size > _BIG_FILE:
        return await anyio.to_thread.run_sync(read_fd, fd, size)
    return read_fd(fd, size)


def data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` spans of ``fd`` within ``size`` that hold data (the rest are holes),
    as SEEK_DATA/SEEK_HOLE tell them; the whole rest where the file system cannot."""
    spans: list[tuple[int, int]] = []
    offset = 0
    try:
        while offset < size:
            start = os.lseek(fd, offset, os.SEEK_DATA)
            if start >= size:
                break
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            spans.append((start, end))
            offset = end
    except OSError as error:
        if error.errno == errno.ENXIO:  # no data past offset
            return spans
        return [*spans, (offset, size)]
    return spans
