"""The front door: ``vfs.__all__`` is exactly the public surface, and every error is buildable.

As trio's ``test_exports.py``: every exported name resolves, nothing public leaks beside
``__all__`` (submodules excepted, they are private by their leading underscore anyway), and every
error class is constructible from the path it is about with the contract's literal message.
"""

from __future__ import annotations

import builtins
import errno
import types

import pytest

import vfs


def test_every_exported_name_resolves() -> None:
    assert len(vfs.__all__) == len(set(vfs.__all__)), "duplicates in __all__"
    assert vfs.__all__ == sorted(vfs.__all__), "keep __all__ sorted"
    for name in vfs.__all__:
        assert getattr(vfs, name, None) is not None, name


def test_nothing_public_leaks() -> None:
    public = {
        name
        for name, value in vars(vfs).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(vfs.__all__)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from vfs import *", namespace)
    namespace.pop("__builtins__")
    assert set(namespace) == set(vfs.__all__)


def test_exported_objects_say_they_are_public() -> None:
    """Exported classes and functions come from a private module of ``vfs`` (no stray re-export
    of a third-party name)."""
    for name in vfs.__all__:
        value = getattr(vfs, name)
        module = getattr(value, "__module__", None)
        if module is not None and isinstance(value, (type, types.FunctionType)):
            assert module.startswith("vfs."), (name, module)


CONTRACT_ERRORS = [
    (vfs.FileNotFoundError("/a.txt"), "not found: /a.txt", builtins.FileNotFoundError),
    (vfs.ReadOnlyMountError("/a.txt"), "read-only mount: /a.txt", builtins.PermissionError),
    (vfs.NoMountError("/x"), "no mount for path: /x", builtins.FileNotFoundError),
    (vfs.InvalidGrepPatternError("/", "("), "invalid grep pattern: (", builtins.ValueError),
    (vfs.WriteFailedError("/a"), "write failed: /a", builtins.OSError),
    (
        vfs.EditError("/a", "The string to replace was not found in the file"),
        "The string to replace was not found in the file",
        builtins.ValueError,
    ),
    (vfs.DeleteNotSupportedError("/a"), "delete not supported: /a", builtins.OSError),
]

POSIX_ERRORS = [
    (vfs.FileExistsError("/a"), "already exists: /a", errno.EEXIST, builtins.FileExistsError),
    (vfs.NotADirectoryError("/a"), "not a directory: /a", errno.ENOTDIR, NotADirectoryError),
    (vfs.IsADirectoryError("/a"), "is a directory: /a", errno.EISDIR, IsADirectoryError),
    (vfs.DirectoryNotEmptyError("/a"), "directory not empty: /a", errno.ENOTEMPTY, OSError),
    (vfs.PermissionDeniedError("/a"), "permission denied: /a", errno.EACCES, PermissionError),
    (vfs.NotSupportedError("/a"), "operation not supported: /a", errno.EOPNOTSUPP, OSError),
    (vfs.CrossMountError("/a"), "cross-mount rename: /a", errno.EXDEV, OSError),
    (vfs.FileTooLargeError("/a"), "file too large: /a", errno.EFBIG, OSError),
    (
        vfs.InvalidPathError("/a", "path contains a NUL byte"),
        "invalid path: /a: path contains a NUL byte",
        errno.EINVAL,
        ValueError,
    ),
    (
        vfs.PolicyDeniedError("/a"),
        "permission denied by policy: /a",
        errno.EACCES,
        PermissionError,
    ),
    (
        vfs.CowConflictError("/a", "changed in the lower tree since it was copied up"),
        "conflict: /a changed in the lower tree since it was copied up",
        errno.ESTALE,
        OSError,
    ),
]


@pytest.mark.parametrize(
    ("error", "message", "builtin"),
    CONTRACT_ERRORS,
    ids=[type(error).__name__ for error, *_ in CONTRACT_ERRORS],
)
def test_contract_errors_from_a_path(
    error: vfs.PathError, message: str, builtin: type[BaseException]
) -> None:
    assert str(error) == message
    assert isinstance(error, vfs.PathError)
    assert isinstance(error, builtin)
    assert error.path in ("/a.txt", "/x", "/", "/a")
    moved = error.with_path("/m" + error.path)
    assert type(moved) is type(error)
    assert moved.path == "/m" + error.path


@pytest.mark.parametrize(
    ("error", "message", "code", "builtin"),
    POSIX_ERRORS,
    ids=[type(error).__name__ for error, *_ in POSIX_ERRORS],
)
def test_posix_errors_from_a_path(
    error: vfs.PathError, message: str, code: int, builtin: type[BaseException]
) -> None:
    assert str(error) == message
    assert error.errno == code
    assert isinstance(error, builtin)
    assert isinstance(error, vfs.PathError)


def test_every_exported_error_is_covered() -> None:
    exported = {
        value
        for name in vfs.__all__
        if isinstance(value := getattr(vfs, name), type) and issubclass(value, BaseException)
    }
    covered = {type(error) for error, *_ in CONTRACT_ERRORS + POSIX_ERRORS} | {vfs.PathError}
    assert exported == covered


def test_path_error_itself() -> None:
    error = vfs.PathError("/a")
    assert error.path == "/a"
    assert error.errno == errno.EIO
    assert isinstance(error, OSError)
