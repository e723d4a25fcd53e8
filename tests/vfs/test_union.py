"""union_fs: longest-prefix composition of trees mounted at path prefixes."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Awaitable, Callable

import anyio
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

import vfs
from vfs._capabilities import buffers_writes, list_info_of
from vfs._match import compile_glob, grep_lines
from vfs._paths import relative_to

from .eightverb import BACKENDS, EightVerbTree, collect, exactly, paths, run

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def test_resolution_strips_and_re_prefixes(backend: str) -> None:
    async def main() -> None:
        agent = EightVerbTree({"/a.txt": "agent"})
        tools = vfs.temp_fs({"/a.txt": "tools"})
        root = EightVerbTree({"/top.txt": "top"})
        union = vfs.union_fs({"/": root, "/agent": agent, "/agent-tools": tools})
        assert await union.read("/agent/a.txt") == "agent"
        assert await union.read("/agent-tools/a.txt") == "tools"
        assert await union.read("/top.txt") == "top"
        await union.write("/agent/new/b.txt", "b")
        assert agent.files["/new/b.txt"] == b"b"
        await union.write("/agent-toolsx/c.txt", "c")  # not /agent-tools: the root mount
        assert root.files["/agent-toolsx/c.txt"] == b"c"
        assert await paths(union.list("/agent")) == ["/agent/a.txt", "/agent/new"]
        assert await paths(union.list("/")) == [
            "/agent",
            "/agent-tools",
            "/agent-toolsx",
            "/top.txt",
        ]
        assert await paths(union.glob("*.txt", "/agent")) == ["/agent/a.txt"]
        await union.delete("/agent/a.txt")
        assert "/a.txt" not in agent.files
        assert (await union.stat("/agent-tools/a.txt")).kind == "file"

    run(backend, main)


def test_no_mount(backend: str) -> None:
    async def main() -> None:
        union = vfs.union_fs({"/repo": EightVerbTree({"/a": "x"})})
        with pytest.raises(vfs.NoMountError, match=exactly("no mount for path: /x")):
            await union.read("/x")
        with pytest.raises(vfs.NoMountError, match=exactly("no mount for path: /x")):
            await union.write("/x", "data")
        with pytest.raises(vfs.NoMountError, match=exactly("no mount for path: /x")):
            await union.delete("/x")
        with pytest.raises(vfs.NoMountError, match=exactly("no mount for path: /x")):
            await union.open("/x", create=True)
        assert (await union.stat("/x")).kind == "missing"
        assert await collect(union.list("/x")) == []
        assert await collect(union.glob("**", "/x")) == []
        assert await collect(union.grep(vfs.GrepQuery("x", path="/x"))) == []
        assert await collect(union.search(vfs.SearchQuery("x", path="/x"))) == []
        assert await paths(union.glob("**")) == ["/repo", "/repo/a"]
        empty = vfs.union_fs({})
        assert (await empty.stat("/")).kind == "directory"
        assert await collect(empty.list("/")) == []

    run(backend, main)


def test_synthesized_directories(backend: str) -> None:
    async def main() -> None:
        union = vfs.union_fs({"/": EightVerbTree({"/a": "file"}), "/a/b": EightVerbTree()})
        info = await union.lstat("/a")  # a file in the covering tree: synthesized
        assert (info.kind, info.mode) == ("directory", 0o755)
        assert (info.uid, info.gid) == (os.getuid(), os.getgid())
        assert (await union.stat("/a")).kind == "directory"
        assert (await union.stat("/a/b")).kind == "directory"  # the child's own root
        assert await collect(union.list("/")) == [vfs.DirEntry("/a", "directory")]
        assert await collect(union.list("/a")) == [vfs.DirEntry("/a/b", "directory")]
        assert await collect(union.list("/a/b")) == []
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /a")):
            await union.read("/a")
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /a/b")):
            await union.write("/a/b", "x")
        repo = vfs.temp_fs({"/x": "1"})
        union = vfs.union_fs({"/repo": repo})
        assert await union.stat("/repo") == await repo.stat("/")  # a real directory wins
        assert await collect(union.list("/")) == [vfs.DirEntry("/repo", "directory")]

    run(backend, main)


def test_deeper_mount_shadows_list_glob_and_grep(backend: str) -> None:
    async def main() -> None:
        authored = EightVerbTree({"/tmp/old.txt": "hit", "/a.txt": "hit", "/tmp2/x": "hit"})
        scratch = vfs.temp_fs({"/new.txt": "hit"})
        union = vfs.union_fs({"/": authored, "/tmp": scratch})
        assert await paths(union.list("/tmp")) == ["/tmp/new.txt"]
        assert await collect(union.list("/")) == [
            vfs.DirEntry("/a.txt", "file"),
            vfs.DirEntry("/tmp", "directory"),
            vfs.DirEntry("/tmp2", "directory"),
        ]
        everything = ["/a.txt", "/tmp", "/tmp/new.txt", "/tmp2", "/tmp2/x"]
        assert await paths(union.glob("**")) == everything
        assert await paths(vfs.glob_tree(union, "**")) == everything
        assert await paths(union.glob("*/*")) == ["/tmp/new.txt", "/tmp2/x"]
        assert await paths(union.glob("tmp/*")) == ["/tmp/new.txt"]
        assert await paths(union.glob("t*")) == ["/tmp", "/tmp2"]
        hits = await collect(union.grep(vfs.GrepQuery("hit")))
        assert [h.path for h in hits] == ["/a.txt", "/tmp/new.txt", "/tmp2/x"]  # type: ignore[attr-defined]
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /tmp/old.txt")):
            await union.read("/tmp/old.txt")

    run(backend, main)


def test_list_info_follows_the_mount_table(backend: str) -> None:
    async def main() -> None:
        authored = vfs.temp_fs({"/tmp": "a file the mount shadows", "/a.txt": "x"})
        scratch = vfs.temp_fs({"/new.txt": "y"})
        union = vfs.union_fs({"/": authored, "/tmp": scratch, "/deep/er": vfs.temp_fs()})
        listed = await list_info_of(union)("/")
        assert [(entry.path, entry.kind) for entry, _ in listed] == [
            ("/a.txt", "file"),
            ("/deep", "directory"),
            ("/tmp", "directory"),
        ]
        for entry, info in listed:
            assert info == await union.lstat(entry.path)
        moved = await list_info_of(union)("/tmp")
        assert moved == [(vfs.DirEntry("/tmp/new.txt", "file"), await scratch.lstat("/new.txt"))]
        # Every child writes through, so the union does too; one buffering child changes that.
        assert buffers_writes(union) is False
        assert buffers_writes(vfs.union_fs({"/": authored, "/e": EightVerbTree()})) is True
        assert buffers_writes(vfs.union_fs({"/": authored, "/e": vfs.empty_fs()})) is False

    run(backend, main)


def test_grep_fans_out_with_pushdown(backend: str) -> None:
    async def main() -> None:
        first = EightVerbTree({f"/f{i}.txt": "match\n" for i in range(10)})
        second = EightVerbTree({f"/g{i}.txt": "match\nmatch\n" for i in range(10)})
        third = EightVerbTree({"/h.txt": "match"})
        union = vfs.union_fs({"/a": first, "/b": second, "/b/c": third})
        hits = await collect(union.grep(vfs.GrepQuery("match", max_results=3)))
        assert hits == [
            vfs.GrepResult("/a/f0.txt", 1, "match"),
            vfs.GrepResult("/a/f1.txt", 1, "match"),
            vfs.GrepResult("/a/f2.txt", 1, "match"),
        ]
        assert (first.grep_caps, second.grep_caps, third.grep_caps) == ([3], [3], [3])
        assert first.hits_produced <= 3
        assert second.hits_produced <= 3
        everything = await collect(union.grep(vfs.GrepQuery("match")))
        assert len(everything) == 10 + 20 + 1
        assert everything == sorted(everything, key=lambda h: (h.path, h.line_number))  # type: ignore[attr-defined]
        below = await collect(union.grep(vfs.GrepQuery("match", path="/b")))
        assert len(below) == 21
        assert second.grep_caps[-1] is None
        one = await collect(union.grep(vfs.GrepQuery("match", path="/b/g3.txt")))
        assert one == [
            vfs.GrepResult("/b/g3.txt", 1, "match"),
            vfs.GrepResult("/b/g3.txt", 2, "match"),
        ]
        assert await collect(union.grep(vfs.GrepQuery("match", max_results=0))) == []

    run(backend, main)


def test_grep_stops_early(backend: str) -> None:
    async def main() -> None:
        first = EightVerbTree({f"/f{i}.txt": "match\n" for i in range(50)})
        second = EightVerbTree({f"/g{i}.txt": "match\n" for i in range(50)})
        union = vfs.union_fs({"/a": first, "/b": second})
        stream = union.grep(vfs.GrepQuery("match"))
        taken = []
        async for hit in stream:
            taken.append(hit)
            if len(taken) == 2:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        assert first.hits_produced <= 3
        assert second.hits_produced <= 1

    run(backend, main)


def test_grep_refills_after_dropping_shadowed_hits(backend: str) -> None:
    async def main() -> None:
        shadowed = {f"/s/{i:02}.txt": "match" for i in range(8)}
        authored = EightVerbTree({**shadowed, "/t/a.txt": "match", "/t/b.txt": "match"})
        union = vfs.union_fs({"/": authored, "/s": EightVerbTree()})
        hits = await collect(union.grep(vfs.GrepQuery("match", max_results=2)))
        assert [h.path for h in hits] == ["/t/a.txt", "/t/b.txt"]  # type: ignore[attr-defined]
        assert authored.grep_caps[0] == 2  # pushed down; asked again only because hits were dropped

    run(backend, main)


def test_grep_glob_across_mounts(backend: str) -> None:
    async def main() -> None:
        union = vfs.union_fs(
            {
                "/": EightVerbTree({"/src/a.py": "x", "/b.py": "x"}),
                "/repo": vfs.temp_fs({"/src/c.py": "x", "/d.py": "x"}),
            }
        )
        names = [h.path async for h in union.grep(vfs.GrepQuery("x", glob="*.py"))]  # type: ignore[attr-defined]
        assert names == ["/b.py", "/repo/d.py", "/repo/src/c.py", "/src/a.py"]
        names = [h.path async for h in union.grep(vfs.GrepQuery("x", glob="src/*.py"))]  # type: ignore[attr-defined]
        assert names == ["/src/a.py"]
        names = [h.path async for h in union.grep(vfs.GrepQuery("x", glob="repo/src/*.py"))]  # type: ignore[attr-defined]
        assert names == ["/repo/src/c.py"]

    run(backend, main)


def test_search_fans_out_by_score(backend: str) -> None:
    async def main() -> None:
        first = EightVerbTree({"/one.txt": "cat", "/three.txt": "cat cat cat"})
        second = EightVerbTree({"/two.txt": "cat cat", "/four.txt": "cat cat cat cat"})
        union = vfs.union_fs({"/a": first, "/b": second})
        results = await collect(union.search(vfs.SearchQuery("cat", max_results=3)))
        assert [(r.path, r.score) for r in results] == [  # type: ignore[attr-defined]
            ("/b/four.txt", 4.0),
            ("/a/three.txt", 3.0),
            ("/b/two.txt", 2.0),
        ]
        assert (first.search_caps, second.search_caps) == ([3], [3])

    run(backend, main)


def test_child_errors_name_union_paths(backend: str) -> None:
    async def main() -> None:
        tree = EightVerbTree({"/a": "x"})
        union = vfs.union_fs({"/repo": tree, "/t": vfs.temp_fs()})
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /repo/x")) as caught:
            await union.read("/repo/x")
        assert caught.value.path == "/repo/x"
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /t/x")):
            await union.delete("/t/x")
        stream = union.grep(vfs.GrepQuery("("))  # raised at the first iteration, as every tree
        with pytest.raises(vfs.InvalidGrepPatternError, match=exactly("invalid grep pattern: (")):
            await collect(stream)
        tree.failure = vfs.PermissionDeniedError("/a")
        with pytest.raises(vfs.PermissionDeniedError, match=exactly("permission denied: /repo/a")):
            await collect(union.list("/repo"))  # raised lazily, inside the iterator
        tree.failure = FileNotFoundError(2, "No such file or directory", "/gone")
        with pytest.raises(FileNotFoundError) as untyped:
            await union.stat("/repo/gone")
        assert untyped.value.filename == "/repo/gone"
        tree.failure = RuntimeError("backend down")
        with pytest.raises(RuntimeError, match=r"^backend down") as other:
            await collect(union.grep(vfs.GrepQuery("x", path="/repo")))
        assert other.value.__notes__ == ["(raised by the tree mounted at /repo)"]
        # Untyped errors: the paths in the message move into the union's namespace (best
        # effort); URLs, numbers and words with slashes stay.
        tree.failure = RuntimeError("cannot read /a (from https://store.example/a, 1/2 and/or /)")
        with pytest.raises(RuntimeError) as untyped_text:
            await union.read("/repo/a")
        assert str(untyped_text.value) == (
            "cannot read /repo/a (from https://store.example/a, 1/2 and/or /repo)"
        )
        tree.failure = OSError(5, "no answer for /a/b")
        with pytest.raises(OSError) as untyped_os:
            await union.stat("/repo/a/b")
        assert str(untyped_os.value) == "[Errno 5] no answer for /repo/a/b"

    run(backend, main)


def test_posix_operations(backend: str) -> None:
    async def main() -> None:
        user = EightVerbTree({"/x.txt": "x"})
        temp = vfs.temp_fs({"/y.txt": "y"})
        union = vfs.union_fs({"/a": user, "/b": temp, "/b/deep/m": vfs.temp_fs()})
        assert isinstance(union, vfs.PosixFileSystem)
        with pytest.raises(
            vfs.CrossMountError, match=exactly("cross-mount rename: /a/x.txt")
        ) as cross:
            await union.rename("/a/x.txt", "/b/x.txt")
        assert cross.value.errno == errno.EXDEV
        for mount_point in ("/a", "/b/deep/m"):
            with pytest.raises(
                vfs.FileExistsError, match=exactly(f"already exists: {mount_point}")
            ):
                await union.mkdir(mount_point)
            for op in (union.rmdir, union.unlink):
                with pytest.raises(vfs.PathError) as busy:
                    await op(mount_point)
                assert (busy.value.errno, str(busy.value)) == (
                    errno.EBUSY,
                    f"device or resource busy: {mount_point}",
                )
            with pytest.raises(vfs.PathError) as busy:
                await union.rename(mount_point, "/a/z")
            assert busy.value.errno == errno.EBUSY
        with pytest.raises(vfs.PathError) as busy:
            await union.rename("/b/y.txt", "/b/deep")
        assert busy.value.errno == errno.EBUSY
        with pytest.raises(
            vfs.DirectoryNotEmptyError, match=exactly("directory not empty: /b/deep")
        ):
            await union.rmdir("/b/deep")
        # An eight-verb child mounts through posix_view.
        await union.mkdir("/a/d")
        handle = await union.open("/a/d/f.txt", create=True)
        await handle.write(0, b"hello")
        await handle.close()
        assert user.files["/d/f.txt"] == b"hello"
        await union.rename("/a/d/f.txt", "/a/d/g.txt")
        assert await union.read("/a/d/g.txt") == "hello"
        assert (await union.setattr("/a/d/g.txt", size=2)).size == 2
        await union.unlink("/a/d/g.txt")
        await union.rmdir("/a/d")
        assert await paths(union.list("/a")) == ["/a/x.txt"]
        # A POSIX child is used directly.
        await union.symlink("/b/link", "y.txt")
        assert await union.readlink("/b/link") == "y.txt"
        assert (await union.lstat("/b/link")).kind == "symlink"
        assert (await union.stat("/b/link")).kind == "file"
        info = await union.setattr("/b/y.txt", mode=0o600)
        assert info.mode == 0o600
        assert (await union.setattr("/b/deep", mode=0o700)).mode == 0o755  # synthesized: ignored
        with pytest.raises(vfs.IsADirectoryError):
            await union.open("/b/deep/m")

    run(backend, main)


def test_open_file_errors_name_union_paths(backend: str) -> None:
    async def main() -> None:
        user = EightVerbTree({"/f": "x"})
        union = vfs.union_fs({"/repo": user})
        handle = await union.open("/repo/f")
        await handle.write(0, b"y")
        user.write_failure = vfs.WriteFailedError("/f")
        with pytest.raises(vfs.WriteFailedError, match=exactly("write failed: /repo/f")):
            await handle.close()
        with pytest.raises(vfs.FileExistsError, match=exactly("already exists: /repo/f")):
            await union.open("/repo/f", create=True, exclusive=True)

    run(backend, main)


def test_watch_forwards_child_changes(backend: str) -> None:
    async def main() -> None:
        temp = vfs.temp_fs()
        user = EightVerbTree()
        root = vfs.temp_fs()
        union = vfs.union_fs({"/": root, "/t": temp, "/u": user})
        seen: list[tuple[str, str, object]] = []
        awaited: list[str] = []

        async def finish() -> None:
            awaited.append("done")

        def callback(change: vfs.Change) -> Awaitable[None]:
            seen.append((change.path, change.kind, change.origin))
            return finish()

        union.watch(callback)
        token = vfs.change_origin.set("mountd")
        try:
            await temp.write("/x.txt", "direct")  # through the child itself
        finally:
            vfs.change_origin.reset(token)
        await union.write("/u/y.txt", "via union")
        await root.write("/t/hidden", "shadowed by /t")  # not a union path: not forwarded
        assert ("/t/x.txt", "entry", "mountd") in seen
        assert ("/u/y.txt", "entry", None) in seen
        assert not [change for change in seen if change[0].startswith("/t/hidden")]
        assert len(awaited) == len(seen)

    run(backend, main)


def test_duplicate_mounts_are_refused(backend: str) -> None:
    with pytest.raises(ValueError, match=exactly("duplicate mount: /a")):
        vfs.union_fs({"/a": EightVerbTree(), "/a/": EightVerbTree()})


def test_resolution_with_many_mounts(backend: str) -> None:
    async def main() -> None:
        trees = {f"/m{i}": EightVerbTree({"/f": str(i)}) for i in range(200)}
        trees["/m7/inner"] = EightVerbTree({"/f": "inner"})
        union = vfs.union_fs(trees)
        assert await union.read("/m150/f") == "150"
        assert await union.read("/m7/inner/f") == "inner"
        assert await union.read("/m7/f") == "7"
        assert union._resolve("/m7/innerx/f") is union._by_prefix["/m7"]
        assert union._resolve("/nowhere/deep/path") is None
        for i in range(5000):  # past the memo's size: it is dropped and refilled
            assert union._resolve(f"/m{i % 200}/x{i}") is union._by_prefix[f"/m{i % 200}"]
        assert union._resolve("/m7/inner") is union._by_prefix["/m7/inner"]

    run(backend, main)


def test_create_beneath_a_synthesized_directory(backend: str) -> None:
    async def main() -> None:
        root = EightVerbTree()
        temp = vfs.temp_fs()
        for child in (root, temp):
            union = vfs.union_fs({"/": child, "/a/b/m": vfs.temp_fs()})
            handle = await union.open(
                "/a/new.txt", create=True
            )  # /a exists only as a mount's parent
            await handle.close()
            await union.mkdir("/a/b/d")
            assert await paths(union.list("/a")) == ["/a/b", "/a/new.txt"]
            assert await paths(union.list("/a/b")) == ["/a/b/d", "/a/b/m"]
            await union.rename("/a/new.txt", "/a/b/moved.txt")
            assert (await union.stat("/a/b/moved.txt")).kind == "file"

    run(backend, main)


# A random union of temp_fs and eight-verb trees against a dict model.

PREFIXES = ("/", "/a", "/a/b", "/agent", "/agent-tools", "/d")
DIRS = ("", "a", "a/b", "a/b/c", "agent", "agent/x", "agent-tools", "d", "e")
FILES = tuple(f"/{d}/{n}".replace("//", "/") for d in DIRS for n in ("f.txt", "g.py"))
CONTENTS = ("alpha\n", "beta\nalpha\n", "gamma", "")
GLOBS = ("*", "**", "*.txt", "**/*.py", "a/*", "*/*", "agent*/**", "a/**/g.py", "{d,e}/*")
PLACES = ("/", "/a", "/a/b", "/agent", "/agent/x", "/d", "/e", "/nope", "/a/f.txt")


def _ancestors(path: str) -> list[str]:
    found = []
    while path != "/":
        path = vfs._paths.parent_path(path)
        found.append(path)
    return found


class UnionModel(RuleBasedStateMachine):
    """``union_fs`` over random mounts must behave like one dict of files."""

    backend = "trio"

    def __init__(self) -> None:
        super().__init__()
        self.mounts: dict[str, str] = {}  # prefix -> "temp" | "eight"
        self.files: dict[str, str] = {}
        self.kept: set[str] = set()  # directories a child keeps without files beneath
        self.union: vfs._union.UnionFileSystem | None = None

    def call(self, fn: Callable[[], Awaitable[object]]) -> object:
        box: list[object] = []

        async def main() -> None:
            box.append(await fn())

        anyio.run(main, backend=self.backend)
        return box[0]

    @initialize(
        chosen=st.lists(st.sampled_from(PREFIXES), unique=True, max_size=4),
        kinds=st.lists(st.sampled_from(["temp", "eight"]), min_size=4, max_size=4),
    )
    def build(self, chosen: list[str], kinds: list[str]) -> None:
        self.mounts = dict(zip(chosen, kinds, strict=False))
        trees: dict[str, vfs.FileSystem] = {
            prefix: vfs.temp_fs() if kind == "temp" else EightVerbTree()
            for prefix, kind in self.mounts.items()
        }
        self.union = vfs.union_fs(trees)

    def resolve(self, path: str) -> str | None:
        for probe in [path, *_ancestors(path)]:
            if probe in self.mounts:
                return probe
        return None

    def directories(self) -> set[str]:
        dirs = {"/"}
        for prefix in self.mounts:
            dirs.update([prefix, *_ancestors(prefix)])
        for path in [*self.files, *self.kept]:
            dirs.update(_ancestors(path))
        dirs.update(self.kept)
        return dirs

    def keep_parents(self, mount: str, path: str) -> None:
        """What a child keeps of ``path``'s parents once ``path`` is gone."""
        if self.mounts[mount] == "temp":
            return  # temp_fs keeps every directory `write` made (recorded in `kept` already)
        for directory in _ancestors(path):
            if not vfs.is_under(directory, mount) or directory == mount or directory in self.kept:
                return
            if any(vfs._paths.is_strictly_under(f, directory) for f in self.files):
                return
            self.kept.add(directory)

    def created(self, mount: str, path: str) -> None:
        inside = [d for d in _ancestors(path) if vfs._paths.is_strictly_under(d, mount)]
        if self.mounts[mount] == "temp":
            self.kept.update(inside)
        else:
            self.kept.difference_update(inside)  # the tree derives them now

    @rule(data=st.data(), contents=st.sampled_from(CONTENTS))
    def write(self, data: st.DataObject, contents: str) -> None:
        mounted = [f for f in FILES if self.resolve(f) is not None]
        choices = (
            st.sampled_from(mounted) | st.sampled_from(FILES) if mounted else st.sampled_from(FILES)
        )
        path = data.draw(choices, label="path")
        assert self.union is not None
        union = self.union
        mount = self.resolve(path)
        if mount is None:
            with pytest.raises(vfs.NoMountError, match=exactly(f"no mount for path: {path}")):
                self.call(lambda: union.write(path, contents))
            return
        self.call(lambda: union.write(path, contents))
        self.files[path] = contents
        self.created(mount, path)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        path = self.some_file(data, "path")
        assert self.union is not None
        union = self.union
        mount = self.resolve(path)
        if mount is None:
            with pytest.raises(vfs.NoMountError, match=exactly(f"no mount for path: {path}")):
                self.call(lambda: union.delete(path))
        elif path not in self.files:
            with pytest.raises(vfs.FileNotFoundError, match=exactly(f"not found: {path}")):
                self.call(lambda: union.delete(path))
        else:
            self.call(lambda: union.delete(path))
            del self.files[path]

    def some_file(self, data: st.DataObject, label: str, near: str | None = None) -> str:
        """A path from FILES, biased towards existing files and the mount of ``near``."""
        likely = (
            sorted(self.files)
            if near is None
            else [f for f in FILES if self.resolve(f) == self.resolve(near)]
        )
        choices = (
            st.sampled_from(likely) | st.sampled_from(FILES) if likely else st.sampled_from(FILES)
        )
        return data.draw(choices, label=label)

    @rule(data=st.data())
    def rename(self, data: st.DataObject) -> None:
        src = self.some_file(data, "src")
        dst = self.some_file(data, "dst", near=src)
        assert self.union is not None
        union = self.union
        mount, target = self.resolve(src), self.resolve(dst)
        if mount is None or target is None:
            with pytest.raises(vfs.NoMountError):
                self.call(lambda: union.rename(src, dst))
        elif mount != target:
            with pytest.raises(vfs.CrossMountError, match=exactly(f"cross-mount rename: {src}")):
                self.call(lambda: union.rename(src, dst))
        elif src not in self.files or vfs._paths.parent_path(dst) not in self.directories():
            with pytest.raises(FileNotFoundError):
                self.call(lambda: union.rename(src, dst))
        else:
            self.call(lambda: union.rename(src, dst))
            if src != dst:
                self.files[dst] = self.files.pop(src)
                self.created(mount, dst)
                self.keep_parents(mount, src)

    @rule(path=st.sampled_from(FILES))
    def read(self, path: str) -> None:
        assert self.union is not None
        union = self.union
        if self.resolve(path) is None:
            with pytest.raises(vfs.NoMountError, match=exactly(f"no mount for path: {path}")):
                self.call(lambda: union.read(path))
        elif path not in self.files:
            with pytest.raises(vfs.FileNotFoundError, match=exactly(f"not found: {path}")):
                self.call(lambda: union.read(path))
        else:
            assert self.call(lambda: union.read(path)) == self.files[path]

    def entries(self) -> dict[str, str]:
        kinds = dict.fromkeys(self.directories() - {"/"}, "directory")
        kinds.update(dict.fromkeys(self.files, "file"))
        return kinds

    @invariant()
    def every_directory_lists_and_stats_as_the_model(self) -> None:
        if self.union is None:
            return
        union = self.union
        entries = self.entries()

        async def observe() -> list[tuple[str, list[tuple[str, str]], str]]:
            seen = []
            for place in PLACES:
                listed = [(e.path, e.kind) async for e in union.list(place)]
                seen.append((place, listed, (await union.stat(place)).kind))
            return seen

        for place, listed, kind in self.call(observe):  # type: ignore[attr-defined]
            expected = sorted(
                (path, entry_kind)
                for path, entry_kind in entries.items()
                if vfs._paths.parent_path(path) == place and path != place
            )
            assert listed == ([] if place in self.files else expected), place
            assert kind == ("directory" if place == "/" else entries.get(place, "missing")), place

    @rule(pattern=st.sampled_from(GLOBS), place=st.sampled_from(PLACES))
    def glob(self, pattern: str, place: str) -> None:
        assert self.union is not None
        union = self.union
        match = compile_glob(pattern).match
        expected = sorted(
            path
            for path in self.entries()
            if vfs._paths.is_strictly_under(path, place) and match(relative_to(path, place))
        )
        assert self.call(lambda: paths(union.glob(pattern, place))) == expected

    @rule(
        pattern=st.sampled_from(["alpha", "^b", "a|g"]),
        place=st.sampled_from(PLACES),
        cap=st.sampled_from([None, 1, 2]),
    )
    def grep(self, pattern: str, place: str, cap: int | None) -> None:
        assert self.union is not None
        union = self.union
        regex = re.compile(pattern)
        expected = [
            (path, number, line)
            for path in sorted(self.files)
            if vfs.is_under(path, place)
            for number, line in grep_lines(self.files[path], regex)
        ][:cap]
        query = vfs.GrepQuery(pattern, path=place, max_results=cap)
        got = self.call(lambda: collect(union.grep(query)))
        assert [(h.path, h.line_number, h.line) for h in got] == expected  # type: ignore[attr-defined]


def test_union_matches_a_dict_model(backend: str) -> None:
    machine = type("UnionModelRun", (UnionModel,), {"backend": backend})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=20,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_link_counts_include_mount_points(backend: str) -> None:
    async def main() -> None:
        root = vfs.temp_fs({"/c/f": "x", "/a/g": "y"})  # /a is a directory of the root tree too
        union = vfs.union_fs({"/": root, "/a": vfs.temp_fs(), "/b": vfs.temp_fs(), "/d/e": root})
        assert (await root.stat("/")).nlink == 4  # /a and /c
        assert (await union.stat("/")).nlink == 6  # /a, /b, /c, /d
        assert (await union.lstat("/d")).nlink == 3  # synthesized, holding /d/e
        union = vfs.union_fs({"/x": EightVerbTree()})
        assert (await union.stat("/")).nlink == 3

    run(backend, main)
