"""Whole-file replacement that a crash can only see before or after, and its debris.

Theory of operation
-------------------
A file the protocol owns or edits (the manifest, ``info/exclude``, the cleanup intent) changes
only by :func:`replace_bytes`: the new bytes go to a temporary name in the same
directory, are fsynced, and ``rename(2)`` puts them in place, then the directory is fsynced. A
reader (another process, git, a crash-recovery pass) therefore sees the old bytes or the new
bytes, never a mix, on any filesystem with atomic rename (tmpfs, ext4, a ``mountd`` mount).

The config is shared with an operator whose editor may save at any instant, so fusion writes it
with :func:`swap` instead: it replaces the file only if it still holds the bytes the new content
was composed from. It looks again right before the rename (the *last look*), and the rename
itself is ``renameat2(RENAME_EXCHANGE)`` (``RENAME_NOREPLACE`` when there was no file), which
hands back exactly what the name held at the instant of the rename. If that is not what the
last look saw, a save landed in between: it is put back (exchanged again; a save newer still is
put back in turn) and :func:`swap` reports the race, so the caller recomposes from it. Bytes
decide, not identity: a save of identical bytes loses nothing. Removal moves the file aside and
checks the same way. An in-place save (``open(path, "w")`` truncates at open) that opened the
file before the rename modified it before the check, so it is put back too; only a writer that
opens without truncating and changes the file after the check writes to the replaced file.
Where the filesystem has no ``renameat2`` flags (``EINVAL``), a plain rename follows the last
look and a save in the instant between them is lost; tmpfs, ext4 and ``mountd`` mounts have them.

Temporary entries are named ``<prefix><pid>.<random>.<hostname>`` (:func:`temp_name`) so a later
pass can tell whose they were: :func:`sweep` removes those of a dead process on this host, and
anyone's older than an age limit; a live writer's are left alone. A temporary entry is a file,
or a directory (a lock in the making or moved aside, see ``_locks``); it is removed with
whatever it holds (every name it can have is the protocol's), never following a symlink.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Sequence
from typing import Any

from . import _owner
from ._crash import crash_point


def temp_name(prefix: str) -> str:
    """A fresh temporary name that records this process (see the module docstring)."""
    return f"{prefix}{os.getpid()}.{secrets.token_hex(6)}.{socket.gethostname()}"


def read_bytes(path: str) -> bytes | None:
    """The bytes of ``path``, or ``None`` when it does not exist."""
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None


def fsync_dir(path: str) -> None:
    """Make the entries of directory ``path`` durable (ignored where unsupported)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def replace_bytes(
    path: str,
    data: bytes,
    *,
    temp_prefix: str,
    mode: int | None = None,
) -> None:
    """Atomically make ``path`` hold ``data`` (keeping its mode; ``mode`` for a new file)."""
    directory = os.path.dirname(path)
    temp = os.path.join(directory, temp_name(temp_prefix))
    try:
        keep_mode: int | None = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        keep_mode = mode
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            if keep_mode is not None:
                os.fchmod(fd, keep_mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(directory)


_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)
_PUT_BACK_ROUNDS = 8


def _libc_renameat2() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = (
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    )
    function.restype = ctypes.c_int
    return function


_renameat2_function = _libc_renameat2()


def _renameat2(source: str, target: str, flags: int) -> bool:
    """``renameat2(2)`` with ``flags``; ``False`` when the filesystem (or libc) lacks them."""
    if _renameat2_function is None:
        return False
    if (
        _renameat2_function(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags)
        == 0
    ):
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), source, None, target)


def _read_entry(path: str) -> bytes | None:
    """The bytes of the regular file ``path`` (no symlink followed); ``None`` for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_temp(directory: str, data: bytes, *, temp_prefix: str, mode: int | None) -> str:
    temp = os.path.join(directory, temp_name(temp_prefix))
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    os.close(fd)
    return temp


def _mode_of(path: str, default: int | None) -> int | None:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return default


def _put_back(temp: str, path: str, placed: bytes | None) -> None:
    """``temp`` holds a save that ``path`` must hold again; ``path`` holds ``placed`` (ours).

    Exchange them; if what comes back is not what we had placed, a newer save landed meanwhile:
    put that one back in turn. What is left at ``temp`` is ours or a superseded save."""
    for _round in range(_PUT_BACK_ROUNDS):
        arrived = _read_entry(temp)
        if not _renameat2(temp, path, _RENAME_EXCHANGE):
            raise OSError(errno.EINVAL, "RENAME_EXCHANGE stopped working", path)
        came_back = _read_entry(temp)
        if came_back == placed:
            break
        placed = arrived  # came_back is newer than what we just put in place: put it back
    remove_tree(temp)
    fsync_dir(os.path.dirname(path))


def swap(
    path: str,
    data: bytes | None,
    *,
    expected: bytes | None,
    temp_prefix: str,
    step: str,
    mode: int | None = None,
) -> bool:
    """Make ``path`` hold ``data`` (``None``: no file) if it still holds ``expected``.

    ``False`` when a save landed in between: then nothing of ours is left in place (see the
    module docstring). Crash points: ``<step>.config-temp-written`` before the last look,
    ``<step>.config-checked`` after it, right before the rename.
    """
    directory = os.path.dirname(path)
    if data is None:
        return _take_away(path, expected, temp_prefix=temp_prefix, step=step)
    temp = _write_temp(directory, data, temp_prefix=temp_prefix, mode=_mode_of(path, default=mode))
    placed = False
    try:
        crash_point(f"{step}.config-temp-written")
        if _read_entry(path) != expected or (expected is None and os.path.lexists(path)):
            return False
        crash_point(f"{step}.config-checked")
        if expected is None:
            try:
                placed = _renameat2(temp, path, _RENAME_NOREPLACE)
            except FileExistsError:
                return False
        elif _renameat2(temp, path, _RENAME_EXCHANGE):
            placed = True
            displaced = _read_entry(temp)
            if displaced != expected:
                _put_back(temp, path, data)
                return False
            os.unlink(temp)
        if not placed:  # no renameat2 flags here: the instant after the last look stays open
            os.rename(temp, path)
            placed = True
    finally:
        if not placed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    fsync_dir(directory)
    return True


def _take_away(path: str, expected: bytes | None, *, temp_prefix: str, step: str) -> bool:
    directory = os.path.dirname(path)
    crash_point(f"{step}.config-temp-written")  # the same steps as a replacement
    if _read_entry(path) != expected:
        return False
    crash_point(f"{step}.config-checked")
    aside = os.path.join(directory, temp_name(temp_prefix))
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    if _read_entry(aside) == expected:
        os.unlink(aside)
        fsync_dir(directory)
        return True
    try:
        if not _renameat2(aside, path, _RENAME_NOREPLACE) and not os.path.lexists(path):
            os.rename(aside, path)
    except FileExistsError:
        pass  # the operator saved again: that newer file supersedes the one moved aside
    with contextlib.suppress(FileNotFoundError):
        os.unlink(aside)
    fsync_dir(directory)
    return False


def remove_file(path: str) -> bool:
    """Unlink ``path`` durably; whether it existed."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(os.path.dirname(path))
    return True


def remove_tree(path: str) -> None:
    """Remove ``path`` whatever it is (a symlink itself, never what it points to)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _writer(suffix: str) -> _owner.Process | None:
    """The process a temporary name's ``<pid>.<random>.<hostname>`` suffix records."""
    pid, _, rest = suffix.partition(".")
    _random, _, hostname = rest.partition(".")
    if not pid.isdigit() or not hostname:
        return None
    return _owner.Process(pid=int(pid), hostname=hostname)


def is_debris(directory: str, name: str, prefix: str, *, max_age: float) -> bool:
    """Whether entry ``name`` (made with ``temp_name(prefix)``) was left by a dead writer."""
    writer = _writer(name[len(prefix) :])
    if writer is not None and _owner.is_alive(writer) is False:
        return True
    try:
        age = time.time() - os.lstat(os.path.join(directory, name)).st_mtime
    except FileNotFoundError:
        return False
    return age > max_age


def sweep(directory: str, prefixes: Sequence[str], *, max_age: float) -> list[str]:
    """Remove the debris of dead writers among ``directory``'s entries named with ``prefixes``."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for name in sorted(names):
        prefix = next((p for p in prefixes if name.startswith(p)), None)
        if prefix is None or not is_debris(directory, name, prefix, max_age=max_age):
            continue
        path = os.path.join(directory, name)
        remove_tree(path)
        if not os.path.lexists(path):
            removed.append(name)
    return removed
