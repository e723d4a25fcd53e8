"""posix_view: the POSIX extension over a tree that has only the eight verbs."""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable

import pytest

import vfs
from vfs._posix_view import PosixView

from .eightverb import BACKENDS, EightVerbTree, collect, exactly, paths, run

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


class WatchableTree(EightVerbTree):
    """An eight-verb tree that reports its own writes and deletes."""

    def __init__(self, files: dict[str, str | bytes] | None = None) -> None:
        super().__init__(files)
        self.observers = vfs._watch.Observers()

    def watch(self, callback: vfs._types.ChangeCallback) -> Callable[[], None]:
        return self.observers.subscribe(callback)

    async def write(self, path: str, contents: str | bytes) -> None:
        await super().write(path, contents)
        await self.observers.emit(vfs.normalize_path(path), "content")

    async def delete(self, path: str) -> None:
        await super().delete(path)
        await self.observers.emit(vfs.normalize_path(path), "entry")


def view_of(files: dict[str, str | bytes] | None = None) -> tuple[EightVerbTree, PosixView]:
    tree = EightVerbTree(files)
    view = vfs.posix_view(tree)
    assert isinstance(view, PosixView)
    return tree, view


def test_posix_trees_are_returned_unchanged(backend: str) -> None:
    tree = vfs.temp_fs()
    assert vfs.posix_view(tree) is tree
    view = vfs.posix_view(EightVerbTree())
    assert isinstance(view, vfs.PosixFileSystem)
    assert isinstance(view, vfs.Watchable)
    assert not isinstance(EightVerbTree(), vfs.PosixFileSystem)


def test_the_eight_verbs_delegate(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/a/b.txt": "hello\nworld\n", "/c.py": "hello"})
        assert await paths(view.list("/")) == ["/a", "/c.py"]
        assert (await view.stat("/a")).kind == "directory"
        assert (await view.stat("/a/b.txt")).size == 12
        assert await paths(view.glob("**/*.txt")) == ["/a/b.txt"]
        assert await view.read("/c.py") == "hello"
        hits = await collect(view.grep(vfs.GrepQuery("world")))
        assert hits == [vfs.GrepResult("/a/b.txt", 2, "world")]
        results = await collect(view.search(vfs.SearchQuery("hello")))
        assert [r.path for r in results] == ["/a/b.txt", "/c.py"]  # type: ignore[attr-defined]
        await view.write("/d/e.txt", "new")
        assert tree.files["/d/e.txt"] == b"new"
        await view.delete("/d/e.txt")
        assert "/d/e.txt" not in tree.files
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /nope")):
            await view.read("/nope")
        assert (await view.stat("/")).kind == "directory"
        assert (await view.lstat("/c.py")).kind == "file"

    run(backend, main)


def test_mkdir_then_touch(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of()
        await view.mkdir("/d")
        info = await view.stat("/d")
        assert (info.kind, info.mode) == ("directory", 0o755)
        assert await collect(view.list("/")) == [vfs.DirEntry("/d", "directory")]
        await view.mkdir("/d/e")
        assert await paths(view.list("/d")) == ["/d/e"]
        assert await paths(view.glob("**")) == ["/d", "/d/e"]
        handle = await view.open("/d/e/f.txt", create=True)
        assert tree.files == {"/d/e/f.txt": b""}  # created at once, so it exists for stat
        assert (await view.stat("/d/e/f.txt")).kind == "file"
        await handle.close()
        assert view._dirs == {}  # the tree derives both directories now
        assert await paths(view.list("/d")) == ["/d/e"]

    run(backend, main)


def test_mkdir_errors(backend: str) -> None:
    async def main() -> None:
        _, view = view_of({"/f.txt": "x"})
        await view.mkdir("/d")
        with pytest.raises(vfs.FileExistsError, match=exactly("already exists: /d")):
            await view.mkdir("/d")
        with pytest.raises(vfs.FileExistsError, match=exactly("already exists: /f.txt")):
            await view.mkdir("/f.txt")
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /x/y")):
            await view.mkdir("/x/y")
        with pytest.raises(vfs.NotADirectoryError, match=exactly("not a directory: /f.txt/y")):
            await view.mkdir("/f.txt/y")
        with pytest.raises(vfs.FileExistsError):
            await view.mkdir("/")

    run(backend, main)


def test_rmdir(backend: str) -> None:
    async def main() -> None:
        _, view = view_of({"/full/f.txt": "x", "/g.txt": "y"})
        with pytest.raises(vfs.DirectoryNotEmptyError, match=exactly("directory not empty: /full")):
            await view.rmdir("/full")
        with pytest.raises(vfs.NotADirectoryError, match=exactly("not a directory: /g.txt")):
            await view.rmdir("/g.txt")
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /none")):
            await view.rmdir("/none")
        await view.mkdir("/d")
        await view.mkdir("/d/e")
        with pytest.raises(vfs.DirectoryNotEmptyError, match=exactly("directory not empty: /d")):
            await view.rmdir("/d")
        await view.rmdir("/d/e")
        assert (await view.stat("/d")).kind == "directory"
        await view.rmdir("/d")
        assert (await view.stat("/d")).kind == "missing"
        with pytest.raises(vfs.PathError) as caught:
            await view.rmdir("/")
        assert caught.value.errno == errno.EBUSY

    run(backend, main)


def test_unlink_keeps_the_directory_as_posix_does(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/d/e/f.txt": "x"})
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /d")):
            await view.unlink("/d")
        await view.unlink("/d/e/f.txt")
        assert tree.files == {}
        assert (await view.stat("/d/e")).kind == "directory"
        assert await paths(view.list("/")) == ["/d"]
        await view.rmdir("/d/e")  # `rm -r d` unlinks the files, then removes the directories
        await view.rmdir("/d")
        assert await paths(view.list("/")) == []
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /d/e/f.txt")):
            await view.unlink("/d/e/f.txt")

    run(backend, main)


def test_buffered_write_back_on_flush(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/a.txt": "hello world"})
        handle = await view.open("/a.txt")
        assert await handle.read(0, 5) == b"hello"
        assert await handle.write(6, b"there") == 5
        assert tree.files["/a.txt"] == b"hello world"  # buffered, not yet written back
        assert await handle.read(0, 100) == b"hello there"
        await handle.flush()
        assert tree.files["/a.txt"] == b"hello there"
        assert tree.written == [("/a.txt", str)]
        await handle.fsync()
        await handle.close()
        assert tree.written == [("/a.txt", str)]  # clean: no second write

    run(backend, main)


def test_write_back_type(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of()
        for path, data, kind in [
            ("/t.txt", b"caf\xc3\xa9", str),
            ("/b.bin", b"\xff\xfe", bytes),
            ("/i.png", b"\x89PNG", bytes),
        ]:
            handle = await view.open(path, create=True)
            await handle.write(0, data)
            await handle.close()
            assert tree.files[path] == data
            assert tree.written[-1] == (path, kind)

    run(backend, main)


def test_gap_write_truncate_and_extend(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/a": "abc"})
        handle = await view.open("/a")
        await handle.write(5, b"z")
        assert await handle.read(0, 10) == b"abc\0\0z"
        await handle.truncate(2)
        await handle.close()
        assert tree.files["/a"] == b"ab"
        info = await view.setattr("/a", size=4, mode=0o600, mtime_ns=5)
        assert tree.files["/a"] == b"ab\0\0"
        assert (info.kind, info.size) == ("file", 4)
        assert (await view.setattr("/a", mode=0o600)).size == 4  # accepted and ignored
        await view.setattr("/a", size=1)
        assert tree.files["/a"] == b"a"
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /b")):
            await view.setattr("/b", size=0)
        await view.mkdir("/d")
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /d")):
            await view.setattr("/d", size=0)

    run(backend, main)


def test_write_back_error_reaches_flush_and_close(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/a.txt": "x"})
        handle = await view.open("/a.txt")
        await handle.write(0, b"y")
        tree.write_failure = vfs.WriteFailedError("/a.txt")
        with pytest.raises(vfs.WriteFailedError, match=exactly("write failed: /a.txt")):
            await handle.flush()
        with pytest.raises(vfs.WriteFailedError, match=exactly("write failed: /a.txt")):
            await handle.close()
        assert tree.files["/a.txt"] == b"x"
        await handle.close()  # a second close is a no-op
        with pytest.raises(vfs.PathError) as caught:
            await handle.read(0, 1)
        assert caught.value.errno == errno.EBADF

    run(backend, main)


def test_open_flags(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/a.txt": "abc", "/d/f": "x"})
        with pytest.raises(vfs.FileExistsError, match=exactly("already exists: /a.txt")):
            await view.open("/a.txt", create=True, exclusive=True)
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /b.txt")):
            await view.open("/b.txt")
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /d")):
            await view.open("/d")
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /x/y.txt")):
            await view.open("/x/y.txt", create=True)
        with pytest.raises(vfs.NotADirectoryError, match=exactly("not a directory: /a.txt/y")):
            await view.open("/a.txt/y", create=True)
        handle = await view.open("/a.txt", create=True)  # not exclusive: opens the file
        assert await handle.read(0, 10) == b"abc"
        await handle.close()
        handle = await view.open("/a.txt", truncate=True)
        assert tree.files["/a.txt"] == b""  # truncated at once
        await handle.close()
        handle = await view.open("/new.txt", create=True, exclusive=True)
        assert (await view.stat("/new.txt")).kind == "file"
        await handle.close()

    run(backend, main)


def test_handles_share_one_buffer(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/a": "0123456789"})
        first = await view.open("/a")
        second = await view.open("/a")
        await first.write(0, b"AB")
        assert await second.read(0, 4) == b"AB23"
        await view.setattr("/a", size=3)  # ftruncate through another path
        assert await first.read(0, 10) == b"AB2"
        assert tree.files["/a"] == b"AB2"
        await second.write(3, b"!")
        await first.close()
        assert tree.files["/a"] == b"AB2!"
        await second.close()
        assert view._buffers == {}

    run(backend, main)


def test_unlinked_open_file_is_not_resurrected(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/a": "x"})
        handle = await view.open("/a")
        await view.unlink("/a")
        await handle.write(0, b"still mine")
        assert await handle.read(0, 100) == b"still mine"
        await handle.close()
        assert tree.files == {}

    run(backend, main)


def test_rename_file(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/a.txt": "A", "/b.txt": "B", "/d/x": "x"})
        with pytest.raises(vfs.FileExistsError, match=exactly("already exists: /b.txt")):
            await view.rename("/a.txt", "/b.txt", noreplace=True)
        with pytest.raises(vfs.NotSupportedError, match=exactly("operation not supported: /a.txt")):
            await view.rename("/a.txt", "/b.txt", exchange=True)
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /d")):
            await view.rename("/a.txt", "/d")
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /zz")):
            await view.rename("/zz", "/yy")
        handle = await view.open("/a.txt")
        await view.rename("/a.txt", "/b.txt")
        assert tree.files == {"/b.txt": b"A", "/d/x": b"x"}
        await handle.write(1, b"+")  # the handle follows the file
        await handle.close()
        assert tree.files["/b.txt"] == b"A+"
        await view.rename("/b.txt", "/b.txt")
        assert tree.files["/b.txt"] == b"A+"

    run(backend, main)


def test_rename_directory(backend: str) -> None:
    async def main() -> None:
        tree, view = view_of({"/src/a": "1", "/src/n/b": "2", "/full/x": "3", "/f": "4"})
        await view.mkdir("/src/empty")
        with pytest.raises(vfs.PathError) as caught:
            await view.rename("/src", "/src/n/inside")
        assert (caught.value.errno, str(caught.value)) == (
            errno.EINVAL,
            "invalid argument: /src/n/inside",
        )
        with pytest.raises(vfs.DirectoryNotEmptyError, match=exactly("directory not empty: /full")):
            await view.rename("/src", "/full")
        with pytest.raises(vfs.NotADirectoryError, match=exactly("not a directory: /f")):
            await view.rename("/src", "/f")
        await view.mkdir("/dst")  # an empty directory is replaced
        await view.rename("/src", "/dst")
        assert sorted(tree.files) == ["/dst/a", "/dst/n/b", "/f", "/full/x"]
        assert await paths(view.list("/dst")) == ["/dst/a", "/dst/empty", "/dst/n"]
        assert (await view.stat("/src")).kind == "missing"

    run(backend, main)


def test_links_are_not_supported(backend: str) -> None:
    async def main() -> None:
        _, view = view_of({"/f": "x"})
        with pytest.raises(vfs.NotSupportedError) as caught:
            await view.symlink("/l", "/f")
        assert caught.value.errno == errno.EOPNOTSUPP
        with pytest.raises(vfs.PathError) as not_link:
            await view.readlink("/f")
        assert (not_link.value.errno, str(not_link.value)) == (errno.EINVAL, "invalid argument: /f")
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /g")):
            await view.readlink("/g")

    run(backend, main)


def test_view_reports_changes_of_an_unwatchable_tree(backend: str) -> None:
    async def main() -> None:
        _, view = view_of({"/a": "x"})
        seen: list[tuple[str, str]] = []
        pending: list[str] = []

        async def later() -> None:
            pending.append("awaited")

        def callback(change: vfs.Change) -> Awaitable[None]:
            seen.append((change.path, change.kind))
            return later()

        unsubscribe = view.watch(callback)
        await view.write("/b", "y")
        await view.mkdir("/d")
        handle = await view.open("/d/f", create=True)
        await handle.write(0, b"z")
        await handle.close()
        await view.unlink("/a")
        await view.rename("/b", "/c")
        assert seen == [
            ("/b", "entry"),
            ("/d", "entry"),
            ("/d/f", "entry"),
            ("/d/f", "content"),
            ("/a", "entry"),
            ("/b", "entry"),
            ("/c", "entry"),
        ]
        assert len(pending) == len(seen)
        unsubscribe()
        await view.delete("/c")
        assert len(seen) == 7

    run(backend, main)


def test_view_forwards_a_watchable_tree(backend: str) -> None:
    async def main() -> None:
        tree = WatchableTree({"/a": "x"})
        view = vfs.posix_view(tree)
        seen: list[tuple[str, str]] = []
        view.watch(lambda change: seen.append((change.path, change.kind)))
        await view.write("/a", "y")  # reported once, by the tree
        await view.mkdir("/d")  # the tree cannot know: the view reports it
        await tree.write("/z", "direct")
        assert seen == [("/a", "content"), ("/d", "entry"), ("/z", "content")]

    run(backend, main)


def test_pending_directory_reads_and_writes(backend: str) -> None:
    async def main() -> None:
        _, view = view_of()
        await view.mkdir("/d")
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /d")):
            await view.read("/d")
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /d")):
            await view.write("/d", "x")
        await view.delete("/d")  # delete removes an empty directory, as temp_fs does
        assert (await view.stat("/d")).kind == "missing"

    run(backend, main)
