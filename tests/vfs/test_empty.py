"""empty_fs: no files, a root directory, read-only everywhere; under asyncio and trio."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import pytest

import vfs
from vfs._empty import EmptyFileSystem, empty_fs

T = TypeVar("T")
Body = Callable[[], Awaitable[None]]
Runner = Callable[[Body], None]


@pytest.fixture(params=["asyncio", "trio"])
def run(request: pytest.FixtureRequest) -> Runner:
    backend = request.param

    def runner(body: Body) -> None:
        anyio.run(body, backend=backend)

    return runner


async def collect(source: AsyncIterable[T]) -> list[T]:
    return [item async for item in source]


async def fails(awaitable: Awaitable[Any], cls: type[vfs.PathError], message: str) -> vfs.PathError:
    with pytest.raises(cls) as caught:
        await awaitable
    assert str(caught.value) == message
    return caught.value


def test_implements_the_protocols() -> None:
    fs = empty_fs()
    assert isinstance(fs, EmptyFileSystem)
    assert isinstance(fs, vfs.FileSystem)
    assert isinstance(fs, vfs.PosixFileSystem)
    assert isinstance(fs, vfs.Watchable)
    assert vfs.empty_fs is empty_fs
    assert repr(fs) == "empty_fs()"


def test_walk_verbs_are_empty(run: Runner) -> None:
    async def body() -> None:
        fs = empty_fs()
        for where in ("", "/", "/a", "/a/b"):
            assert await collect(fs.list(where)) == []
            assert await collect(fs.glob("**", where)) == []
            assert await collect(fs.grep(vfs.GrepQuery("x", path=where))) == []
            assert await collect(fs.search(vfs.SearchQuery("x", path=where))) == []

    run(body)


def test_stat_has_only_the_root(run: Runner) -> None:
    async def body() -> None:
        fs = empty_fs()
        for stat in (fs.stat, fs.lstat):
            root = await stat("/")
            assert root.kind == "directory"
            assert (root.mode, root.nlink, root.size) == (0o755, 2, 40)
            assert None not in (root.uid, root.gid, root.mtime_ns, root.atime_ns, root.ctime_ns)
            assert (await stat("")).kind == "directory"
            assert await stat("/a.txt") == vfs.FileInfo("missing")
            assert (await stat("/a/../b")).kind == "missing"

    run(body)


def test_reads_miss(run: Runner) -> None:
    async def body() -> None:
        fs = empty_fs()
        error = await fails(fs.read("/a.txt"), vfs.FileNotFoundError, "not found: /a.txt")
        assert error.errno == errno.ENOENT
        await fails(fs.read("x/../y.txt"), vfs.FileNotFoundError, "not found: /y.txt")
        await fails(fs.read("/"), vfs.IsADirectoryError, "is a directory: /")
        await fails(fs.open("/a"), vfs.FileNotFoundError, "not found: /a")
        await fails(fs.open("/"), vfs.IsADirectoryError, "is a directory: /")
        await fails(fs.readlink("/a"), vfs.FileNotFoundError, "not found: /a")
        error = await fails(fs.readlink("/"), vfs.PathError, "invalid argument: /")
        assert error.errno == errno.EINVAL

    run(body)


def test_every_change_is_read_only(run: Runner) -> None:
    async def body() -> None:
        fs = empty_fs()
        seen: list[vfs.Change] = []
        unsubscribe = fs.watch(seen.append)
        attempts: list[tuple[Awaitable[Any], str]] = [
            (fs.write("/a.txt", "x"), "/a.txt"),
            (fs.write("a/../b.txt", b"x"), "/b.txt"),
            (fs.delete("/"), "/"),
            (fs.open("/new", create=True), "/new"),
            (fs.open("/new", create=True, exclusive=True, truncate=True), "/new"),
            (fs.mkdir("/d"), "/d"),
            (fs.rmdir("/d"), "/d"),
            (fs.unlink("/f"), "/f"),
            (fs.rename("/a", "/b"), "/a"),
            (fs.rename("/a", "/b", exchange=True), "/a"),
            (fs.setattr("/", mode=0o700), "/"),
            (fs.setattr("/f", size=0), "/f"),
            (fs.symlink("/l", "target"), "/l"),
        ]
        for attempt, path in attempts:
            error = await fails(attempt, vfs.ReadOnlyMountError, f"read-only mount: {path}")
            assert error.errno == errno.EROFS
        # Deleting what is not there has nothing to refuse: missing, as on every tree.
        await fails(fs.delete("/a.txt"), vfs.FileNotFoundError, "not found: /a.txt")
        assert seen == []
        unsubscribe()
        unsubscribe()  # idempotent

    run(body)


def test_paths_and_patterns_are_still_validated(run: Runner) -> None:
    async def body() -> None:
        fs = empty_fs()
        for attempt in (
            fs.stat("/a\0"),
            fs.read("/a\0"),
            fs.write("/a\0", "x"),
            fs.delete("/" + "x" * 256),
            fs.rename("/a", "/b\0"),
            collect(fs.list("/a\0")),
            collect(fs.glob("*", "/a\0")),
            collect(fs.search(vfs.SearchQuery("x", path="/a\0"))),
        ):
            with pytest.raises(vfs.InvalidPathError):
                await attempt
        await fails(
            collect(fs.grep(vfs.GrepQuery("("))),
            vfs.InvalidGrepPatternError,
            "invalid grep pattern: (",
        )
        await fails(
            collect(fs.grep(vfs.GrepQuery("[", path="/missing"))),
            vfs.InvalidGrepPatternError,
            "invalid grep pattern: [",
        )

    run(body)
