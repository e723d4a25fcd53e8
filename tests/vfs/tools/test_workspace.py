"""Per-send workspace files: memory/ is refused after normalization."""

from __future__ import annotations

import errno

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
