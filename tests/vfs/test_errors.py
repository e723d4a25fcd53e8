import builtins
import errno
import pickle

import pytest

import vfs


@pytest.mark.parametrize(
    ("error", "message", "code", "builtin"),
    [
        (
            vfs.FileNotFoundError("/a.txt"),
            "not found: /a.txt",
            errno.ENOENT,
            builtins.FileNotFoundError,
        ),
        (
            vfs.ReadOnlyMountError("/a.txt"),
            "read-only mount: /a.txt",
            errno.EROFS,
            builtins.PermissionError,
        ),
        (vfs.NoMountError("/x"), "no mount for path: /x", errno.ENOENT, builtins.FileNotFoundError),
        (
            vfs.InvalidGrepPatternError("/", "("),
            "invalid grep pattern: (",
            errno.EINVAL,
            builtins.ValueError,
        ),
        (vfs.WriteFailedError("/a"), "write failed: /a", errno.EIO, builtins.OSError),
        (
            vfs.EditError("/a", "oldText is empty"),
            "oldText is empty",
            errno.EINVAL,
            builtins.ValueError,
        ),
        (
            vfs.DeleteNotSupportedError("/a"),
            "delete not supported: /a",
            errno.EOPNOTSUPP,
            builtins.OSError,
        ),
    ],
)
def test_contract_errors(error: vfs.PathError, message: str, code: int, builtin: type) -> None:
    assert str(error) == message
    assert error.errno == code
    assert isinstance(error, builtin)
    assert isinstance(error, vfs.PathError)
    assert isinstance(error, OSError)
    with pytest.raises(builtin):
        raise error


def test_with_path_rebuilds_the_message() -> None:
    error = vfs.FileNotFoundError("/a.txt")
    moved = error.with_path("/repo/a.txt")
    assert type(moved) is vfs.FileNotFoundError
    assert str(moved) == "not found: /repo/a.txt"
    assert moved.path == "/repo/a.txt"
    assert str(error) == "not found: /a.txt"
    grep = vfs.InvalidGrepPatternError("/src", "(").with_path("/repo/src")
    assert str(grep) == "invalid grep pattern: (" and grep.path == "/repo/src"


def test_errors_pickle() -> None:
    error = vfs.EditError("/a", "oldText is empty")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is vfs.EditError and str(again) == "oldText is empty" and again.path == "/a"
