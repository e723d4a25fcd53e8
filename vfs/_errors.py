"""The error hierarchy of the FileSystem contract.

Every error a FileSystem raises about a path is a :class:`PathError`: it carries ``path`` (the
absolute posix path it is about) and ``errno`` (what a POSIX mount answers for it), and
``str(error)`` is exactly the contract's message, so a synthesized tool can show it as-is. An
error with no message of its own says what happened in words (``os.strerror``): ``device or
resource busy: /repo``, ``input/output error: /a.txt``.

Each leaf also subclasses the matching builtin (``vfs.FileNotFoundError`` is caught by
``except builtins.FileNotFoundError``); all of them are ``OSError``s, so ``except OSError`` and
``error.errno`` work as callers of the standard library expect.

:meth:`PathError.with_path` re-targets an error to another path (a union re-prefixes a child's
error with the mount prefix); the message is rebuilt from the new path, never string-patched.
"""

from __future__ import annotations

import builtins
import copy
import errno as _errno
import os
from typing import ClassVar


class PathError(OSError):
    """An error about one path of a FileSystem."""

    default_errno: ClassVar[int] = _errno.EIO
    path: str

    def __init__(self, path: str, *, errno: int | None = None) -> None:
        code = self.default_errno if errno is None else errno
        super().__init__(code, "")
        self.errno = code
        self.path = path
        self.filename = path
        self.strerror = self._message()

    def _message(self) -> str:
        return f"{_what_happened(self.errno)}: {self.path}"

    def __str__(self) -> str:
        return self._message()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._message()!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # OSError pickles its args; rebuild from the instance dict instead.
        return (_rebuild, (type(self), self.errno, self.__dict__.copy()))

    def with_path(self, new_path: str) -> PathError:
        """A copy of this error about ``new_path``, with its message rebuilt."""
        clone = copy.copy(self)
        clone.path = new_path
        clone.filename = new_path
        clone.strerror = clone._message()
        return clone


def _what_happened(code: int | None) -> str:
    """What ``code`` means, in words (``EBUSY``: "device or resource busy")."""
    words = os.strerror(code or _errno.EIO)
    return words[:1].lower() + words[1:]


def _rebuild(cls: type[PathError], code: int, state: dict[str, object]) -> PathError:
    error = cls.__new__(cls)
    OSError.__init__(error, code, "")
    error.__dict__.update(state)
    error.errno = code
    error.filename = error.path
    error.strerror = error._message()
    return error


class FileNotFoundError(PathError, builtins.FileNotFoundError):
    """``read``/``delete`` of a path that does not exist."""

    default_errno = _errno.ENOENT

    def _message(self) -> str:
        return f"not found: {self.path}"


class ReadOnlyMountError(PathError, builtins.PermissionError):
    """A write to a tree (or part of one) that does not take writes."""

    default_errno = _errno.EROFS

    def _message(self) -> str:
        return f"read-only mount: {self.path}"


class NoMountError(PathError, builtins.FileNotFoundError):
    """A union has no mount covering the path (walk verbs stay empty instead)."""

    default_errno = _errno.ENOENT

    def _message(self) -> str:
        return f"no mount for path: {self.path}"


class InvalidGrepPatternError(PathError, builtins.ValueError):
    """``grep`` was given a pattern that does not compile."""

    default_errno = _errno.EINVAL

    def __init__(self, path: str, pattern: str) -> None:
        self.pattern = pattern
        super().__init__(path)

    def _message(self) -> str:
        return f"invalid grep pattern: {self.pattern}"


class WriteFailedError(PathError):
    """A write did not reach the store (I/O failure, or a lost compare-and-swap)."""

    default_errno = _errno.EIO

    def _message(self) -> str:
        return f"write failed: {self.path}"


class EditError(PathError, builtins.ValueError):
    """StrReplace could not apply its edit; the message is the contract's sentence."""

    default_errno = _errno.EINVAL

    def __init__(self, path: str, message: str) -> None:
        self.message = message
        super().__init__(path)

    def _message(self) -> str:
        return self.message


class DeleteNotSupportedError(PathError):
    """The tree cannot delete this path."""

    default_errno = _errno.EOPNOTSUPP

    def _message(self) -> str:
        return f"delete not supported: {self.path}"


# Errors beyond the contract: what a POSIX mount and the sandbox layers need to say.


class InvalidPathError(PathError, builtins.ValueError):
    """A path that no POSIX filesystem can hold (NUL byte, over-long segment)."""

    default_errno = _errno.EINVAL

    def __init__(self, path: str, reason: str) -> None:
        self.reason = reason
        too_long = "longer than" in reason
        super().__init__(path, errno=_errno.ENAMETOOLONG if too_long else _errno.EINVAL)

    def _message(self) -> str:
        return f"invalid path: {self.path}: {self.reason}"


class FileExistsError(PathError, builtins.FileExistsError):
    """Exclusive create, mkdir or a no-replace rename onto an existing path."""

    default_errno = _errno.EEXIST

    def _message(self) -> str:
        return f"already exists: {self.path}"


class NotADirectoryError(PathError, builtins.NotADirectoryError):
    """A directory operation on something that is not a directory (or a file used as a parent)."""

    default_errno = _errno.ENOTDIR

    def _message(self) -> str:
        return f"not a directory: {self.path}"


class IsADirectoryError(PathError, builtins.IsADirectoryError):
    """A file operation on a directory."""

    default_errno = _errno.EISDIR

    def _message(self) -> str:
        return f"is a directory: {self.path}"


class DirectoryNotEmptyError(PathError):
    """rmdir, delete or rename-over of a directory that still has entries."""

    default_errno = _errno.ENOTEMPTY

    def _message(self) -> str:
        return f"directory not empty: {self.path}"


class PermissionDeniedError(PathError, builtins.PermissionError):
    """A path policy refuses this access."""

    default_errno = _errno.EACCES

    def _message(self) -> str:
        return f"permission denied: {self.path}"


class NotSupportedError(PathError):
    """The tree holding this path cannot do the operation (hard links, an 8-verb layer's mkdir)."""

    default_errno = _errno.EOPNOTSUPP

    def _message(self) -> str:
        return f"operation not supported: {self.path}"


class CrossMountError(PathError):
    """A rename between two mounts of a union, which no single tree can make atomic."""

    default_errno = _errno.EXDEV

    def _message(self) -> str:
        return f"cross-mount rename: {self.path}"


class UnsafePathError(PathError, builtins.PermissionError):
    """A strict host tree (``dir_fs(..., strict=True)``) refused a path: it goes through a
    symlink (``ELOOP``) or crosses a mount point (``EXDEV``), which such a tree never does."""

    def _message(self) -> str:
        if self.errno == _errno.ELOOP:
            return f"refused: {self.path} goes through a symlink (this tree follows none)"
        return f"refused: {self.path} crosses a mount point (this tree crosses none)"


class FileTooLargeError(PathError):
    """A size beyond what the tree holds (truncate to an absurd length)."""

    default_errno = _errno.EFBIG

    def _message(self) -> str:
        return f"file too large: {self.path}"


# What a tree raises when it could not answer at all (a store that is down or unreachable, a
# mount whose daemon died, broken I/O), as opposed to an answer about the path.
UNAVAILABLE_ERRNOS = frozenset(
    {
        _errno.EIO,
        _errno.ENOTCONN,
        _errno.ETIMEDOUT,
        _errno.EHOSTDOWN,
        _errno.EHOSTUNREACH,
        _errno.ENETDOWN,
        _errno.ENETUNREACH,
        _errno.ECONNREFUSED,
        _errno.ECONNRESET,
        _errno.ECONNABORTED,
    }
)


def is_answer(error: BaseException) -> bool:
    """Whether ``error`` is a tree's answer about a path (``not found``, an invalid pattern...)
    rather than the tree failing to answer: a :class:`PathError` whose errno is not one of
    :data:`UNAVAILABLE_ERRNOS`. Anything else is a failure (a backend that is down)."""
    return isinstance(error, PathError) and error.errno not in UNAVAILABLE_ERRNOS
