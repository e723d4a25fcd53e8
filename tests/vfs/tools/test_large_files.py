"""Files too large to hold: Read shows a window, grep streams, StrReplace refuses.

A 64 GiB sparse file (its holes read as NUL bytes) stands for any file larger than memory: read
whole it raises ``MemoryError``. On every host tree, Read with ``limit: 1`` shows the cut first
line, grep stops at the first NUL, and StrReplace refuses with the size it documents, all after
reading a few chunks.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

import vfs
from vfs.tools import synthesize_tools
from vfs.tools._edit import TOO_LARGE
from vfs.tools._read import READ_MAX_CHARS

from .helpers import BACKENDS, call, err, ok
from .trees import build

HUGE = 64 << 30
HOST_TREES = ["dir", "local", "union", "cow"]


def _sparse(kind: str, tmp_path: Path, head: bytes) -> tuple[vfs.FileSystem, str, Path]:
    tree = build(kind, tmp_path, {"/big.txt": head})
    host = next(tmp_path.iterdir()) / "big.txt"
    os.truncate(host, HUGE)
    return tree.fs, tree.p("/big.txt"), host


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", HOST_TREES)
def test_read_of_a_huge_file_shows_a_window(backend: str, kind: str, tmp_path: Path) -> None:
    fs, path, _ = _sparse(kind, tmp_path, b"hello\nworld\n")
    assert call(backend, fs, "Read", {"path": path, "limit": 2}) == ok(
        "     1\thello\n     2\tworld"
    )
    shown = call(backend, fs, "Read", {"path": path, "offset": 3, "limit": 1})
    assert shown == ok(
        "     3\t"
        + "\0" * READ_MAX_CHARS
        + f"\n[Line 3 of {path} is cut after {READ_MAX_CHARS} characters. "
        "Use offset 4 to read on.]"
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", HOST_TREES)
def test_grep_of_a_huge_file_streams(backend: str, kind: str, tmp_path: Path) -> None:
    head = b"hello\n" * 1500  # more than the 8 KiB that decide "binary"
    fs, path, _ = _sparse(kind, tmp_path, head)

    async def main() -> None:
        hits = [hit async for hit in fs.grep(vfs.GrepQuery("hello", path=path))]
        assert [hit.line_number for hit in hits] == list(range(1, 1501))
        assert [hit async for hit in fs.grep(vfs.GrepQuery("x", path=path))] == []
        tool = synthesize_tools(fs, ["Grep"])["Grep"]
        assert await tool.invoke({"pattern": "hello", "path": path, "output_mode": "count"}) == ok(
            f"{path}:1500"
        )

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", HOST_TREES)
def test_str_replace_refuses_a_huge_file(backend: str, kind: str, tmp_path: Path) -> None:
    fs, path, host = _sparse(kind, tmp_path, b"hello\n")
    arguments = {"path": path, "oldText": "hello", "newText": "bye"}
    assert call(backend, fs, "StrReplace", arguments) == err(TOO_LARGE)
    assert os.stat(host).st_size == HUGE
    with open(host, "rb") as handle:
        assert handle.read(6) == b"hello\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_str_replace_takes_a_file_of_exactly_the_limit(backend: str, tmp_path: Path) -> None:
    from vfs.tools._edit import EDIT_MAX_BYTES

    data = b"a" * (EDIT_MAX_BYTES - 2) + b"b\n"
    tree = build("dir", tmp_path, {"/f.txt": data})
    result = call(
        backend, tree.fs, "StrReplace", {"path": "/f.txt", "oldText": "b", "newText": "c"}
    )
    assert result == ok({"occurrencesModified": 1})
    (tmp_path / "dir" / "f.txt").write_bytes(data + b"x")
    result = call(
        backend, tree.fs, "StrReplace", {"path": "/f.txt", "oldText": "b", "newText": "c"}
    )
    assert result == err(TOO_LARGE)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["temp", "dir", "local", "host", "user_tree"])
def test_read_stops_at_the_output_limit(backend: str, kind: str, tmp_path: Path) -> None:
    """Whole lines are shown while they fit in READ_MAX_CHARS; the window then says where to
    read on, and reading on from there shows the rest."""
    line = "x" * 999
    tree = build(kind, tmp_path, {"/a.txt": f"{line}\n".encode() * 300})
    path = tree.p("/a.txt")
    fits = READ_MAX_CHARS // 999  # 262 lines
    expected = "\n".join(f"{n:6d}\t{line}" for n in range(1, fits + 1))
    note = (
        f"[Read stopped before line {fits + 1} of {path}: it shows at most {READ_MAX_CHARS} "
        f"characters at once. Use offset {fits + 1} to read on.]"
    )
    assert call(backend, tree.fs, "Read", {"path": path}) == ok(expected + "\n" + note)
    rest = "\n".join(f"{n:6d}\t{line}" for n in range(fits + 1, 301))
    assert call(backend, tree.fs, "Read", {"path": path, "offset": fits + 1}) == ok(rest)
    assert call(backend, tree.fs, "Read", {"path": path, "offset": -2}) == ok(
        f"   299\t{line}\n   300\t{line}"
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["temp", "dir", "local", "host", "user_tree"])
def test_a_long_line_before_the_window_is_skipped(backend: str, kind: str, tmp_path: Path) -> None:
    data = b"a" * (3 << 20) + b"\nsecond\r\nthird"
    tree = build(kind, tmp_path, {"/a.txt": data})
    path = tree.p("/a.txt")
    assert call(backend, tree.fs, "Read", {"path": path, "offset": 2}) == ok(
        "     2\tsecond\n     3\tthird"
    )
    assert call(backend, tree.fs, "Read", {"path": path, "offset": -1}) == ok("     3\tthird")
    assert call(backend, tree.fs, "Read", {"path": path, "offset": 4}) == err(
        f"Read: offset 4 is past the end of {path} (3 lines)"
    )
