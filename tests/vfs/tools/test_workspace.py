"""Per-send workspace files: memory/ is refused after the path is resolved as the tree does."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import vfs
from vfs.tools import ReservedPathError, check_workspace_file_path

from ..eightverb import exactly


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("memory/x", "/memory/x"),
        ("./memory/x", "/memory/x"),
        ("foo/../memory/x", "/memory/x"),
        ("/memory", "/memory"),
        ("memory", "/memory"),
        ("memory/", "/memory"),
        ("/memory/deep/x.md", "/memory/deep/x.md"),
        ("../memory/x", "/memory/x"),
        ("//memory//x", "/memory/x"),
        ("a/b/../../memory/./x", "/memory/x"),
    ],
)
def test_memory_is_refused(path: str, refused: str) -> None:
    with pytest.raises(ReservedPathError) as caught:
        check_workspace_file_path(path)
    error = caught.value
    assert str(error) == f"reserved path: {refused} (memory/ is reserved for durable agent memory)"
    assert error.path == refused
    assert error.errno == errno.EACCES
    assert isinstance(error, vfs.PermissionDeniedError)
    assert isinstance(error, PermissionError)


@pytest.mark.parametrize(
    ("path", "normalized"),
    [
        ("notes/a.md", "/notes/a.md"),
        ("memory-notes/x", "/memory-notes/x"),
        ("memoryx", "/memoryx"),
        ("/notes/memory/x", "/notes/memory/x"),
        ("./a/../b.txt", "/b.txt"),
    ],
)
def test_other_paths_pass_normalized(path: str, normalized: str) -> None:
    assert check_workspace_file_path(path) == normalized


def test_a_path_no_tree_can_hold() -> None:
    with pytest.raises(
        vfs.InvalidPathError, match=exactly("invalid path: a\\0: path contains a NUL byte")
    ):
        check_workspace_file_path("a\0")


@pytest.fixture
def host_workspace(tmp_path: Path) -> tuple[Path, Path]:
    """A harness cwd whose ``memory`` is a symlink into durable agent memory (as on the host
    default), and that durable directory."""
    durable = tmp_path / "durable-memory"
    durable.mkdir()
    cwd = tmp_path / "repo"
    cwd.mkdir()
    (cwd / "memory").symlink_to(durable)
    (cwd / "notes").symlink_to(durable)  # another way in
    return cwd, durable


@pytest.mark.parametrize(
    "spelling",
    [
        "memory/x",
        "./memory/x",
        "foo/../memory/x",
        "{cwd}/memory/x",
        "../repo/memory/x",
        "{cwd}/./memory",
        "{durable}/x",
        "notes/x",
        "{cwd}/notes/deep/x",
    ],
)
def test_memory_is_refused_on_the_host_default(
    spelling: str, host_workspace: tuple[Path, Path]
) -> None:
    """Resolved as ``local_file_system`` resolves it (relative to its cwd, then the links the
    disk holds), no spelling reaches durable memory; nothing is written there."""
    cwd, durable = host_workspace
    fs = vfs.local_file_system(cwd)
    path = spelling.format(cwd=cwd, durable=durable)
    with pytest.raises(ReservedPathError) as caught:
        check_workspace_file_path(path, fs)
    resolved = fs.resolve(path)
    assert caught.value.path == resolved
    assert str(caught.value) == (
        f"reserved path: {resolved} (memory/ is reserved for durable agent memory)"
    )
    assert list(durable.iterdir()) == []


@pytest.mark.parametrize("spelling", ["x.md", "memory-notes/x", "docs/memory/x", "{cwd}/a/b"])
def test_other_host_paths_pass_resolved(spelling: str, host_workspace: tuple[Path, Path]) -> None:
    cwd, _ = host_workspace
    fs = vfs.local_file_system(cwd)
    path = spelling.format(cwd=cwd)
    assert check_workspace_file_path(path, fs) == fs.resolve(path)


def test_a_virtual_tree_reserves_its_own_memory() -> None:
    """An authored root resolves paths from ``/``: ``{cwd}/memory/x`` is an ordinary path there."""
    root = vfs.temp_fs()
    assert check_workspace_file_path("/home/me/repo/memory/x", root) == "/home/me/repo/memory/x"
    with pytest.raises(ReservedPathError):
        check_workspace_file_path("a/../memory/x", root)
