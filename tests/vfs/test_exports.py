"""The front door: ``vfs.__all__`` is exactly the public surface, and every error is buildable.

As trio's ``test_exports.py``: every exported name resolves, nothing public leaks beside
``__all__`` (submodules excepted, they are private by their leading underscore anyway), and every
error class is constructible from the path it is about with the contract's literal message.
"""

from __future__ import annotations

import builtins
import errno
import sys
import types
import typing
from pathlib import Path

import pytest

import vfs
import vfs.lowlevel as lowlevel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_every_exported_name_resolves() -> None:
    assert len(vfs.__all__) == len(set(vfs.__all__)), "duplicates in __all__"
    assert vfs.__all__ == sorted(vfs.__all__), "keep __all__ sorted"
    for name in vfs.__all__:
        assert getattr(vfs, name, None) is not None, name


BUILTIN_NAMED = {"FileExistsError", "FileNotFoundError", "IsADirectoryError", "NotADirectoryError"}


def test_nothing_public_leaks() -> None:
    public = {
        name
        for name, value in vars(vfs).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    # The errors named like Python's own stay attributes, out of __all__.
    assert public == set(vfs.__all__) | BUILTIN_NAMED
    assert not BUILTIN_NAMED & set(vfs.__all__)


def test_star_import_gives_exactly_all_and_shadows_no_builtin() -> None:
    namespace: dict[str, object] = {}
    exec("from vfs import *", namespace)
    namespace.pop("__builtins__")
    assert set(namespace) == set(vfs.__all__)
    assert not set(namespace) & set(dir(builtins))


def test_exported_objects_say_where_they_are_public() -> None:
    """Exported classes and functions name the public module they are found in (tracebacks,
    reprs and docs point there), and come from ``vfs`` itself (no stray re-export)."""
    for module, names in ((vfs, [*vfs.__all__, *BUILTIN_NAMED]), (lowlevel, lowlevel.__all__)):
        for name in names:
            value = getattr(module, name)
            if isinstance(value, (type, types.FunctionType)):
                assert value.__module__ == module.__name__, (name, value.__module__)


def test_the_second_tier_resolves_and_owes_nothing_to_the_first() -> None:
    assert lowlevel.__all__ == sorted(lowlevel.__all__, key=lambda n: (not n.isupper(), n))
    for name in lowlevel.__all__:
        assert getattr(lowlevel, name, None) is not None, name
    assert not set(lowlevel.__all__) & set(vfs.__all__)


def test_every_type_a_factory_returns_is_exported() -> None:
    exported = {
        getattr(module, name)
        for module in (vfs, lowlevel)
        for name in module.__all__
        if isinstance(getattr(module, name), type)
    }
    factories = [name for name in vfs.__all__ if name.endswith("_fs") or name == "posix_view"]
    factories.append("local_file_system")
    for name in factories:
        returned = typing.get_type_hints(getattr(vfs, name))["return"]
        assert returned in exported or returned in (vfs.PosixFileSystem,), (name, returned)


def test_no_module_outside_vfs_imports_its_private_modules() -> None:
    """ruff's banned-API rule names every private module of ``vfs`` (a new one must be added)."""
    root = Path(vfs.__file__).parent
    private = {
        ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for path in root.rglob("_*.py")
        if path.name != "__init__.py"
    }
    config = tomllib.loads((root.parent / "pyproject.toml").read_text())
    banned = set(config["tool"]["ruff"]["lint"]["flake8-tidy-imports"]["banned-api"])
    assert private == banned


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
    (vfs.CheckpointNotFoundError(7), "no checkpoint 7", errno.ENOENT, OSError),
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
        for name in [*vfs.__all__, *BUILTIN_NAMED]
        if isinstance(value := getattr(vfs, name), type) and issubclass(value, BaseException)
    }
    covered = {type(error) for error, *_ in CONTRACT_ERRORS + POSIX_ERRORS} | {vfs.PathError}
    assert exported == covered


def test_path_error_itself() -> None:
    error = vfs.PathError("/a")
    assert error.path == "/a"
    assert error.errno == errno.EIO
    assert isinstance(error, OSError)
