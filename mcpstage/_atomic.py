"""Whole-file replacement that a crash can only see before or after, and its debris.

Theory of operation
-------------------
A file the protocol owns or edits (the config, the manifest, ``info/exclude``, the cleanup intent)
changes only by :func:`replace_bytes`: the new bytes go to a temporary name in the same
directory, are fsynced, and ``rename(2)`` puts them in place, then the directory is fsynced. A
reader (another process, git, a crash-recovery pass) therefore sees the old bytes or the new
bytes, never a mix, on any filesystem with atomic rename (tmpfs, ext4, a ``mountd`` mount).

Temporary entries are named ``<prefix><pid>.<random>.<hostname>`` (:func:`temp_name`) so a later
pass can tell whose they were: :func:`sweep` removes those of a dead process on this host, and
anyone's older than an age limit; a live writer's are left alone. A temporary entry is a file,
or a directory (a lock in the making or moved aside, see ``_locks``); it is removed with
whatever it holds (every name it can have is the protocol's), never following a symlink.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Sequence

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
    step: str | None = None,
    mode: int | None = None,
) -> None:
    """Atomically make ``path`` hold ``data`` (keeping its mode; ``mode`` for a new file).

    ``step``: a crash-point name prefix; ``<step>.config-temp-written`` fires between the
    durable temporary file and the rename.
    """
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
        if step is not None:
            crash_point(f"{step}.config-temp-written")
        os.rename(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(directory)


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
