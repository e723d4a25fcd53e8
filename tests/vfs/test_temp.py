"""temp_fs: the contract verbs, symlinks, the POSIX extension, notifications and a model test.

Every async test body runs under asyncio and trio (the ``run`` fixture).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import vfs
from vfs._temp import TempFileSystem, _build_info, _Dir, _info, _Node, temp_fs
from vfs._walk import glob_tree, grep_tree

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


async def paths(source: AsyncIterable[vfs.DirEntry]) -> list[str]:
    return [entry.path async for entry in source]


async def fails(awaitable: Awaitable[Any], cls: type[vfs.PathError], message: str) -> vfs.PathError:
    with pytest.raises(cls) as caught:
        await awaitable
    assert str(caught.value) == message
    return caught.value


# -- construction and the protocols -------------------------------------------------------------


def test_implements_the_protocols() -> None:
    fs = temp_fs()
    assert isinstance(fs, vfs.FileSystem)
    assert isinstance(fs, vfs.PosixFileSystem)
    assert isinstance(fs, vfs.Watchable)
    assert vfs.temp_fs is temp_fs


def test_initial_files_create_parents_with_modes_and_owner(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/src/a.py": "print()\n", "b.png": b"\x89PNG", "/src/deep/c.txt": "c"})
        assert await paths(fs.list("/")) == ["/b.png", "/src"]
        assert await paths(fs.list("/src")) == ["/src/a.py", "/src/deep"]
        src = await fs.stat("/src")
        assert (src.kind, src.mode, src.uid, src.gid) == (
            "directory",
            0o755,
            os.getuid(),
            os.getgid(),
        )
        a = await fs.stat("/src/a.py")
        assert (a.kind, a.size, a.mode, a.nlink) == ("file", 8, 0o644, 1)
        assert await fs.read("/b.png") == b"\x89PNG"
        owned = temp_fs({"/x/y": "1"}, uid=1234, gid=5678)
        for path in ("/", "/x", "/x/y"):
            info = await owned.stat(path)
            assert (info.uid, info.gid) == (1234, 5678)

    run(body)


def test_initial_files_that_conflict_are_refused() -> None:
    with pytest.raises(vfs.NotADirectoryError) as caught:
        temp_fs({"/a": "file", "/a/b": "under a file"})
    assert str(caught.value) == "not a directory: /a/b"


# -- list / stat / read / write / delete / search ---------------------------------------------


def test_list_is_sorted_direct_children_and_empty_for_missing_or_files(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/a/x": "", "/a-x": "", "/a.b": "", "/B": "", "/é": "", "/a/y/z": ""})
        await fs.symlink("/link", "a")
        listed = await collect(fs.list(""))
        assert [(e.path, e.kind) for e in listed] == [
            ("/B", "file"),
            ("/a", "directory"),
            ("/a-x", "file"),
            ("/a.b", "file"),
            ("/link", "symlink"),
            ("/é", "file"),
        ]
        assert await paths(fs.list("/a/")) == ["/a/x", "/a/y"]
        assert await paths(fs.list("/link")) == ["/link/x", "/link/y"]  # a listed dir is followed
        assert await paths(fs.list("/missing")) == []
        assert await paths(fs.list("/a/x")) == []
        assert await paths(fs.list("/a/x/under-a-file")) == []

    run(body)


def test_list_of_a_big_directory_streams_every_entry(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({f"/d/{i:05}": "" for i in range(3000)})
        listed = await paths(fs.list("/d"))
        assert listed == [f"/d/{i:05}" for i in range(3000)]

    run(body)


def test_stat_kinds_and_missing(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/a.txt": "hello", "/d/e": ""})
        root = await fs.stat("/")
        assert root.kind == "directory"
        assert (await fs.stat("")).kind == "directory"
        assert (await fs.stat("/a.txt")).size == 5
        assert (await fs.stat("/d")).kind == "directory"
        assert await fs.stat("/nope") == vfs.FileInfo("missing")
        assert (await fs.stat("/a.txt/under")).kind == "missing"
        assert (await fs.stat("/nope/deeper")).kind == "missing"
        assert (await fs.lstat("/a.txt/under")).kind == "missing"

    run(body)


def test_fileinfo_fills_every_posix_field(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/d/a": "12345", "/d/sub/x": ""})
        await fs.mkdir("/d/sub2")
        await fs.symlink("/d/l", "a")
        for path in ("/", "/d", "/d/a", "/d/l"):
            info = await fs.lstat(path)
            for field in ("mode", "uid", "gid", "mtime_ns", "atime_ns", "ctime_ns", "nlink"):
                assert getattr(info, field) is not None, (path, field)
            assert info.mtime == info.mtime_ns / 1_000_000_000  # type: ignore[operator]
        d = await fs.stat("/d")
        assert (d.nlink, d.size) == (4, 20 * (4 + 2))  # tmpfs: 2 + subdirs; 20 per entry + 40
        assert (await fs.stat("/d/sub2")).size == 40
        assert (await fs.stat("/d/a")).size == 5
        link = await fs.lstat("/d/l")
        assert (link.kind, link.size, link.mode, link.nlink) == ("symlink", 1, 0o777, 1)
        assert (await fs.stat("/")).nlink == 3

    run(body)


def test_read_text_images_and_errors(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs(
            {"/a.txt": "héllo\n", "/p.PNG": b"\x89PNG\x00", "/bad.txt": b"\xff\xfe", "/d/x": ""}
        )
        assert await fs.read("/a.txt") == "héllo\n"
        assert await fs.read("/p.PNG") == b"\x89PNG\x00"
        assert await fs.read("/bad.txt") == "\ufffd\ufffd"
        error = await fails(fs.read("/nope.txt"), vfs.FileNotFoundError, "not found: /nope.txt")
        assert error.errno == errno.ENOENT
        await fails(fs.read("/a.txt/x"), vfs.FileNotFoundError, "not found: /a.txt/x")
        error = await fails(fs.read("/d"), vfs.IsADirectoryError, "is a directory: /d")
        assert error.errno == errno.EISDIR
        await fails(fs.read("/"), vfs.IsADirectoryError, "is a directory: /")

    run(body)


def test_write_creates_parents_and_overwrites(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs()
        await fs.write("a/b/c.txt", "one")
        assert await fs.read("/a/b/c.txt") == "one"
        assert (await fs.stat("/a/b")).mode == 0o755
        assert (await fs.stat("/a/b/c.txt")).mode == 0o644
        await fs.setattr("/a/b/c.txt", mode=0o600)
        await fs.write("/a/b/c.txt", b"two")
        info = await fs.stat("/a/b/c.txt")
        assert (info.size, info.mode) == (3, 0o600)  # overwrite keeps the inode and its mode
        assert await fs.read("/a/b/c.txt") == "two"
        await fs.write("/a/b/c.txt", "")
        assert await fs.read("/a/b/c.txt") == ""
        with pytest.raises(TypeError):
            await fs.write("/x", 12)  # type: ignore[arg-type]

    run(body)


def test_write_errors(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/d/x": "", "/f.txt": ""})
        await fails(fs.write("/d", "x"), vfs.IsADirectoryError, "is a directory: /d")
        await fails(fs.write("/", "x"), vfs.IsADirectoryError, "is a directory: /")
        error = await fails(
            fs.write("/f.txt/b/c", "x"), vfs.NotADirectoryError, "not a directory: /f.txt/b/c"
        )
        assert error.errno == errno.ENOTDIR
        small = temp_fs(max_file_size=4)
        await small.write("/ok", "1234")
        error = await fails(
            small.write("/big", "12345"), vfs.FileTooLargeError, "file too large: /big"
        )
        assert error.errno == errno.EFBIG
        assert (await small.stat("/big")).kind == "missing"
        with pytest.raises(vfs.InvalidPathError):
            await fs.write("/a\0b", "x")

    run(body)


def test_delete(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/f": "", "/d/x": "", "/e/.keep": ""})
        await fs.delete("/e/.keep")
        await fs.symlink("/l", "d")
        await fs.delete("/f")
        await fs.delete("/l")  # the link, not the directory it names
        assert (await fs.stat("/d/x")).kind == "file"
        await fs.delete("/e")  # empty directory
        await fails(fs.delete("/d"), vfs.DirectoryNotEmptyError, "directory not empty: /d")
        await fails(fs.delete("/f"), vfs.FileNotFoundError, "not found: /f")
        await fails(fs.delete("/d/x/y"), vfs.FileNotFoundError, "not found: /d/x/y")
        error = await fails(fs.delete("/"), vfs.PathError, "device or resource busy: /")
        assert error.errno == errno.EBUSY
        assert await paths(fs.glob("**")) == ["/d", "/d/x"]

    run(body)


def test_search_is_empty(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/a": "needle"})
        assert await collect(fs.search(vfs.SearchQuery("needle"))) == []
        with pytest.raises(vfs.InvalidPathError):
            await collect(fs.search(vfs.SearchQuery("x", path="/a\0")))

    run(body)


# -- glob and grep ----------------------------------------------------------------------------

TREE = {
    "/src/a.ts": "export const a = 1\n",
    "/src/b.py": "import os\nprint('TODO')\r\n",
    "/src/nested/c.ts": "// TODO: c\nconst c = 3\nTODO again",
    "/src/nested-x.ts": "todo lower\n",
    "/src/bin.dat": b"TODO\x00binary",
    "/src/img.png": b"TODO png",
    "/docs/readme.md": "# TODO\n\nnothing\n",
    "/top.ts": "TODO top",
}


def test_glob_matches_relative_to_dir_in_path_order(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs(TREE)
        assert await paths(fs.glob("*.ts", "/src")) == ["/src/a.ts", "/src/nested-x.ts"]
        assert await paths(fs.glob("**/*.ts")) == [
            "/src/a.ts",
            "/src/nested-x.ts",
            "/src/nested/c.ts",
            "/top.ts",
        ]
        assert await paths(fs.glob("src/nested/*")) == ["/src/nested/c.ts"]
        assert await paths(fs.glob("*")) == ["/docs", "/src", "/top.ts"]
        assert await paths(fs.glob("src/*", "/")) == [
            "/src/a.ts",
            "/src/b.py",
            "/src/bin.dat",
            "/src/img.png",
            "/src/nested",
            "/src/nested-x.ts",
        ]
        assert await paths(fs.glob("/src/{a,b}.*")) == ["/src/a.ts", "/src/b.py"]
        assert await paths(fs.glob("*.ts", "/missing")) == []
        assert await paths(fs.glob("x/*.ts", "/top.ts")) == []
        assert await paths(fs.glob("missing/*")) == []

    run(body)


def test_glob_reports_symlinks_and_does_not_descend(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/real/a.ts": ""})
        await fs.symlink("/link", "real")
        found = await collect(fs.glob("**"))
        assert [(e.path, e.kind) for e in found] == [
            ("/link", "symlink"),
            ("/real", "directory"),
            ("/real/a.ts", "file"),
        ]
        # A literal segment is walked like any other: the symlink is not descended (as for
        # "l*/*.ts"); the directory the glob starts from is followed.
        assert await paths(fs.glob("link/*.ts")) == []
        assert await paths(fs.glob("l*/*.ts")) == []
        assert await paths(fs.glob("*.ts", "/link")) == ["/link/a.ts"]

    run(body)


def test_grep_order_lines_and_filters(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs(TREE)
        hits = await collect(fs.grep(vfs.GrepQuery("TODO")))
        assert [(h.path, h.line_number, h.line) for h in hits] == [
            ("/docs/readme.md", 1, "# TODO"),
            ("/src/b.py", 2, "print('TODO')"),
            ("/src/nested/c.ts", 1, "// TODO: c"),
            ("/src/nested/c.ts", 3, "TODO again"),
            ("/top.ts", 1, "TODO top"),
        ]
        insensitive = await collect(
            fs.grep(vfs.GrepQuery("todo", path="/src", case_insensitive=True))
        )
        assert [h.path for h in insensitive] == [
            "/src/b.py",
            "/src/nested-x.ts",
            "/src/nested/c.ts",
            "/src/nested/c.ts",
        ]
        by_name = await collect(fs.grep(vfs.GrepQuery("TODO", glob="*.ts")))
        assert [h.path for h in by_name] == ["/src/nested/c.ts", "/src/nested/c.ts", "/top.ts"]
        by_path = await collect(fs.grep(vfs.GrepQuery("TODO", path="/src", glob="nested/*.ts")))
        assert [h.line_number for h in by_path] == [1, 3]
        single = await collect(fs.grep(vfs.GrepQuery("c", path="/src/nested/c.ts", glob="*.ts")))
        assert [h.line_number for h in single] == [1, 2]
        limited = await collect(fs.grep(vfs.GrepQuery("TODO", max_results=2)))
        assert [h.path for h in limited] == ["/docs/readme.md", "/src/b.py"]
        assert await collect(fs.grep(vfs.GrepQuery("TODO", max_results=0))) == []
        assert await collect(fs.grep(vfs.GrepQuery("TODO", path="/missing"))) == []

    run(body)


def test_grep_invalid_pattern(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs(TREE)
        error = await fails(
            collect(fs.grep(vfs.GrepQuery("("))),
            vfs.InvalidGrepPatternError,
            "invalid grep pattern: (",
        )
        assert error.errno == errno.EINVAL
        await fails(
            collect(fs.grep(vfs.GrepQuery("(", path="/missing"))),
            vfs.InvalidGrepPatternError,
            "invalid grep pattern: (",
        )

    run(body)


def test_grep_does_not_follow_symlinks_but_follows_its_root(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/real/a.txt": "needle"})
        await fs.symlink("/link", "real")
        await fs.symlink("/real/alias.txt", "a.txt")
        assert [h.path async for h in fs.grep(vfs.GrepQuery("needle"))] == ["/real/a.txt"]
        assert [h.path async for h in fs.grep(vfs.GrepQuery("needle", path="/link"))] == [
            "/link/a.txt"
        ]

    run(body)


def test_grep_stops_reading_after_max_results(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({f"/d{i % 10}/f{i:05}.txt": f"line {i}\nneedle {i}\n" for i in range(10_000)})
        hits = await collect(fs.grep(vfs.GrepQuery("needle", max_results=10)))
        assert len(hits) == 10
        assert fs._grep_files_read < 100
        # A consumer that stops early stops the walk too (the iteration is lazy).
        before = fs._grep_files_read
        iterator = fs.grep(vfs.GrepQuery("needle"))
        async for _ in iterator:
            break
        await iterator.aclose()  # type: ignore[attr-defined]
        assert fs._grep_files_read - before < 100

    run(body)


def test_long_walks_yield_to_the_event_loop(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({f"/d/{i:05}.txt": "nothing here" for i in range(5_000)})
        ticks = 0
        done = anyio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as group:
            group.start_soon(ticker)
            await anyio.lowlevel.checkpoint()
            start = ticks
            assert await collect(fs.grep(vfs.GrepQuery("needle"))) == []
            after_grep = ticks
            assert await collect(fs.glob("**/*.nomatch")) == []
            after_glob = ticks
            done.set()
        assert after_grep - start >= 5
        assert after_glob - after_grep >= 5

    run(body)


# Random trees: the native glob and grep agree with the generic walk over list/stat/read.
names = st.sampled_from(["a", "b", "a-x", "a.b", "c.ts", "B", "a b"])
tree_paths = st.lists(names, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))
texts = st.sampled_from(["", "needle\n", "x\nneedle\r\nneedle", "no", "\0needle", "Needle"])
patterns = st.sampled_from(["*", "**", "**/*.ts", "a/*", "a*", "*/b", "a/**/c.ts", "{a,b}/*", "B"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=st.dictionaries(tree_paths, texts, max_size=12),
    links=st.lists(st.tuples(tree_paths, st.sampled_from(["a", "/b", "../a", "x"])), max_size=3),
    pattern=patterns,
    where=st.sampled_from(["/", "/a", "/b", "/a/b", "/missing"]),
    grep_glob=st.sampled_from([None, "*.ts", "a/*", "a*"]),
    limit=st.sampled_from([None, 1, 2]),
)
def test_native_walks_agree_with_the_generic_walk(
    files: dict[str, str],
    links: list[tuple[str, str]],
    pattern: str,
    where: str,
    grep_glob: str | None,
    limit: int | None,
) -> None:
    async def body() -> None:
        fs = temp_fs()
        for path, text in files.items():
            with contextlib.suppress(vfs.NotADirectoryError, vfs.IsADirectoryError):
                await fs.write(path, text)
        for path, target in links:
            with contextlib.suppress(vfs.PathError):  # exists, missing parent, a loop...
                await fs.symlink(path, target)
        # The generic walks stat their root, and stat raises ELOOP for a loop; the native
        # walks treat an unresolvable root like a missing one.
        try:
            expected_entries = await collect(glob_tree(fs, pattern, where))
        except vfs.PathError as error:
            assert error.errno == errno.ELOOP
            expected_entries = []
        assert await collect(fs.glob(pattern, where)) == expected_entries
        query = vfs.GrepQuery("needle", path=where, glob=grep_glob, max_results=limit)
        try:
            expected = await collect(grep_tree(fs, query))
        except vfs.PathError as error:
            assert error.errno == errno.ELOOP
            expected = []
        assert await collect(fs.grep(query)) == expected
        whole = await paths(fs.glob("**"))
        assert whole == sorted(whole)
        assert len(whole) == len(set(whole))

    anyio.run(body, backend="asyncio")


# -- symlinks ---------------------------------------------------------------------------------


def test_symlinks_are_followed_where_posix_follows(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/dir/file.txt": "data", "/dir/sub/inner.txt": "inner"})
        await fs.symlink("/abs", "/dir/file.txt")
        await fs.symlink("/dir/rel", "file.txt")
        await fs.symlink("/dir/sub/up", "../file.txt")
        await fs.symlink("/dirlink", "dir")
        await fs.symlink("/dir/sub/self", ".")
        await fs.symlink("/chain", "abs")
        for path in (
            "/abs",
            "/dir/rel",
            "/dir/sub/up",
            "/dirlink/file.txt",
            "/dirlink/rel",
            "/dirlink/sub/self/self/up",
            "/chain",
        ):
            assert await fs.read(path) == "data", path
            assert (await fs.stat(path)).kind == "file", path
            assert (await fs.lstat(path)).kind in ("symlink", "file"), path
        assert (await fs.lstat("/abs")).kind == "symlink"
        assert (await fs.lstat("/dirlink/file.txt")).kind == "file"  # only the last is not followed
        assert (await fs.stat("/dirlink")).kind == "directory"
        assert await fs.readlink("/dir/sub/up") == "../file.txt"
        assert await fs.readlink("/dirlink/rel") == "file.txt"
        # ".." after a link to a directory goes up from the target, physically.
        await fs.symlink("/dir/sub/back", "/dirlink/sub")
        assert await fs.read("/dir/sub/back/inner.txt") == "inner"
        handle = await fs.open("/dir/rel")
        assert await handle.read(0, 100) == b"data"

    run(body)


def test_dangling_symlinks_and_loops(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/d/x": ""})
        await fs.symlink("/dangling", "missing/file")
        await fs.symlink("/loop", "loop")
        await fs.symlink("/ping", "pong")
        await fs.symlink("/pong", "ping")
        assert (await fs.stat("/dangling")).kind == "missing"
        assert (await fs.lstat("/dangling")).kind == "symlink"
        await fails(fs.read("/dangling"), vfs.FileNotFoundError, "not found: /dangling")
        for path in ("/loop", "/ping", "/ping/x"):
            with pytest.raises(vfs.PathError) as caught:
                await fs.stat(path)
            assert caught.value.errno == errno.ELOOP
            assert str(caught.value) == f"too many levels of symbolic links: {path}"
            with pytest.raises(vfs.PathError) as caught:
                await fs.read(path)
            assert caught.value.errno == errno.ELOOP
            with pytest.raises(vfs.PathError) as caught:
                await fs.open(path, create=True)
            assert caught.value.errno == errno.ELOOP
        assert (await fs.lstat("/loop")).kind == "symlink"
        assert await paths(fs.list("/loop")) == []
        assert await paths(fs.glob("*", "/loop")) == []
        assert await collect(fs.grep(vfs.GrepQuery("x", path="/loop"))) == []
        await fs.delete("/loop")

    run(body)


def test_forty_links_resolve_and_forty_one_do_not(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/target": "end"})
        previous = "target"
        for index in range(41):
            await fs.symlink(f"/l{index}", previous)
            previous = f"l{index}"
        assert await fs.read("/l39") == "end"  # 40 links followed
        with pytest.raises(vfs.PathError) as caught:
            await fs.read("/l40")
        assert caught.value.errno == errno.ELOOP

    run(body)


def test_creating_through_a_dangling_symlink_creates_its_target(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/d/.keep": ""})
        await fs.symlink("/l", "d/new.txt")
        await fs.write("/l", "via link")
        assert await fs.read("/d/new.txt") == "via link"
        await fs.symlink("/m", "d/other.txt")
        handle = await fs.open("/m", create=True)
        await handle.write(0, b"x")
        assert await fs.read("/d/other.txt") == "x"
        await fs.symlink("/n", "nodir/x")
        await fails(fs.write("/n", "x"), vfs.FileNotFoundError, "not found: /n")
        # mkdir -p does not create through a dangling link either.
        await fs.symlink("/p", "q")
        await fails(fs.write("/p/x.txt", "x"), vfs.FileNotFoundError, "not found: /p/x.txt")
        assert (await fs.stat("/q")).kind == "missing"
        # A link to a directory works as a parent.
        await fs.symlink("/dl", "d")
        await fs.write("/dl/sub/y.txt", "y")
        assert await fs.read("/d/sub/y.txt") == "y"

    run(body)


def test_symlink_and_readlink_errors(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/a.txt": "", "/d/x": ""})
        await fails(fs.symlink("/a.txt", "x"), vfs.FileExistsError, "already exists: /a.txt")
        await fails(fs.symlink("/new", ""), vfs.FileNotFoundError, "not found: /new")
        await fails(fs.symlink("/no/new", "x"), vfs.FileNotFoundError, "not found: /no/new")
        await fails(
            fs.symlink("/a.txt/new", "x"), vfs.NotADirectoryError, "not a directory: /a.txt/new"
        )
        error = await fails(fs.readlink("/a.txt"), vfs.PathError, "invalid argument: /a.txt")
        assert error.errno == errno.EINVAL
        await fails(fs.readlink("/d"), vfs.PathError, "invalid argument: /d")
        await fails(fs.readlink("/missing"), vfs.FileNotFoundError, "not found: /missing")
        await fs.symlink("/l", "a.txt", uid=7, gid=8)
        info = await fs.lstat("/l")
        assert (info.uid, info.gid) == (7, 8)
        await fs.unlink("/l")
        assert (await fs.stat("/a.txt")).kind == "file"

    run(body)


# -- open files ------------------------------------------------------------------------------


def test_open_flags_and_errors(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/a.txt": "hello", "/d/x": ""})
        handle = await fs.open("/new", create=True, mode=0o600, uid=11, gid=12)
        info = await fs.stat("/new")
        assert (info.kind, info.size, info.mode, info.uid, info.gid) == ("file", 0, 0o600, 11, 12)
        await handle.close()
        await fails(
            fs.open("/a.txt", create=True, exclusive=True),
            vfs.FileExistsError,
            "already exists: /a.txt",
        )
        await fs.symlink("/dangling", "nowhere")
        await fails(
            fs.open("/dangling", create=True, exclusive=True),
            vfs.FileExistsError,
            "already exists: /dangling",
        )
        await fails(fs.open("/missing"), vfs.FileNotFoundError, "not found: /missing")
        await fails(fs.open("/d"), vfs.IsADirectoryError, "is a directory: /d")
        await fails(fs.open("/d", create=True), vfs.IsADirectoryError, "is a directory: /d")
        await fails(fs.open("/"), vfs.IsADirectoryError, "is a directory: /")
        await fails(fs.open("/no/x", create=True), vfs.FileNotFoundError, "not found: /no/x")
        await fails(
            fs.open("/a.txt/x", create=True), vfs.NotADirectoryError, "not a directory: /a.txt/x"
        )
        kept = await fs.open("/a.txt", create=True)
        assert await kept.read(0, 100) == b"hello"
        emptied = await fs.open("/a.txt", truncate=True)
        assert await emptied.read(0, 100) == b""
        assert (await fs.stat("/a.txt")).size == 0

    run(body)


def test_open_file_byte_ranges(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/f": "0123456789"})
        handle = await fs.open("/f")
        assert await handle.read(2, 3) == b"234"
        assert await handle.read(8, 100) == b"89"
        assert await handle.read(10, 5) == b""
        assert await handle.read(100, 5) == b""
        assert await handle.write(3, b"abc") == 3
        assert await fs.read("/f") == "012abc6789"
        assert await handle.write(12, b"XY") == 2  # past the end: the gap reads as zeros
        assert await handle.read(0, 100) == b"012abc6789\0\0XY"
        assert (await fs.stat("/f")).size == 14
        await handle.write(14, memoryview(b"!"))  # appends exactly at the end
        await handle.truncate(4)
        assert await handle.read(0, 100) == b"012a"
        await handle.truncate(6)
        assert await handle.read(0, 100) == b"012a\0\0"
        await handle.flush()
        await handle.fsync()
        await handle.fsync(datasync=True)
        await handle.close()
        with pytest.raises(vfs.PathError) as caught:
            await handle.read(-1, 1)
        assert caught.value.errno == errno.EINVAL
        with pytest.raises(vfs.PathError) as caught:
            await handle.write(-1, b"x")
        assert caught.value.errno == errno.EINVAL

    run(body)


def test_open_files_survive_unlink_and_rename_over(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/a": "old a", "/b": "new b"})
        handle = await fs.open("/a")
        await fs.rename("/b", "/a")
        assert await handle.read(0, 100) == b"old a"
        await handle.write(0, b"OLD")
        assert await handle.read(0, 100) == b"OLD a"
        assert await fs.read("/a") == "new b"
        other = await fs.open("/a")
        await fs.unlink("/a")
        await other.write(5, b"!")
        assert await other.read(0, 100) == b"new b!"
        assert (await fs.stat("/a")).kind == "missing"
        moved = await fs.open("/c", create=True)
        await fs.rename("/c", "/d")
        await moved.write(0, b"follows the node")
        assert await fs.read("/d") == "follows the node"
        # write() on the path overwrites the same node, so an open handle sees it.
        await fs.write("/d", "replaced")
        assert await moved.read(0, 100) == b"replaced"

    run(body)


def test_writes_update_times(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/f": "x"})
        await fs.setattr("/f", atime_ns=1, mtime_ns=2)
        handle = await fs.open("/f")
        await handle.write(0, b"y")
        info = await fs.stat("/f")
        assert info.mtime_ns is not None and info.mtime_ns > 2
        assert info.ctime_ns == info.mtime_ns
        assert info.atime_ns == 1
        await handle.read(0, 1)  # relatime: an atime older than mtime moves on read
        assert (await fs.stat("/f")).atime_ns >= info.mtime_ns  # type: ignore[operator]
        await fs.setattr("/f", atime_ns=10**19)
        await fs.read("/f")
        assert (await fs.stat("/f")).atime_ns == 10**19  # newer than mtime: left alone

    run(body)


def test_sizes_beyond_the_limit_are_refused(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/f": "abc"}, max_file_size=1000)
        handle = await fs.open("/f")
        error = await fails(handle.truncate(1001), vfs.FileTooLargeError, "file too large: /f")
        assert error.errno == errno.EFBIG
        await fails(handle.write(999, b"xy"), vfs.FileTooLargeError, "file too large: /f")
        await fails(fs.setattr("/f", size=5000), vfs.FileTooLargeError, "file too large: /f")
        assert await fs.read("/f") == "abc"  # nothing changed
        await handle.truncate(1000)
        assert (await fs.stat("/f")).size == 1000
        with pytest.raises(vfs.PathError) as caught:
            await fs.setattr("/f", size=-1)
        assert caught.value.errno == errno.EINVAL
        # The default limit is 1 TiB. A size past the bytes stored is a hole: it costs nothing
        # (as on tmpfs), and reads as zeros.
        big = temp_fs({"/f": ""})
        with pytest.raises(vfs.FileTooLargeError):
            await big.setattr("/f", size=(1 << 40) + 1)
        huge = temp_fs({"/f": ""}, max_file_size=1 << 62)
        await huge.setattr("/f", size=1 << 60)
        assert (await huge.stat("/f")).size == 1 << 60
        sparse = await huge.open("/f", write=True)
        assert await sparse.read(1 << 59, 8) == bytes(8)
        await sparse.write(0x14FFFFFFF, b" ")  # one byte far out: one page stored
        assert await sparse.read(0x14FFFFFFE, 2) == b"\0 "

    run(body)


# -- directories ------------------------------------------------------------------------------


def test_mkdir_and_rmdir(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/f": ""})
        await fs.mkdir("/d", 0o700, uid=5, gid=6)
        info = await fs.stat("/d")
        assert (info.kind, info.mode, info.uid, info.gid, info.nlink) == (
            "directory",
            0o700,
            5,
            6,
            2,
        )
        assert (await fs.stat("/")).nlink == 3
        await fails(fs.mkdir("/d"), vfs.FileExistsError, "already exists: /d")
        await fails(fs.mkdir("/f"), vfs.FileExistsError, "already exists: /f")
        await fails(fs.mkdir("/"), vfs.FileExistsError, "already exists: /")
        await fails(fs.mkdir("/x/y"), vfs.FileNotFoundError, "not found: /x/y")
        await fails(fs.mkdir("/f/y"), vfs.NotADirectoryError, "not a directory: /f/y")
        await fs.symlink("/dangling", "nowhere")
        await fails(fs.mkdir("/dangling"), vfs.FileExistsError, "already exists: /dangling")
        await fs.mkdir("/d/e")
        assert (await fs.stat("/d")).nlink == 3
        await fails(fs.rmdir("/d"), vfs.DirectoryNotEmptyError, "directory not empty: /d")
        await fails(fs.rmdir("/f"), vfs.NotADirectoryError, "not a directory: /f")
        await fails(fs.rmdir("/nope"), vfs.FileNotFoundError, "not found: /nope")
        await fs.symlink("/dl", "d")
        await fails(fs.rmdir("/dl"), vfs.NotADirectoryError, "not a directory: /dl")
        error = await fails(fs.rmdir("/"), vfs.PathError, "device or resource busy: /")
        assert error.errno == errno.EBUSY
        await fs.rmdir("/d/e")
        assert (await fs.stat("/d")).nlink == 2
        await fs.rmdir("/d")
        assert (await fs.stat("/")).nlink == 2

    run(body)


def test_unlink(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/f": "", "/d/x": ""})
        await fails(fs.unlink("/d"), vfs.IsADirectoryError, "is a directory: /d")
        await fails(fs.unlink("/"), vfs.IsADirectoryError, "is a directory: /")
        await fails(fs.unlink("/nope"), vfs.FileNotFoundError, "not found: /nope")
        await fails(fs.unlink("/f/x"), vfs.NotADirectoryError, "not a directory: /f/x")
        await fs.unlink("/f")
        assert (await fs.stat("/f")).kind == "missing"

    run(body)


def test_directory_times_change_with_entries(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/d/a": ""})

        async def reset() -> None:
            await fs.setattr("/d", mtime_ns=1)
            await fs.setattr("/e", mtime_ns=1)

        async def moved() -> tuple[bool, bool]:
            d, e = await fs.stat("/d"), await fs.stat("/e")
            return d.mtime_ns != 1, e.mtime_ns != 1

        await fs.mkdir("/e")
        for change in (
            lambda: fs.write("/d/b", "new"),
            lambda: fs.mkdir("/d/c"),
            lambda: fs.rmdir("/d/c"),
            lambda: fs.unlink("/d/b"),
            lambda: fs.symlink("/d/l", "a"),
            lambda: fs.delete("/d/l"),
        ):
            await reset()
            await change()
            assert await moved() == (True, False)
        await reset()
        await fs.rename("/d/a", "/e/a")
        assert await moved() == (True, True)
        await reset()
        await fs.write("/e/a", "content only")
        assert await moved() == (False, False)
        info = await fs.stat("/d")
        assert info.ctime_ns is not None and info.ctime_ns > 1

    run(body)


# -- rename -----------------------------------------------------------------------------------


def test_rename_replaces_like_linux(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/f1": "one", "/f2": "two", "/d1/x": "x", "/full/y": "y", "/d3/z": "z"})
        await fs.mkdir("/empty")
        await fs.rename("/f1", "/f2")  # file over file
        assert await fs.read("/f2") == "one"
        assert (await fs.stat("/f1")).kind == "missing"
        await fs.rename("/d1", "/empty")  # directory over an empty directory
        assert await fs.read("/empty/x") == "x"
        await fails(
            fs.rename("/empty", "/full"), vfs.DirectoryNotEmptyError, "directory not empty: /full"
        )
        await fails(fs.rename("/f2", "/full"), vfs.IsADirectoryError, "is a directory: /full")
        await fails(fs.rename("/full", "/f2"), vfs.NotADirectoryError, "not a directory: /f2")
        error = await fails(
            fs.rename("/full", "/full/y/deeper"),
            vfs.NotADirectoryError,
            "not a directory: /full/y/deeper",
        )
        assert error.errno == errno.ENOTDIR
        error = await fails(fs.rename("/d3", "/d3/inside"), vfs.PathError, "invalid argument: /d3")
        assert error.errno == errno.EINVAL
        await fs.mkdir("/d3/sub")
        await fails(fs.rename("/d3", "/d3/sub/inside"), vfs.PathError, "invalid argument: /d3")
        await fails(
            fs.rename("/d3/sub", "/d3"), vfs.DirectoryNotEmptyError, "directory not empty: /d3"
        )
        await fails(fs.rename("/nope", "/x"), vfs.FileNotFoundError, "not found: /nope")
        await fails(fs.rename("/nope", "/no/x"), vfs.FileNotFoundError, "not found: /no/x")
        await fails(fs.rename("/f2", "/no/x"), vfs.FileNotFoundError, "not found: /no/x")
        await fails(fs.rename("/", "/x"), vfs.PathError, "device or resource busy: /")
        await fails(fs.rename("/f2", "/"), vfs.PathError, "device or resource busy: /")
        before = await fs.stat("/f2")
        await fs.rename("/f2", "/f2")  # same entry: nothing happens
        assert await fs.stat("/f2") == before
        await fs.rename("/full", "//full/")
        assert await paths(fs.glob("**")) == [
            "/d3",
            "/d3/sub",
            "/d3/z",
            "/empty",
            "/empty/x",
            "/f2",
            "/full",
            "/full/y",
        ]

    run(body)


def test_rename_moves_subtrees_and_counts_links(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/a/b/c/d.txt": "deep", "/z/.keep": ""})
        await fs.rename("/a/b", "/z/b")
        assert await fs.read("/z/b/c/d.txt") == "deep"
        assert (await fs.stat("/a")).nlink == 2
        assert (await fs.stat("/z")).nlink == 3
        await fs.symlink("/z/link", "b")
        await fs.rename("/z/link", "/a/link")  # a symlink moves as itself
        assert await fs.readlink("/a/link") == "b"
        assert (await fs.stat("/a/link")).kind == "missing"  # relative target, new directory
        await fs.rename("/z/b", "/a/b")
        assert (await fs.stat("/a/link")).kind == "directory"
        # Renaming through a symlinked parent renames in the real directory.
        await fs.symlink("/alias", "a")
        await fs.rename("/alias/b/c/d.txt", "/alias/e.txt")
        assert await fs.read("/a/e.txt") == "deep"

    run(body)


def test_rename_updates_times(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/s/f": "", "/t/.keep": ""})
        for path in ("/s", "/t", "/s/f"):
            await fs.setattr(path, mtime_ns=1)
        ctime = (await fs.stat("/s/f")).ctime_ns
        await fs.rename("/s/f", "/t/f")
        moved = await fs.stat("/t/f")
        assert moved.mtime_ns == 1  # the moved file's data did not change
        assert moved.ctime_ns is not None and ctime is not None and moved.ctime_ns >= ctime
        assert (await fs.stat("/s")).mtime_ns != 1
        assert (await fs.stat("/t")).mtime_ns != 1

    run(body)


def test_rename_noreplace_and_exchange(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/a": "A", "/d/x": "X", "/e/y": "Y"})
        await fails(
            fs.rename("/a", "/d/x", noreplace=True), vfs.FileExistsError, "already exists: /d/x"
        )
        await fails(
            fs.rename("/a", "/a", noreplace=True), vfs.FileExistsError, "already exists: /a"
        )
        await fs.rename("/a", "/b", noreplace=True)
        assert await fs.read("/b") == "A"
        await fs.rename("/b", "/d/x", exchange=True)
        assert (await fs.read("/b"), await fs.read("/d/x")) == ("X", "A")
        await fs.rename("/d", "/e", exchange=True)  # two non-empty directories swap
        assert (await fs.read("/e/x"), await fs.read("/d/y")) == ("A", "Y")
        await fs.rename("/b", "/d", exchange=True)  # a file and a directory swap
        assert await fs.read("/d") == "X"
        assert await fs.read("/b/y") == "Y"
        assert (await fs.stat("/")).nlink == 4  # /b and /e are the directories now
        await fails(
            fs.rename("/b", "/missing", exchange=True), vfs.FileNotFoundError, "not found: /missing"
        )
        await fails(
            fs.rename("/missing", "/b", exchange=True), vfs.FileNotFoundError, "not found: /missing"
        )
        await fails(fs.rename("/b", "/b/y", exchange=True), vfs.PathError, "invalid argument: /b")
        await fails(fs.rename("/b/y", "/b", exchange=True), vfs.PathError, "invalid argument: /b")
        error = await fails(
            fs.rename("/b", "/e", noreplace=True, exchange=True),
            vfs.PathError,
            "invalid argument: /b",
        )
        assert error.errno == errno.EINVAL
        await fs.rename("/d", "/d", exchange=True)
        assert await fs.read("/d") == "X"

    run(body)


# -- setattr ----------------------------------------------------------------------------------


def test_setattr(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/f": "hello", "/d/x": ""})
        await fs.symlink("/l", "f")
        info = await fs.setattr("/f", mode=0o4751, uid=3, gid=4, atime_ns=5, mtime_ns=6)
        assert (info.mode, info.uid, info.gid, info.atime_ns, info.mtime_ns) == (0o4751, 3, 4, 5, 6)
        assert info.ctime_ns is not None and info.ctime_ns > 6
        assert info == await fs.lstat("/f")
        assert (await fs.setattr("/f", mode=0o100644)).mode == 0o644  # permission bits only
        info = await fs.setattr("/f", size=2)
        assert (info.size, await fs.read("/f")) == (2, "he")
        assert info.mtime_ns != 6
        info = await fs.setattr("/f", size=4, mtime_ns=7)
        assert (info.size, info.mtime_ns, await fs.read("/f")) == (4, 7, "he\0\0")
        link = await fs.setattr("/l", uid=9)  # not followed
        assert (link.kind, link.uid) == ("symlink", 9)
        assert (await fs.stat("/f")).uid == 3
        await fails(fs.setattr("/d", size=0), vfs.IsADirectoryError, "is a directory: /d")
        await fails(fs.setattr("/l", size=0), vfs.PathError, "invalid argument: /l")
        await fails(fs.setattr("/nope", mode=0o600), vfs.FileNotFoundError, "not found: /nope")
        await fails(fs.setattr("/f/x", mode=0o600), vfs.NotADirectoryError, "not a directory: /f/x")
        assert (await fs.setattr("/", mode=0o700)).mode == 0o700
        assert (await fs.setattr("/d")).kind == "directory"  # nothing given: only ctime

    run(body)


# -- change notifications ---------------------------------------------------------------------


def test_every_mutation_is_reported_after_it_is_made(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/keep": ""})
        seen: list[tuple[str, str]] = []
        exists_when_told: list[bool] = []

        def callback(change: vfs.Change) -> None:
            seen.append((change.path, change.kind))

        fs.watch(callback)

        async def expect(*changes: tuple[str, str]) -> None:
            assert seen == list(changes)
            seen.clear()

        await fs.write("/a/b/c.txt", "x")
        await expect(("/a", "entry"), ("/a/b", "entry"), ("/a/b/c.txt", "entry"))
        await fs.write("/a/b/c.txt", "y")
        await expect(("/a/b/c.txt", "content"))
        handle = await fs.open("/a/b/c.txt")
        await handle.write(0, b"z")
        await expect(("/a/b/c.txt", "content"))
        await handle.truncate(0)
        await expect(("/a/b/c.txt", "content"))
        await handle.read(0, 10)
        await expect()
        await fs.open("/a/b/c.txt", truncate=True)
        await expect(("/a/b/c.txt", "content"))
        await fs.open("/a/new", create=True)
        await expect(("/a/new", "entry"))
        await fs.open("/a/new", create=True)
        await expect()
        await fs.setattr("/a/new", size=3)
        await expect(("/a/new", "content"))
        await fs.setattr("/a/new", mode=0o600)
        await expect(("/a/new", "metadata"))
        await fs.setattr("/a/new", size=1, mtime_ns=5)
        await expect(("/a/new", "content"), ("/a/new", "metadata"))
        await fs.mkdir("/m")
        await expect(("/m", "entry"))
        await fs.symlink("/m/l", "../a")
        await expect(("/m/l", "entry"))
        await fs.write("/m/l/b/c.txt", "through a link")  # reported at the real path
        await expect(("/a/b/c.txt", "content"))
        await fs.rename("/a/b", "/m/b")
        await expect(("/a/b", "entry"), ("/m/b", "entry"))
        await handle.write(0, b"moved")  # the handle's file is now /m/b/c.txt
        await expect(("/m/b/c.txt", "content"))
        await fs.rename("/m/b", "/keep", exchange=True)
        await expect(("/m/b", "entry"), ("/keep", "entry"))
        await fs.unlink("/m/l")
        await expect(("/m/l", "entry"))
        await fs.delete("/a/new")
        await expect(("/a/new", "entry"))
        await fs.rmdir("/a")
        await expect(("/a", "entry"))
        await fs.unlink("/keep/c.txt")
        await expect(("/keep/c.txt", "entry"))
        await handle.write(0, b"unlinked: nobody can see this name")
        await expect()
        # Failed operations report nothing.
        with pytest.raises(vfs.FileExistsError):
            await fs.mkdir("/m")
        await expect()
        assert exists_when_told == []

    run(body)


def test_callbacks_see_the_change_and_are_awaited(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs()
        log: list[str] = []

        def callback(change: vfs.Change) -> Awaitable[None]:
            async def later() -> None:
                await anyio.lowlevel.checkpoint()
                log.append(f"{change.path} {(await fs.stat(change.path)).kind}")

            return later()

        unsubscribe = fs.watch(callback)
        await fs.write("/x", "1")
        assert log == ["/x file"]  # the change was made before, and awaited within, write()
        await fs.delete("/x")
        assert log == ["/x file", "/x missing"]
        unsubscribe()
        await fs.write("/y", "1")
        assert len(log) == 2

    run(body)


def test_changes_carry_the_origin(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs()
        origins: list[object | None] = []
        fs.watch(lambda change: origins.append(change.origin))
        token = vfs.change_origin.set("mount")
        try:
            await fs.write("/a", "1")
        finally:
            vfs.change_origin.reset(token)
        await fs.write("/b", "1")
        assert origins == ["mount", None]

    run(body)


# -- a model test -----------------------------------------------------------------------------

model_names = st.sampled_from(["a", "b", "a-x"])
model_paths = st.lists(model_names, min_size=1, max_size=3).map(lambda p: "/" + "/".join(p))
model_data = st.binary(max_size=8)


def assert_fresh_infos(fs: TempFileSystem) -> None:
    """Every FileInfo a node caches equals one built now (no change forgot to clear it).

    Then every node caches one, so whatever changes next must clear the right ones.
    """
    pending: list[_Node] = [fs._root]
    while pending:
        node = pending.pop()
        assert node.info is None or node.info == _build_info(node), node.name
        _info(node)
        if isinstance(node, _Dir):
            pending.extend(node.children.values())


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _ancestors(path: str) -> list[str]:
    """Strict ancestors of ``path`` below the root, outermost first."""
    parts = path[1:].split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


class TempFsModel(RuleBasedStateMachine):
    """temp_fs against a dict of files and a set of directories."""

    def __init__(self) -> None:
        super().__init__()
        self.fs: TempFileSystem = temp_fs()
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = {"/"}

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> tuple[Any, Any]:
        """Run one call to completion without an event loop.

        On trees this small temp_fs never suspends (it only yields to the loop every few
        hundred entries), so a coroutine finishes on its first step; the unit tests above run
        the same calls under trio and asyncio. An unexpected suspension fails loudly.
        """

        async def body() -> T:
            return await fn(*args)

        coroutine = body()
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value, None
        except vfs.PathError as error:
            return None, type(error)
        coroutine.close()
        raise AssertionError("temp_fs suspended on a tiny tree")

    def kind(self, path: str) -> str:
        if path in self.files:
            return "file"
        return "directory" if path in self.dirs else "missing"

    def walk_error(self, path: str) -> type[vfs.PathError] | None:
        """What resolving the parents of ``path`` raises, as POSIX resolution does."""
        for ancestor in _ancestors(path):
            kind = self.kind(ancestor)
            if kind == "missing":
                return vfs.FileNotFoundError
            if kind == "file":
                return vfs.NotADirectoryError
        return None

    def under(self, path: str) -> list[str]:
        prefix = path + "/"
        return [p for p in (*self.files, *self.dirs) if p.startswith(prefix)]

    @rule(path=model_paths, data=model_data)
    def write(self, path: str, data: bytes) -> None:
        _, error = self.call(self.fs.write, path, data)
        if self.kind(path) == "directory":
            assert error is vfs.IsADirectoryError
        elif any(self.kind(a) == "file" for a in _ancestors(path)):
            assert error is vfs.NotADirectoryError
        else:
            assert error is None
            self.dirs.update(_ancestors(path))
            self.files[path] = data

    @rule(path=model_paths)
    def read(self, path: str) -> None:
        result, error = self.call(self.fs.read, path)
        kind = self.kind(path)
        if kind == "file":
            assert result == self.files[path].decode("utf-8", "replace")
        else:
            expected = vfs.IsADirectoryError if kind == "directory" else vfs.FileNotFoundError
            assert error is expected

    @rule(path=model_paths)
    def delete(self, path: str) -> None:
        _, error = self.call(self.fs.delete, path)
        kind = self.kind(path)
        if kind == "missing":
            assert error is vfs.FileNotFoundError
        elif kind == "directory" and self.under(path):
            assert error is vfs.DirectoryNotEmptyError
        else:
            assert error is None
            self.files.pop(path, None)
            self.dirs.discard(path)

    @rule(path=model_paths)
    def mkdir(self, path: str) -> None:
        _, error = self.call(self.fs.mkdir, path)
        expected = self.walk_error(path)
        if expected is None and self.kind(path) != "missing":
            expected = vfs.FileExistsError
        assert error is expected
        if expected is None:
            self.dirs.add(path)

    @rule(src=model_paths, dst=model_paths)
    def rename(self, src: str, dst: str) -> None:
        _, error = self.call(self.fs.rename, src, dst)
        expected = self.walk_error(src) or self.walk_error(dst)
        kind, victim = self.kind(src), self.kind(dst)
        if expected is None and kind == "missing":
            expected = vfs.FileNotFoundError
        if expected is None and src != dst:
            if kind == "directory" and dst.startswith(src + "/"):
                expected = vfs.PathError  # EINVAL
            elif victim == "directory" and src.startswith(dst + "/"):
                expected = vfs.DirectoryNotEmptyError
            elif kind == "directory" and victim == "file":
                expected = vfs.NotADirectoryError
            elif kind == "file" and victim == "directory":
                expected = vfs.IsADirectoryError
            elif victim == "directory" and self.under(dst):
                expected = vfs.DirectoryNotEmptyError
        assert error is expected, (src, dst, error, expected)
        if expected is not None or src == dst:
            return
        self.files.pop(dst, None)
        self.dirs.discard(dst)
        moved = [src, *self.under(src)]
        for old in moved:
            new = dst + old[len(src) :]
            if old in self.files:
                self.files[new] = self.files.pop(old)
            else:
                self.dirs.discard(old)
                self.dirs.add(new)

    @rule(path=st.sampled_from(["/", "/a", "/b", "/a/a", "/a/b", "/a-x"]))
    def list(self, path: str) -> None:
        listed, _ = self.call(collect, self.fs.list(path))
        expected = sorted(p for p in (*self.files, *self.dirs) if p != "/" and _parent(p) == path)
        if self.kind(path) != "directory":
            expected = []
        assert [(e.path, e.kind) for e in listed] == [(p, self.kind(p)) for p in expected]

    @rule(path=model_paths)
    def stat(self, path: str) -> None:
        info, _ = self.call(self.fs.stat, path)
        assert info.kind == self.kind(path)
        if info.kind == "file":
            assert info.size == len(self.files[path])
        if info.kind == "directory":
            subdirs = [d for d in self.dirs if d != "/" and _parent(d) == path]
            assert info.nlink == 2 + len(subdirs)

    @invariant()
    def cached_infos_are_fresh(self) -> None:
        assert_fresh_infos(self.fs)

    @invariant()
    def whole_tree_matches(self) -> None:
        found, _ = self.call(collect, self.fs.glob("**"))
        expected = sorted(p for p in (*self.files, *self.dirs) if p != "/")
        assert [(e.path, e.kind) for e in found] == [(p, self.kind(p)) for p in expected]
        root, _ = self.call(self.fs.stat, "/")
        assert root.nlink == 2 + len([d for d in self.dirs if d.count("/") == 1 and d != "/"])


TempFsModel.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_temp_fs_model = TempFsModel.TestCase


def test_a_listing_by_name_answers_each_node_s_own_info(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs({"/d/a.txt": "a", "/d/b.txt": "bb"})
        await fs.mkdir("/d/sub")
        stale = vfs.FileInfo("file", size=99)
        by_name = await fs.list_info_reusing("/d", {"a.txt": stale})
        plain = await fs.list_info("/d")
        assert by_name == [(entry.path.rpartition("/")[2], info) for entry, info in plain]
        assert by_name[0][1] is not stale  # what the tree holds, whatever the caller knew
        assert await fs.list_info_reusing("/d/a.txt", {}) == []  # a file lists as empty

    run(body)


def test_an_open_file_says_what_its_file_is_now(run: Runner) -> None:
    async def body() -> None:
        fs = temp_fs()
        file = await fs.open("/f", write=True, create=True)
        await file.write(0, b"hello")
        await fs.rename("/f", "/g")
        assert isinstance(file, vfs.StatsOpenFile)
        assert await file.stat() == await fs.lstat("/g")
        assert (await file.stat()).size == 5

    run(body)
