"""Stateful model tests: random write/delete/read/list/stat/glob/grep sequences against a dict.

Theory of operation
-------------------
One ``RuleBasedStateMachine`` per writable composition (temp_fs, dir_fs, host_fs, posix_view over
an 8-verb tree, and unions of random writable mounts). The model is a plain ``dict`` of path ->
contents plus the mount table; everything a verb answers is derived from it by the models of
``conformance.py``. Directories are the one place trees may legitimately differ: a tree with
first-class directories keeps a directory after its last file is deleted, a tree of implied
directories does not. So the model tracks the directories that *must* exist (ancestors of files
and of mount points) and those that *may* (any directory ever created), and checks
``must <= seen <= may``; files are checked exactly.

The machine runs its tree on an event loop in a blocking portal (``anyio.from_thread``), whose
backend (trio or asyncio) hypothesis draws per run. Names are chosen so a file never sits where a
directory is (files have extensions, directories do not) and so that ``/a-b.txt`` sorts between
``/a`` and ``/a/...``: list order is checked on every step.
"""

from __future__ import annotations

import builtins
import posixpath
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, ClassVar

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import vfs

from .conformance import collect, glob_regex, model_grep, relative, under
from .dict_tree import DictTree

DIRS = ["/", "/a", "/a/b", "/c", "/a/b/e"]
NAMES = ["x.txt", "y.md", "z.png", "a-b.txt", "é.txt"]
FILE_PATHS = [posixpath.join(d, n) for d in DIRS for n in NAMES]
MISSING = ["/nope", "/a/nope.txt", "/a/x.txt/deeper", "/c/d/e"]
PROBES = DIRS + FILE_PATHS[::3] + MISSING
MOUNT_PREFIXES = ["/", "/a", "/a/b", "/c"]

LINES = st.sampled_from(["foo", "bar baz", "", "Foo bar", "qux foo", "baz"])
TEXT = st.builds(
    lambda lines, final: "\n".join(lines) + ("\n" if final and lines else ""),
    st.lists(LINES, max_size=4),
    st.booleans(),
)
PNG = st.binary(max_size=8).map(lambda tail: b"\x89PNG\r\n\x1a\n\x00" + tail)


def contents_for(path: str) -> st.SearchStrategy[str | bytes]:
    return PNG if path.endswith(".png") else TEXT


SETTINGS = settings(
    max_examples=15,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def ancestors(path: str) -> set[str]:
    found = set()
    parent = posixpath.dirname(path)
    while parent != "/":
        found.add(parent)
        parent = posixpath.dirname(parent)
    return found


Build = Callable[[], Awaitable[vfs.FileSystem]]


class FileSystemMachine(RuleBasedStateMachine):
    """The model and the rules; subclasses say how to build the tree."""

    def __init__(self) -> None:
        super().__init__()
        self.stack = ExitStack()
        self.portal: BlockingPortal | None = None
        self.fs: Any = None
        self.files: dict[str, str | bytes] = {}
        self.mounts: list[str] | None = None  # None: not a union, everything is covered
        self.ever: set[str] = set()

    # --- building ---------------------------------------------------------------------------

    def prepare(self, data: st.DataObject) -> Build:
        raise NotImplementedError

    def temp_dir(self) -> Path:
        path = Path(tempfile.mkdtemp(prefix="vfs-stateful-"))
        self.stack.callback(shutil.rmtree, path, True)
        return path

    @initialize(
        backend=st.sampled_from(["trio", "asyncio"]),
        data=st.data(),
        seed=st.lists(st.sampled_from(FILE_PATHS), max_size=10, unique=True),
    )
    def start(self, backend: str, data: st.DataObject, seed: list[str]) -> None:
        build = self.prepare(data)
        self.portal = self.stack.enter_context(start_blocking_portal(backend))
        self.fs = self.call(build)
        # Start from a populated tree, so short runs still exercise every verb on real entries.
        for path in seed:
            self.write_file(path, data.draw(contents_for(path)))

    def teardown(self) -> None:
        self.stack.close()

    def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        assert self.portal is not None
        return self.portal.call(fn, *args)

    # --- the model ------------------------------------------------------------------------

    def covered(self, path: str) -> bool:
        return self.mounts is None or any(under(path, m) for m in self.mounts)

    def must_dirs(self) -> set[str]:
        dirs = set()
        for path in self.files:
            dirs |= ancestors(path)
        for mount in self.mounts or []:
            if mount != "/":
                dirs |= ancestors(mount) | {mount}
        return dirs

    def may_dirs(self) -> set[str]:
        return self.must_dirs() | self.ever

    def kind_bounds(self, path: str) -> tuple[set[str], set[str]]:
        """The kinds ``stat(path)`` may answer."""
        if path == "/" or path in self.must_dirs():
            return {"directory"}, {"directory"}
        if path in self.files:
            return {"file"}, {"file"}
        if path in self.ever:
            return {"directory", "missing"}, {"directory", "missing"}
        return {"missing"}, {"missing"}

    def check_entries(self, found: list[vfs.DirEntry], wanted: Callable[[str], bool]) -> None:
        paths = [entry.path for entry in found]
        assert paths == sorted(set(paths)), paths
        files = {e.path for e in found if e.kind == "file"}
        dirs = {e.path for e in found if e.kind == "directory"}
        assert {e.kind for e in found} <= {"file", "directory"}, found
        assert files == {p for p in self.files if wanted(p)}
        must = {d for d in self.must_dirs() if wanted(d)}
        may = {d for d in self.may_dirs() if wanted(d)}
        assert must <= dirs <= may, (must, dirs, may)

    def expect_missing_error(self, error: BaseException, path: str) -> None:
        if self.covered(path):
            assert type(error) is vfs.FileNotFoundError, repr(error)
            assert str(error) == f"not found: {path}"
        else:
            assert type(error) is vfs.NoMountError, repr(error)
            assert str(error) == f"no mount for path: {path}"

    # --- rules ----------------------------------------------------------------------------

    @rule(data=st.data(), path=st.sampled_from(FILE_PATHS))
    def write(self, data: st.DataObject, path: str) -> None:
        self.write_file(path, data.draw(contents_for(path)))

    @precondition(lambda self: bool(self.files))
    @rule(data=st.data())
    def overwrite(self, data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(sorted(self.files)))
        self.write_file(path, data.draw(contents_for(path)))

    def write_file(self, path: str, contents: str | bytes) -> None:
        if not self.covered(path):
            with pytest.raises(vfs.NoMountError) as caught:
                self.call(self.fs.write, path, contents)
            assert str(caught.value) == f"no mount for path: {path}"
            return
        self.call(self.fs.write, path, contents)
        self.files[path] = contents
        self.ever |= ancestors(path)

    @precondition(lambda self: bool(self.files))
    @rule(data=st.data())
    def delete_existing(self, data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(sorted(self.files)))
        self.call(self.fs.delete, path)
        del self.files[path]

    @rule(path=st.sampled_from(FILE_PATHS + MISSING[1:]))
    def delete_any(self, path: str) -> None:
        if path in self.files:
            self.call(self.fs.delete, path)
            del self.files[path]
            return
        with pytest.raises(builtins.FileNotFoundError) as caught:
            self.call(self.fs.delete, path)
        self.expect_missing_error(caught.value, path)

    @rule(path=st.sampled_from(FILE_PATHS + MISSING[1:]))
    def read(self, path: str) -> None:
        if path in self.files:
            assert self.call(self.fs.read, path) == self.files[path]
            return
        with pytest.raises(builtins.FileNotFoundError) as caught:
            self.call(self.fs.read, path)
        self.expect_missing_error(caught.value, path)

    @rule(path=st.sampled_from(PROBES))
    def stat(self, path: str) -> None:
        info = self.call(self.fs.stat, path)
        allowed, _ = self.kind_bounds(path)
        assert info.kind in allowed, (path, info)
        if info.kind == "file":
            contents = self.files[path]
            size = len(contents.encode() if isinstance(contents, str) else contents)
            assert info.size == size

    @rule(path=st.sampled_from(PROBES))
    def list_dir(self, path: str) -> None:
        found = self.call(collect, self.fs.list, path)
        if path in self.files:
            assert found == []
            return
        self.check_entries(
            found, lambda p: p != path and under(p, path) and "/" not in relative(p, path)
        )

    @rule(
        pattern=st.sampled_from(["*", "*.txt", "**/*.txt", "*/*", "**/*", "**/b"]),
        directory=st.sampled_from([*DIRS, "/nope"]),
    )
    def glob_entries(self, pattern: str, directory: str) -> None:
        found = self.call(collect, self.fs.glob, pattern, directory)
        regex = glob_regex(pattern)
        self.check_entries(
            found,
            lambda p: (
                p != directory and under(p, directory) and bool(regex.match(relative(p, directory)))
            ),
        )

    @rule(
        pattern=st.sampled_from(["foo", "^bar", "baz$", "o+", "Foo"]),
        path=st.sampled_from([*DIRS, "/nope", "/a/x.txt"]),
        glob=st.sampled_from([None, "*.txt", "*.md", "b/*.txt", "**/x.txt"]),
        case_insensitive=st.booleans(),
        max_results=st.sampled_from([None, 1, 2, 5]),
    )
    def grep_lines(
        self,
        pattern: str,
        path: str,
        glob: str | None,
        case_insensitive: bool,
        max_results: int | None,
    ) -> None:
        query = vfs.GrepQuery(pattern, path, glob, case_insensitive, max_results)
        found = self.call(collect, self.fs.grep, query)
        expected = model_grep(self.files, pattern, path, glob, case_insensitive, max_results)
        assert [(h.path, h.line_number, h.line) for h in found] == expected

    @invariant()
    def whole_tree_matches(self) -> None:
        if self.fs is None:
            return
        entries, contents, hits = self.call(snapshot, self.fs, sorted(self.files))
        self.check_entries(entries, lambda p: True)
        assert contents == self.files
        assert [(h.path, h.line_number, h.line) for h in hits] == model_grep(self.files, "o|a")


async def collect_tree(fs: vfs.FileSystem, directory: str = "/") -> list[vfs.DirEntry]:
    """Every entry beneath ``directory`` by recursive ``list`` (each listing must be sorted),
    returned in path order."""
    entries: list[vfs.DirEntry] = []
    listing = await collect(fs.list, directory)
    assert [e.path for e in listing] == sorted({e.path for e in listing}), listing
    for entry in listing:
        entries.append(entry)
        if entry.kind == "directory":
            entries += await collect_tree(fs, entry.path)
    return sorted(entries, key=lambda entry: entry.path)


async def snapshot(
    fs: vfs.FileSystem, paths: list[str]
) -> tuple[list[vfs.DirEntry], dict[str, str | bytes], list[vfs.GrepResult]]:
    """The whole tree in one event-loop call: entries, the contents of ``paths``, a wide grep."""
    entries = await collect_tree(fs)
    contents = {path: await fs.read(path) for path in paths}
    hits = await collect(fs.grep, vfs.GrepQuery("o|a"))
    return entries, contents, hits


class TempMachine(FileSystemMachine):
    def prepare(self, data: st.DataObject) -> Build:
        async def build() -> vfs.FileSystem:
            return vfs.temp_fs()

        return build


class DirMachine(FileSystemMachine):
    def prepare(self, data: st.DataObject) -> Build:
        root = self.temp_dir()

        async def build() -> vfs.FileSystem:
            return vfs.dir_fs(root)

        return build


class HostMachine(FileSystemMachine):
    def prepare(self, data: st.DataObject) -> Build:
        async def build() -> vfs.FileSystem:
            return vfs.host_fs(vfs.InMemoryHostFiles(scope="agent"), "agent")

        return build


class PosixViewMachine(FileSystemMachine):
    def prepare(self, data: st.DataObject) -> Build:
        async def build() -> vfs.FileSystem:
            return vfs.posix_view(DictTree())

        return build


class UnionMachine(FileSystemMachine):
    """A union of a random subset of mount prefixes, each a temp_fs, dir_fs or 8-verb tree."""

    KINDS: ClassVar[list[str]] = ["temp", "dir", "dict"]

    def prepare(self, data: st.DataObject) -> Build:
        prefixes = data.draw(
            st.lists(st.sampled_from(MOUNT_PREFIXES), min_size=1, max_size=4, unique=True)
        )
        kinds = [data.draw(st.sampled_from(self.KINDS)) for _ in prefixes]
        roots = [self.temp_dir() if kind == "dir" else None for kind in kinds]
        self.mounts = sorted(prefixes)

        async def build() -> vfs.FileSystem:
            mounts: dict[str, vfs.FileSystem] = {}
            for prefix, kind, root in zip(prefixes, kinds, roots, strict=True):
                if kind == "temp":
                    mounts[prefix] = vfs.temp_fs()
                elif kind == "dir":
                    mounts[prefix] = vfs.dir_fs(root)
                else:
                    mounts[prefix] = DictTree()
            return vfs.union_fs(mounts)

        return build


MACHINES = {
    "temp": TempMachine,
    "dir": DirMachine,
    "host": HostMachine,
    "posix_view": PosixViewMachine,
    "union": UnionMachine,
}


@pytest.mark.parametrize("name", list(MACHINES))
def test_stateful(name: str) -> None:
    run_state_machine_as_test(MACHINES[name], settings=SETTINGS)
