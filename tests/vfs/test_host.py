"""``host_fs`` over ``InMemoryHostFiles``: derived directories, walks, compare-and-swap writes."""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any

import anyio
import pytest

import vfs

BACKENDS = ["trio", "asyncio"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


async def collect(iterator: Any) -> list[Any]:
    async with aclosing(iterator) as items:
        return [item async for item in items]


SEED: dict[str, str | bytes] = {
    "/a.txt": "needle a\n",
    "/src/b.py": "needle b\nneedle again\n",
    "/src/n/c.py": "needle c\n",
    "/src-x": "needle x\n",
    "/img.png": b"\x89PNG needle",
}


def test_api_preconditions(backend: str) -> None:
    async def body() -> None:
        files = vfs.InMemoryHostFiles({"/a": "one"}, scope="s")
        assert isinstance(files, vfs.HostFilesApi)
        first = await files.read("s", "/a")
        assert first == vfs.HostFile(b"one", first.etag)
        error = await _raises(vfs.WriteFailedError, files.write("s", "/a", b"x", if_match='"0"'))
        assert str(error) == "write failed: /a"
        error = await _raises(
            vfs.WriteFailedError, files.write("s", "/a", b"x", if_none_match=True)
        )
        assert (str(error), error.errno) == ("write failed: /a", errno.EEXIST)
        second = await files.write("s", "/a", b"two", if_match=first.etag)
        assert second != first.etag
        await _raises(vfs.WriteFailedError, files.write("s", "/new", b"x", if_match=first.etag))
        await files.write("s", "/new", b"x", if_none_match=True)
        await _raises(vfs.WriteFailedError, files.delete("s", "/a", if_match=first.etag))
        await files.delete("s", "/a", if_match=second)
        await _raises(vfs.FileNotFoundError, files.read("s", "/a"))
        assert await files.stat("s", "/a") is None
        assert await files.stat("other", "/new") is None  # scopes are separate
        assert await files.list("other", "/") == []
        await _raises(vfs.NotADirectoryError, files.write("s", "/new/below", b"x"))
        await files.write("s", "/d/e", b"x")
        await _raises(vfs.IsADirectoryError, files.write("s", "/d", b"x"))
        await _raises(vfs.IsADirectoryError, files.read("s", "/d"))
        await _raises(vfs.DirectoryNotEmptyError, files.delete("s", "/d"))
        entry = await files.stat("s", "/d/e")
        assert entry is not None and (entry.name, entry.kind, entry.size) == ("e", "file", 1)
        assert await files.stat("s", "/d") == vfs.HostEntry("d", "directory")
        assert [e.name for e in await files.list("s", "/")] == ["d", "new"]

    run(backend, body)


def test_verbs_over_derived_directories(backend: str) -> None:
    async def body() -> None:
        fs = vfs.host_fs(vfs.InMemoryHostFiles(SEED, scope="team"), "team")
        assert isinstance(fs, vfs.FileSystem) and isinstance(fs, vfs.Watchable)
        assert [(e.path, e.kind) for e in await collect(fs.list("/"))] == [
            ("/a.txt", "file"),
            ("/img.png", "file"),
            ("/src", "directory"),
            ("/src-x", "file"),
        ]
        assert await collect(fs.list("/a.txt")) == []
        assert await collect(fs.list("/missing")) == []
        assert (await fs.stat("/")).kind == "directory"
        assert (await fs.stat("/src/n")).kind == "directory"
        info = await fs.stat("/src/b.py")
        assert (info.kind, info.size) == ("file", 22) and info.mtime_ns
        assert (await fs.stat("/nope")).kind == "missing"
        assert await fs.read("/src/b.py") == "needle b\nneedle again\n"
        assert await fs.read("/img.png") == b"\x89PNG needle"
        error = await _raises(vfs.FileNotFoundError, fs.read("/nope"))
        assert str(error) == "not found: /nope"
        error = await _raises(vfs.FileNotFoundError, fs.delete("/nope"))
        assert str(error) == "not found: /nope"
        globbed = [e.path for e in await collect(fs.glob("**/*"))]
        assert globbed == [
            "/a.txt",
            "/img.png",
            "/src",
            "/src-x",
            "/src/b.py",
            "/src/n",
            "/src/n/c.py",
        ]
        assert [e.path for e in await collect(fs.glob("*.py", "/src"))] == ["/src/b.py"]
        assert [e.path for e in await collect(fs.glob("src/*.py"))] == ["/src/b.py"]
        hits = [(h.path, h.line_number) for h in await collect(fs.grep(vfs.GrepQuery("needle")))]
        assert hits == [
            ("/a.txt", 1),
            ("/src-x", 1),
            ("/src/b.py", 1),
            ("/src/b.py", 2),
            ("/src/n/c.py", 1),
        ]
        capped = await collect(fs.grep(vfs.GrepQuery("needle", max_results=3)))
        assert [(h.path, h.line_number) for h in capped] == hits[:3]
        assert [
            h.path for h in await collect(fs.grep(vfs.GrepQuery("c", glob="*.py", path="/src")))
        ] == ["/src/n/c.py"]
        with pytest.raises(vfs.InvalidGrepPatternError, match=r"^invalid grep pattern: \($"):
            await collect(fs.grep(vfs.GrepQuery("(")))
        assert await collect(fs.search(vfs.SearchQuery("needle"))) == []
        for make in (lambda: fs.glob("**/*"), lambda: fs.grep(vfs.GrepQuery("needle"))):
            async with aclosing(make()) as items:
                async for _ in items:
                    break
        await fs.write("/new/deep/d.txt", "made")
        assert (await fs.stat("/new/deep")).kind == "directory"
        await _raises(vfs.IsADirectoryError, fs.write("/src", "x"))
        await _raises(vfs.DirectoryNotEmptyError, fs.delete("/src"))
        await fs.delete("/new/deep/d.txt")
        assert (await fs.stat("/new")).kind == "missing"  # no file beneath: no directory

    run(backend, body)


def test_write_is_compare_and_swap_after_read(backend: str) -> None:
    async def body() -> None:
        files = vfs.InMemoryHostFiles({"/a": "v1"}, scope="s")
        fs = vfs.host_fs(files, "s")
        # No cached etag: unconditional, even over another writer's change.
        await files.write("s", "/a", b"other")
        await fs.write("/a", "mine")
        assert (await files.read("s", "/a")).content == b"mine"
        # Our own write cached the etag: another writer in between makes the next write fail.
        await files.write("s", "/a", b"theirs")
        error = await _raises(vfs.WriteFailedError, fs.write("/a", "lost"))
        assert str(error) == "write failed: /a"
        assert (await files.read("s", "/a")).content == b"theirs"  # never a silent overwrite
        await _raises(vfs.WriteFailedError, fs.write("/a", "still lost"))  # until we read
        assert await fs.read("/a") == "theirs"
        await fs.write("/a", "merged")
        assert (await files.read("s", "/a")).content == b"merged"
        # The same after a read.
        assert await fs.read("/a") == "merged"
        await files.write("s", "/a", b"raced")
        await _raises(vfs.WriteFailedError, fs.write("/a", "x"))
        # delete is compare-and-swap too.
        await _raises(vfs.WriteFailedError, fs.delete("/a"))
        assert await fs.read("/a") == "raced"
        await fs.delete("/a")
        await fs.write("/a", "fresh")  # gone and forgotten: unconditional again
        # A file deleted behind our back: the read that finds it gone drops the etag.
        await files.delete("s", "/a")
        await _raises(vfs.FileNotFoundError, fs.read("/a"))
        await fs.write("/a", "recreated")

    run(backend, body)


def test_etag_cache_is_per_instance(backend: str) -> None:
    async def body() -> None:
        files = vfs.InMemoryHostFiles({"/a": "v1"}, scope="s")
        first = vfs.host_fs(files, "s")
        second = vfs.host_fs(files, "s")
        assert await first.read("/a") == "v1"
        await second.write("/a", "second")  # second never read: unconditional
        error = await _raises(vfs.WriteFailedError, first.write("/a", "first"))
        assert str(error) == "write failed: /a"
        assert await second.read("/a") == "second"
        await second.write("/a", "again")  # second's own etag is current

    run(backend, body)


def test_watch_reports_changes(backend: str) -> None:
    async def body() -> None:
        fs = vfs.host_fs(vfs.InMemoryHostFiles({"/a": "1"}, scope="s"), "s")
        seen: list[tuple[str, str]] = []
        unsubscribe = fs.watch(lambda change: seen.append((change.path, change.kind)))
        await fs.read("/a")
        await fs.write("/a", "2")
        await fs.write("/b", "new")
        await fs.delete("/a")
        unsubscribe()
        await fs.write("/c", "quiet")
        assert seen == [("/a", "content"), ("/b", "entry"), ("/a", "entry")]

    run(backend, body)


async def _raises(cls: type[BaseException], awaitable: Awaitable[Any]) -> Any:
    with pytest.raises(cls) as info:
        await awaitable
    return info.value
