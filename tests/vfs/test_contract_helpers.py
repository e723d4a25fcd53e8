"""The contract's Helpers section, rule by rule, where a rule is about one composition.

The shared rules run over every composition in ``test_conformance.py``; what is left are the
rules that only make sense for one helper: union mount resolution, shadowing, fan-out and error
re-prefixing; overlay precedence and failure isolation; host_fs compare-and-swap; the host-default
``local_file_system`` (relative vs absolute paths, directory symlinks not followed); and dir_fs
confinement. Every test runs under trio and asyncio.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import anyio
import pytest

import vfs

from .conformance import SEED, collect, model_grep, raises
from .dict_tree import DictTree

pytestmark = pytest.mark.parametrize("backend", ["trio", "asyncio"])


def run(backend: str, body: Callable[[], Awaitable[None]]) -> None:
    anyio.run(body, backend=backend)


async def paths(method: Callable[..., AsyncIterator[Any]], *args: Any) -> list[str]:
    return [item.path for item in await collect(method, *args)]


# --------------------------------------------------------------------------------------------
# union_fs


def test_union_longest_prefix_by_segment(backend: str) -> None:
    async def body() -> None:
        agent = vfs.temp_fs({"/a.txt": "in agent"})
        root = vfs.temp_fs({"/agent-tools/t.txt": "tools", "/agent/a.txt": "shadowed"})
        fs = vfs.union_fs({"/agent": agent, "/": root})
        assert await fs.read("/agent/a.txt") == "in agent"
        assert await fs.read("/agent-tools/t.txt") == "tools"
        assert await paths(fs.list, "/") == ["/agent", "/agent-tools"]
        assert await paths(fs.list, "/agent") == ["/agent/a.txt"]

    run(backend, body)


def test_union_strips_and_reprefixes(backend: str) -> None:
    async def body() -> None:
        child = DictTree()
        fs = vfs.union_fs({"/repo/src": child})
        await fs.write("/repo/src/x.ts", "TODO x\n")
        assert set(child.files) == {"/x.ts"}
        assert await paths(fs.list, "/repo/src") == ["/repo/src/x.ts"]
        assert await paths(fs.glob, "*.ts", "/repo/src") == ["/repo/src/x.ts"]
        assert await paths(fs.grep, vfs.GrepQuery("TODO")) == ["/repo/src/x.ts"]
        assert (await fs.stat("/repo")).kind == "directory"
        assert await paths(fs.list, "/") == ["/repo"]

    run(backend, body)


def test_union_deeper_mount_shadows_list_glob_and_read(backend: str) -> None:
    """The ``/tmp`` scratch of ``{"/": authored, "/tmp": temp_fs()}`` hides the authored /tmp."""

    async def body() -> None:
        authored = vfs.temp_fs({"/tmp/old.txt": "authored TODO", "/keep.txt": "TODO keep"})
        fs = vfs.union_fs({"/": authored, "/tmp": vfs.temp_fs({"/new.txt": "scratch TODO"})})
        assert await paths(fs.list, "/tmp") == ["/tmp/new.txt"]
        assert await paths(fs.glob, "**/*.txt") == ["/keep.txt", "/tmp/new.txt"]
        error = await raises(vfs.FileNotFoundError, fs.read, "/tmp/old.txt")
        assert str(error) == "not found: /tmp/old.txt"
        assert (await fs.stat("/tmp/old.txt")).kind == "missing"
        hits = await paths(fs.grep, vfs.GrepQuery("TODO"))
        assert hits == ["/keep.txt", "/tmp/new.txt"]

    run(backend, body)


def test_union_grep_fans_out_and_keeps_every_hit(backend: str) -> None:
    async def body() -> None:
        files = {"/a.txt": "TODO one\nTODO two\n"}
        fs = vfs.union_fs({"/": vfs.temp_fs(files), "/m": vfs.temp_fs(files)})
        hits = await collect(fs.grep, vfs.GrepQuery("TODO"))
        assert [(h.path, h.line_number) for h in hits] == [
            ("/a.txt", 1),
            ("/a.txt", 2),
            ("/m/a.txt", 1),
            ("/m/a.txt", 2),
        ]
        capped = await collect(fs.grep, vfs.GrepQuery("TODO", max_results=3))
        assert capped == hits[:3]
        scoped = await collect(fs.grep, vfs.GrepQuery("TODO", path="/m", max_results=1))
        assert [(h.path, h.line_number) for h in scoped] == [("/m/a.txt", 1)]

    run(backend, body)


class IndexedTree(DictTree):
    """A user tree with an index: ``search`` scores files by occurrences of the query."""

    async def search(self, query: vfs.SearchQuery) -> AsyncIterator[vfs.SearchResult]:
        root = vfs.normalize_path(query.path)
        found = []
        for path, data in self.files.items():
            if vfs.is_under(path, root) and (score := data.decode().count(query.query)):
                found.append(vfs.SearchResult(path, float(score), query.query))
        found.sort(key=lambda r: (-r.score, r.path))
        for result in found[: query.max_results]:
            yield result


def test_union_search_fans_out_sorted_by_score_then_path(backend: str) -> None:
    async def body() -> None:
        left = IndexedTree({"/a.md": "x x", "/b.md": "x"})
        right = IndexedTree({"/a.md": "x x x", "/c.md": "x"})
        fs = vfs.union_fs({"/": left, "/r": right})
        results = await collect(fs.search, vfs.SearchQuery("x"))
        assert [(r.path, r.score) for r in results] == [
            ("/r/a.md", 3.0),
            ("/a.md", 2.0),
            ("/b.md", 1.0),
            ("/r/c.md", 1.0),
        ]
        capped = await collect(fs.search, vfs.SearchQuery("x", max_results=2))
        assert capped == results[:2]
        scoped = await collect(fs.search, vfs.SearchQuery("x", path="/r"))
        assert [r.path for r in scoped] == ["/r/a.md", "/r/c.md"]

    run(backend, body)


def test_union_no_mount(backend: str) -> None:
    """No mount: ``NoMountError`` for read/write/delete; walk verbs empty or missing."""

    async def body() -> None:
        fs = vfs.union_fs({"/a": vfs.temp_fs({"/x.txt": "x"})})
        for call, args in [(fs.read, ()), (fs.write, ("data",)), (fs.delete, ())]:
            error = await raises(vfs.NoMountError, call, "/b.txt", *args)
            assert str(error) == "no mount for path: /b.txt"
            assert isinstance(error, builtins.FileNotFoundError)
        assert await collect(fs.list, "/b") == []
        assert (await fs.stat("/b.txt")).kind == "missing"
        assert await collect(fs.glob, "*", "/b") == []
        assert await collect(fs.grep, vfs.GrepQuery("x", path="/b")) == []
        assert await paths(fs.list, "/") == ["/a"]

    run(backend, body)


class FailingTree(DictTree):
    """Every verb fails with the error ``make_error(path)`` builds (a downed store)."""

    def __init__(self, make_error: Callable[[str], BaseException]) -> None:
        super().__init__()
        self.make_error = make_error

    def fail(self, path: str) -> NoReturn:
        raise self.make_error(vfs.normalize_path(path))

    async def list(self, prefix: str = "/") -> AsyncIterator[vfs.DirEntry]:
        self.fail(prefix)
        yield  # pragma: no cover

    async def stat(self, path: str) -> vfs.FileInfo:
        self.fail(path)

    async def read(self, path: str) -> str | bytes:
        self.fail(path)

    async def write(self, path: str, contents: str | bytes) -> None:
        self.fail(path)

    async def delete(self, path: str) -> None:
        self.fail(path)

    async def grep(self, query: vfs.GrepQuery) -> AsyncIterator[vfs.GrepResult]:
        self.fail(query.path)
        yield  # pragma: no cover

    async def search(self, query: vfs.SearchQuery) -> AsyncIterator[vfs.SearchResult]:
        self.fail(query.path)
        yield  # pragma: no cover


def test_union_reprefixes_child_errors(backend: str) -> None:
    async def body() -> None:
        fs = vfs.union_fs({"/m": vfs.temp_fs(), "/ro": vfs.empty_fs()})
        error = await raises(vfs.FileNotFoundError, fs.read, "/m/x.txt")
        assert (str(error), error.path) == ("not found: /m/x.txt", "/m/x.txt")
        error = await raises(vfs.ReadOnlyMountError, fs.write, "/ro/a.txt", "x")
        assert (str(error), error.path) == ("read-only mount: /ro/a.txt", "/ro/a.txt")
        error = await raises(vfs.InvalidGrepPatternError, collect, fs.grep, vfs.GrepQuery("("))
        assert str(error) == "invalid grep pattern: ("
        # Raised lazily inside an iterator, still re-prefixed.
        failing = vfs.union_fs({"/f": FailingTree(vfs.WriteFailedError)})
        error = await raises(vfs.WriteFailedError, collect, failing.list, "/f/d")
        assert (str(error), error.path) == ("write failed: /f/d", "/f/d")
        # An untyped OSError gets a best-effort rewrite of its filename.
        untyped = vfs.union_fs(
            {"/u": FailingTree(lambda p: builtins.OSError(errno.EIO, "store down", p))}
        )
        plain = await raises(builtins.OSError, untyped.read, "/u/x.txt")
        assert plain.filename == "/u/x.txt"

    run(backend, body)


# --------------------------------------------------------------------------------------------
# overlay_fs


def store_down(path: str) -> BaseException:
    """What a layer whose backend is unreachable raises (not a ``PathError``: not an answer)."""
    return ConnectionRefusedError(errno.ECONNREFUSED, "store unreachable", path)


def test_overlay_earlier_layer_wins_everywhere(backend: str) -> None:
    async def body() -> None:
        upper = vfs.temp_fs({"/a.txt": "upper\n", "/only-upper.txt": "u\n"})
        lower = vfs.temp_fs({"/a.txt": "lower TODO\nmore lines here\n", "/only-lower.txt": "l\n"})
        fs = vfs.overlay_fs([upper, lower])
        assert await fs.read("/a.txt") == "upper\n"
        assert (await fs.stat("/a.txt")).size == len("upper\n")
        assert await paths(fs.list, "/") == ["/a.txt", "/only-lower.txt", "/only-upper.txt"]
        assert await collect(fs.grep, vfs.GrepQuery("TODO")) == []
        assert await paths(fs.grep, vfs.GrepQuery(".")) == [
            "/a.txt",
            "/only-lower.txt",
            "/only-upper.txt",
        ]
        error = await raises(vfs.ReadOnlyMountError, fs.write, "/only-upper.txt", "x")
        assert str(error) == "read-only mount: /only-upper.txt"

    run(backend, body)


def test_overlay_downed_layer_costs_only_its_files(backend: str) -> None:
    async def body() -> None:
        down = FailingTree(store_down)
        healthy = vfs.temp_fs(SEED)
        for layers in ([down, healthy], [healthy, down]):
            fs = vfs.overlay_fs(layers)
            assert (await fs.stat("/a.txt")).kind == "file"
            assert await fs.read("/a.txt") == SEED["/a.txt"]
            hits = await collect(fs.grep, vfs.GrepQuery("TODO"))
            assert [(h.path, h.line_number, h.line) for h in hits] == model_grep(SEED, "TODO")
            assert await collect(fs.search, vfs.SearchQuery("x")) == []
            assert "/src" in await paths(fs.list, "/")

    run(backend, body)


def test_overlay_fails_when_no_layer_served(backend: str) -> None:
    async def body() -> None:
        fs = vfs.overlay_fs([FailingTree(store_down), FailingTree(store_down)])
        await raises(ConnectionError, fs.stat, "/a.txt")
        await raises(ConnectionError, collect, fs.grep, vfs.GrepQuery("x"))
        await raises(ConnectionError, collect, fs.search, vfs.SearchQuery("x"))
        await raises(ConnectionError, fs.read, "/a.txt")

    run(backend, body)


# --------------------------------------------------------------------------------------------
# host_fs


def test_host_fs_write_is_unconditional_then_compare_and_swap(backend: str) -> None:
    async def body() -> None:
        store = vfs.InMemoryHostFiles({"/a.txt": "v1"}, scope="s")
        fs = vfs.host_fs(store, "s")
        await store.write("s", "/a.txt", b"other writer")
        await fs.write("/a.txt", "mine")  # no etag cached yet: unconditional
        assert await fs.read("/a.txt") == "mine"
        await store.write("s", "/a.txt", b"raced")  # another writer after our read
        error = await raises(vfs.WriteFailedError, fs.write, "/a.txt", "lost race")
        assert str(error) == "write failed: /a.txt"
        assert (await store.read("s", "/a.txt")).content == b"raced"
        assert await fs.read("/a.txt") == "raced"  # observing the other version re-arms
        await fs.write("/a.txt", "after read")
        await store.write("s", "/a.txt", b"raced again")  # after our own write
        await raises(vfs.WriteFailedError, fs.write, "/a.txt", "lost again")
        assert await collect(fs.search, vfs.SearchQuery("x")) == []

    run(backend, body)


# --------------------------------------------------------------------------------------------
# local_file_system (host default)


def test_local_relative_against_cwd_absolute_as_is(backend: str, tmp_path: Path) -> None:
    cwd, elsewhere = tmp_path / "cwd", tmp_path / "elsewhere"
    (cwd / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    (cwd / "sub" / "a.txt").write_text("in cwd\n")
    (elsewhere / "b.txt").write_text("elsewhere\n")

    async def body() -> None:
        fs = vfs.local_file_system(cwd)
        assert await fs.read("sub/a.txt") == "in cwd\n"
        assert await fs.read("./sub/../sub/a.txt") == "in cwd\n"
        assert await fs.read(str(elsewhere / "b.txt")) == "elsewhere\n"
        assert await paths(fs.list, "sub") == [str(cwd / "sub" / "a.txt")]
        assert await paths(fs.list, str(elsewhere)) == [str(elsewhere / "b.txt")]
        await fs.write("new/c.txt", "c")
        assert (cwd / "new" / "c.txt").read_text() == "c"
        assert await collect(fs.search, vfs.SearchQuery("x")) == []

    run(backend, body)


def test_local_does_not_follow_directory_symlinks_in_walks(backend: str, tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    (cwd / "real").mkdir(parents=True)
    (cwd / "real" / "f.txt").write_text("TODO real\n")
    (cwd / "link").symlink_to("real", target_is_directory=True)

    async def body() -> None:
        fs = vfs.local_file_system(cwd)
        listed = {(e.path, e.kind) for e in await collect(fs.list, "")}
        assert (str(cwd / "link"), "symlink") in listed
        assert (str(cwd / "real"), "directory") in listed
        assert await paths(fs.glob, "**/*.txt", "") == [str(cwd / "real" / "f.txt")]
        assert await paths(fs.grep, vfs.GrepQuery("TODO", path="")) == [str(cwd / "real" / "f.txt")]
        # Exact paths still follow.
        assert await fs.read("link/f.txt") == "TODO real\n"
        assert (await fs.stat("link")).kind == "directory"

    run(backend, body)


# --------------------------------------------------------------------------------------------
# dir_fs confinement


def test_dir_fs_is_confined(backend: str, tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "out").symlink_to(outside, target_is_directory=True)
    (root / "up").symlink_to("../outside", target_is_directory=True)
    (root / "abs").symlink_to("/", target_is_directory=True)
    (root / "file-link.txt").symlink_to(outside / "secret.txt")

    async def body() -> None:
        fs = vfs.dir_fs(root)
        await fs.write("/../../escape.txt", "stays")
        assert (root / "escape.txt").read_text() == "stays"
        assert not (tmp_path / "escape.txt").exists()
        for path in ["/out/secret.txt", "/up/secret.txt", "/file-link.txt"]:
            # Refused, or resolved inside the root (where nothing is): never the outside file.
            with pytest.raises(vfs.PathError):
                await fs.read(path)
            with contextlib.suppress(vfs.PathError):
                await fs.write(path, "overwritten")
        with pytest.raises(vfs.PathError):
            await fs.read("/abs" + str(outside / "secret.txt"))
        hits = await collect(fs.grep, vfs.GrepQuery("secret"))
        assert hits == []
        assert (outside / "secret.txt").read_text() == "secret"
        assert sorted(os.listdir(outside)) == ["secret.txt"]

    run(backend, body)
