"""Small syscall helpers the mount suites share: ``renameat2`` and errno capture.

Theory of operation
-------------------
The suites compare what the kernel answers, so every helper returns either the call's value or
the errno it failed with, never a translated exception. ``renameat2`` is called through ctypes
because Python's ``os`` has no binding for its flags.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Callable, Iterator

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = _libc.renameat2
_renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
_renameat2.restype = ctypes.c_int


def renameat2(src: str | os.PathLike[str], dst: str | os.PathLike[str], flags: int) -> None:
    """``renameat2(2)``; raises ``OSError`` with the kernel's errno."""
    rc = _renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags)
    if rc != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fspath(src), None, os.fspath(dst))


def errno_of(fn: Callable[..., object], *args: object, **kwargs: object) -> int:
    """0 when ``fn`` succeeds, else the errno of the ``OSError`` it raised."""
    try:
        fn(*args, **kwargs)
    except OSError as error:
        assert error.errno is not None, error
        return error.errno
    return 0


def outcome(fn: Callable[[], object]) -> tuple[str, object]:
    """``("ok", value)`` or ``("err", errno name)`` so differences print readably."""
    try:
        return ("ok", fn())
    except OSError as error:
        assert error.errno is not None, error
        return ("err", name(error.errno))


def name(code: int) -> str:
    """``errno.errorcode`` name, "0" for success (for readable assertion messages)."""
    return errno.errorcode.get(code, str(code)) if code else "0"


_libc.setfsuid.argtypes = [ctypes.c_uint]
_libc.setfsgid.argtypes = [ctypes.c_uint]


@contextlib.contextmanager
def as_fs_user(uid: int, gid: int) -> Iterator[None]:
    """Make this thread's filesystem accesses as ``uid``/``gid`` (``setfsuid``; root only).

    FUSE decides who may use a mount from the real/effective/saved ids, which stay root, while
    requests carry the fs ids: so this reaches a private mount as another user, and a tree sees
    that user as the caller.
    """
    old_gid = _libc.setfsgid(gid)
    old_uid = _libc.setfsuid(uid)
    try:
        # setfsuid answers the previous id and never fails loudly: check that it took.
        assert _libc.setfsuid(uid) == uid and _libc.setfsgid(gid) == gid, "setfsuid needs root"
        yield
    finally:
        _libc.setfsuid(old_uid)
        _libc.setfsgid(old_gid)
