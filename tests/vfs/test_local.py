"""``local_file_system``: host paths in and out, cwd-relative resolution, symlink policy."""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest

import vfs
from vfs._disk import guard_mountpoint, release_mountpoint

BACKENDS = ["trio", "asyncio"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


async def collect(iterator: Any) -> list[Any]:
    async with aclosing(iterator) as items:
        return [item async for item in items]


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, contents in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(contents)
    return root


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    """A repo-like cwd with a ``memory`` symlink to a directory outside it."""
    memory = make_tree(tmp_path / "memory-store", {"note.md": "needle in memory\n"})
    repo = make_tree(
        tmp_path.resolve() / "repo",
        {"a.txt": "needle a\n", "src/b.py": "needle b\n", "src/nested/c.py": "needle c\n"},
    )
    os.symlink(memory, repo / "memory")
    os.symlink("a.txt", repo / "a-link")
    return repo


def test_paths_resolve_against_cwd_and_stay_host_paths(backend: str, cwd: Path) -> None:
    async def body() -> None:
        fs = vfs.local_file_system(cwd)
        assert isinstance(fs, vfs.FileSystem)
        host = str(cwd)
        expected = [
            (f"{host}/a-link", "symlink"),
            (f"{host}/a.txt", "file"),
            (f"{host}/memory", "symlink"),
            (f"{host}/src", "directory"),
        ]
        for alias in ("", ".", host, f"{host}/", "src/..", f"{host}/src/nested/../.."):
            assert [(e.path, e.kind) for e in await collect(fs.list(alias))] == expected, alias
        assert [(e.path, e.kind) for e in await collect(fs.list())] == expected
        assert await fs.read("a.txt") == "needle a\n"
        assert await fs.read("./src/../a.txt") == "needle a\n"
        assert await fs.read(f"{host}/src/b.py") == "needle b\n"
        assert await fs.read("a-link") == "needle a\n"  # exact paths follow symlinks
        # Absolute paths are used as-is, even outside cwd.
        outside = cwd.parent / "memory-store" / "note.md"
        assert await fs.read(str(outside)) == "needle in memory\n"
        assert await fs.read("../memory-store/note.md") == "needle in memory\n"
        assert (await fs.stat("src")).kind == "directory"
        assert (await fs.stat("memory")).kind == "directory"
        assert (await fs.stat("nope")).kind == "missing"
        info = await fs.stat("a.txt")
        assert info.mtime_ns == os.stat(cwd / "a.txt").st_mtime_ns
        globbed = [e.path for e in await collect(fs.glob("**/*.py"))]
        assert globbed == [f"{host}/src/b.py", f"{host}/src/nested/c.py"]
        assert [e.path for e in await collect(fs.glob("*.py", "src"))] == [f"{host}/src/b.py"]
        hits = [(h.path, h.line) for h in await collect(fs.grep(vfs.GrepQuery("needle", path="")))]
        assert hits == [
            (f"{host}/a.txt", "needle a"),
            (f"{host}/src/b.py", "needle b"),
            (f"{host}/src/nested/c.py", "needle c"),
        ]
        assert await collect(fs.search(vfs.SearchQuery("needle", path=""))) == []

    run(backend, body)


def test_walks_do_not_follow_directory_symlinks(backend: str, cwd: Path) -> None:
    async def body() -> None:
        fs = vfs.local_file_system(cwd)
        host = str(cwd)
        everything = [(e.path, e.kind) for e in await collect(fs.glob("**/*"))]
        assert (f"{host}/memory", "symlink") in everything
        assert not [p for p, _ in everything if p.startswith(f"{host}/memory/")]
        hits = [h.path for h in await collect(fs.grep(vfs.GrepQuery("needle", path="")))]
        assert not [p for p in hits if "memory" in p or p.endswith("a-link")]
        # Naming the symlink itself follows it, as read/stat do.
        assert [e.path for e in await collect(fs.list("memory"))] == [f"{host}/memory/note.md"]
        assert await fs.read("memory/note.md") == "needle in memory\n"
        assert [h.path for h in await collect(fs.grep(vfs.GrepQuery("needle", path="memory")))] == [
            f"{host}/memory/note.md"
        ]

    run(backend, body)


def test_errors(backend: str, cwd: Path) -> None:
    async def body() -> None:
        fs = vfs.local_file_system(cwd)
        host = str(cwd)
        with pytest.raises(vfs.FileNotFoundError) as missing:
            await collect(fs.grep(vfs.GrepQuery("x", path="nope")))
        assert str(missing.value) == f"not found: {host}/nope"  # a missing host root raises
        with pytest.raises(vfs.FileNotFoundError) as missing:
            await fs.read("nope.txt")
        assert str(missing.value) == f"not found: {host}/nope.txt"
        with pytest.raises(vfs.FileNotFoundError):
            await fs.read("a.txt/x")
        with pytest.raises(vfs.FileNotFoundError) as missing:
            await fs.delete("nope.txt")
        assert str(missing.value) == f"not found: {host}/nope.txt"
        with pytest.raises(vfs.IsADirectoryError):
            await fs.read("src")
        with pytest.raises(vfs.DirectoryNotEmptyError) as full:
            await fs.delete("src")
        assert str(full.value) == f"directory not empty: {host}/src"
        with pytest.raises(vfs.InvalidGrepPatternError, match=r"^invalid grep pattern: \($"):
            await collect(fs.grep(vfs.GrepQuery("(", path="")))
        with pytest.raises(vfs.InvalidPathError, match="NUL byte"):
            await fs.read("a\0b")
        with pytest.raises(vfs.InvalidPathError, match="longer than 255 bytes"):
            await fs.stat("x" * 256)
        assert await collect(fs.list("nope")) == []
        assert await collect(fs.list("a.txt")) == []
        assert await collect(fs.glob("*", "nope")) == []

    run(backend, body)


def test_write_and_delete(backend: str, cwd: Path) -> None:
    async def body() -> None:
        fs = vfs.local_file_system(cwd)
        os.chmod(cwd / "a.txt", 0o600)
        await fs.write("a.txt", "replaced")
        assert (cwd / "a.txt").read_text() == "replaced"
        assert stat.S_IMODE(os.stat(cwd / "a.txt").st_mode) == 0o600
        await fs.write("new/deep/d.txt", b"bytes")
        assert (cwd / "new/deep/d.txt").read_bytes() == b"bytes"
        await fs.write(str(cwd.parent / "elsewhere.txt"), "absolute")
        assert (cwd.parent / "elsewhere.txt").read_text() == "absolute"
        await fs.write("a-link", "through the link")
        assert (cwd / "a-link").is_symlink()
        assert (cwd / "a.txt").read_text() == "through the link"
        await fs.delete("new/deep/d.txt")
        await fs.delete("new/deep")
        assert not (cwd / "new/deep").exists()
        await fs.delete("memory")  # a symlink goes, its target stays
        assert (cwd.parent / "memory-store/note.md").exists()
        with pytest.raises(vfs.IsADirectoryError):
            await fs.write("src", "x")
        with pytest.raises(vfs.NotADirectoryError):
            await fs.write("a.txt/x", "x")

    run(backend, body)


def test_walks_skip_a_guarded_mountpoint(backend: str, cwd: Path) -> None:
    async def body() -> None:
        fs = vfs.local_file_system(cwd)
        guard_mountpoint(str(cwd / "src" / "nested"))
        try:
            assert [e.path for e in await collect(fs.glob("**/*.py"))] == [f"{cwd}/src/b.py"]
            assert [e.path for e in await collect(fs.list("src"))] == [f"{cwd}/src/b.py"]
        finally:
            release_mountpoint(str(cwd / "src" / "nested"))
        assert len(await collect(fs.glob("**/*.py"))) == 2

    run(backend, body)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_an_omitted_grep_scope_is_the_cwd_as_for_list_and_glob(
    backend: str, tmp_path: Path
) -> None:
    """``GrepQuery(pattern)`` and ``SearchQuery(query)`` search the cwd, never the host root."""
    (tmp_path / "a.txt").write_text("needle\n")
    fs = vfs.local_file_system(tmp_path)

    async def main() -> None:
        assert vfs.GrepQuery("x").path == vfs.SearchQuery("x").path == ""  # (else: all of /)
        hits = [hit async for hit in fs.grep(vfs.GrepQuery("needle"))]
        assert hits == [vfs.GrepResult(f"{tmp_path}/a.txt", 1, "needle")]
        assert [entry.path async for entry in fs.list()] == [f"{tmp_path}/a.txt"]
        assert [entry.path async for entry in fs.glob("*")] == [f"{tmp_path}/a.txt"]
        assert [r async for r in fs.search(vfs.SearchQuery("needle"))] == []

    anyio.run(main, backend=backend)
