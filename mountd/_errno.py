"""The one place an exception from a tree becomes an errno for the kernel.

Theory of operation
-------------------
Every ``vfs`` error is an ``OSError`` carrying the errno POSIX would answer (see
``vfs._errors``), so the mapping is mostly "use ``error.errno``". The exceptions:

- :class:`vfs.NoMountError` (a union has nothing at that path) reads as ``ENOENT`` for lookups and
  reads, but as ``EROFS`` for operations that would create or change something, which is what a
  read-only directory with no such entry answers.
- ``ENOSYS`` is never passed on: for several operations (flush, fsync, xattrs, ...) the kernel takes
  it as "this filesystem never implements the operation" and stops asking for the rest of the
  mount's life. A tree that says ENOSYS for one path means "not supported here": ``EOPNOTSUPP``.
- Anything else (a bug in a tree, an ``OSError`` without an errno) is ``EIO``, logged with its
  traceback so it can be fixed; the daemon keeps serving.
"""

from __future__ import annotations

import errno
import logging

from vfs import NoMountError

log = logging.getLogger("mountd")


def errno_for(error: BaseException, *, write: bool = False, op: str = "") -> int:
    """The errno to answer for ``error`` raised while serving ``op``."""
    if isinstance(error, NoMountError):
        return errno.EROFS if write else errno.ENOENT
    if isinstance(error, OSError) and isinstance(error.errno, int) and error.errno > 0:
        return errno.EOPNOTSUPP if error.errno == errno.ENOSYS else error.errno
    log.error("unexpected error in %s, answering EIO", op or "a request", exc_info=error)
    return errno.EIO
