"""cow_fs against a plain model: random POSIX operations over a seeded lower tree.

The model is a dict ``path -> ("file", bytes, mode) | ("directory", mode)`` that starts as the
seed and follows POSIX rules (the errno of every refused operation is checked against it). After
every step: the merged tree equals the model, the lower is byte-identical to the seed, and
``changes()`` says exactly how the model differs from the seed. A rule applies the changes into a
fresh copy of the seed, which must then equal the model.

Two lowers: ``temp_fs`` (upper in memory), and a read-only ``dir_fs`` on a host directory with a
durable ``dir_fs`` upper, where a rule also restarts the tree from its upper (the record must
bring back every whiteout, base and origin).
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import vfs
from vfs._cow import CowFileSystem, cow_fs
from vfs._paths import is_strictly_under, is_under, join_path, parent_path

from .eightverb import BACKENDS
from .test_conformance import write_host_tree
from .test_cow import tree_state

SEED: dict[str, str | bytes] = {
    "/a.txt": "alpha\n",
    "/b.txt": "beta\n",
    "/d/x.txt": "x\n",
    "/d/y.txt": "y\n",
    "/d/sub/z.txt": "z\n",
    "/e/k.txt": "k\n",
}
DIRS = ("/", "/d", "/d/sub", "/e", "/f", "/d/sub/g")
NAMES = ("a.txt", "x.txt", "z.txt", "sub", "n")
PATHS = tuple(sorted({join_path(d, n) for d in DIRS for n in NAMES} | set(DIRS) - {"/"}))
CONTENTS = (b"", b"x\n", b"new\n", b"alpha\n", b"\x00\xffbinary")

Model = dict[str, tuple[Any, ...]]


def _errno_of(error: BaseException) -> int:
    assert isinstance(error, OSError), repr(error)
    assert error.errno is not None
    return error.errno


class CowModel(RuleBasedStateMachine):
    backend = "trio"
    durable = False

    def __init__(self) -> None:
        super().__init__()
        self.scratch = Path(tempfile.mkdtemp(prefix="cow-model-"))
        self.copies = 0
        if self.durable:
            host = write_host_tree(self.scratch / "lower", SEED)
            (self.scratch / "upper").mkdir()
            self.lower: vfs.PosixFileSystem = vfs.dir_fs(host, read_only=True)
        else:
            self.lower = vfs.temp_fs(dict(SEED))
        self.cow = self.make_cow()
        self.seed: Model = self.call(lambda: tree_state(self.lower))  # type: ignore[assignment]
        self.model: Model = dict(self.seed)

    def make_cow(self) -> CowFileSystem:
        if self.durable:
            return cow_fs(self.lower, vfs.dir_fs(self.scratch / "upper"))
        return cow_fs(self.lower)

    def teardown(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def call(self, fn: Callable[[], Awaitable[object]]) -> object:
        box: list[object] = []

        async def main() -> None:
            box.append(await fn())

        anyio.run(main, backend=self.backend)
        return box[0]

    def attempt(self, fn: Callable[[], Awaitable[object]], expected: int | None) -> None:
        """Run ``fn``; it must fail with errno ``expected`` or, when ``None``, succeed."""
        if expected is None:
            self.call(fn)
            return
        with pytest.raises(OSError) as caught:
            self.call(fn)
        assert _errno_of(caught.value) == expected, caught.value

    # -- the model --------------------------------------------------------------------------

    def kind(self, path: str) -> str:
        if path == "/":
            return "directory"
        entry = self.model.get(path)
        return "missing" if entry is None else str(entry[0])

    def parent_error(self, path: str) -> int | None:
        """What resolving ``path``'s parent answers: ENOENT, ENOTDIR or nothing."""
        ancestors = []
        probe = path
        while probe != "/":
            probe = parent_path(probe)
            ancestors.append(probe)
        for ancestor in reversed(ancestors):
            kind = self.kind(ancestor)
            if kind == "missing":
                return errno.ENOENT
            if kind != "directory":
                return errno.ENOTDIR
        return None

    def children(self, path: str) -> list[str]:
        return [p for p in self.model if parent_path(p) == path and p != path]

    def some_path(self, data: st.DataObject, label: str) -> str:
        existing = sorted(p for p in self.model if p != "/")
        choices = st.sampled_from(PATHS)
        if existing:
            choices = st.sampled_from(existing) | choices
        return data.draw(choices, label=label)

    # -- rules ------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        assert self.model == self.seed

    @rule(data=st.data(), contents=st.sampled_from(CONTENTS))
    def write(self, data: st.DataObject, contents: bytes) -> None:
        path = self.some_path(data, "path")
        cow = self.cow
        expected = None
        probe = path
        ancestors = []
        while probe != "/":
            probe = parent_path(probe)
            ancestors.append(probe)
        for ancestor in reversed(ancestors):
            if self.kind(ancestor) not in ("missing", "directory"):
                expected = errno.ENOTDIR
                break
        if expected is None and self.kind(path) == "directory":
            expected = errno.EISDIR
        self.attempt(lambda: cow.write(path, contents), expected)
        if expected is None:
            for ancestor in ancestors:
                if ancestor != "/" and ancestor not in self.model:
                    self.model[ancestor] = ("directory", 0o755)
            mode = self.model[path][2] if path in self.model else 0o644
            self.model[path] = ("file", contents, mode)

    @rule(data=st.data(), contents=st.sampled_from(CONTENTS), offset=st.sampled_from([0, 1, 4]))
    def pwrite(self, data: st.DataObject, contents: bytes, offset: int) -> None:
        path = self.some_path(data, "path")
        cow = self.cow
        expected = self.parent_error(path)
        if expected is None and self.kind(path) == "directory":
            expected = errno.EISDIR

        async def go() -> None:
            file = await cow.open(path, write=True, create=True)
            try:
                await file.write(offset, contents)
            finally:
                await file.close()

        self.attempt(go, expected)
        if expected is None:
            old, mode = (
                (self.model[path][1], self.model[path][2]) if path in self.model else (b"", 0o644)
            )
            if contents:
                old = old.ljust(offset, b"\0")
                old = old[:offset] + contents + old[offset + len(contents) :]
            self.model[path] = ("file", old, mode)

    @rule(data=st.data(), size=st.sampled_from([0, 1, 3]))
    def truncate(self, data: st.DataObject, size: int) -> None:
        path = self.some_path(data, "path")
        cow = self.cow
        kind = self.kind(path)
        expected = self.parent_error(path)
        if expected is None and kind == "missing":
            expected = errno.ENOENT
        if expected is None and kind == "directory":
            expected = errno.EISDIR
        self.attempt(lambda: cow.setattr(path, size=size), expected)
        if expected is None:
            _, old, mode = self.model[path]
            self.model[path] = ("file", old[:size].ljust(size, b"\0"), mode)

    @rule(data=st.data(), mode=st.sampled_from([0o600, 0o644, 0o755]))
    def chmod(self, data: st.DataObject, mode: int) -> None:
        path = self.some_path(data, "path")
        cow = self.cow
        kind = self.kind(path)
        expected = self.parent_error(path)
        if expected is None and kind == "missing":
            expected = errno.ENOENT
        self.attempt(lambda: cow.setattr(path, mode=mode), expected)
        if expected is None:
            self.model[path] = (*self.model[path][:-1], mode)

    @rule(data=st.data())
    def unlink(self, data: st.DataObject) -> None:
        path = self.some_path(data, "path")
        cow = self.cow
        expected = self.parent_error(path)
        kind = self.kind(path)
        if expected is None and kind == "missing":
            expected = errno.ENOENT
        if expected is None and kind == "directory":
            expected = errno.EISDIR
        self.attempt(lambda: cow.unlink(path), expected)
        if expected is None:
            del self.model[path]

    @rule(data=st.data())
    def rmdir(self, data: st.DataObject) -> None:
        path = self.some_path(data, "path")
        cow = self.cow
        expected = self.parent_error(path)
        kind = self.kind(path)
        if expected is None and kind == "missing":
            expected = errno.ENOENT
        if expected is None and kind != "directory":
            expected = errno.ENOTDIR
        if expected is None and self.children(path):
            expected = errno.ENOTEMPTY
        self.attempt(lambda: cow.rmdir(path), expected)
        if expected is None:
            del self.model[path]

    @rule(data=st.data())
    def mkdir(self, data: st.DataObject) -> None:
        path = self.some_path(data, "path")
        cow = self.cow
        expected = self.parent_error(path)
        if expected is None and self.kind(path) != "missing":
            expected = errno.EEXIST
        self.attempt(lambda: cow.mkdir(path, 0o755), expected)
        if expected is None:
            self.model[path] = ("directory", 0o755)

    @rule(data=st.data(), noreplace=st.booleans())
    def rename(self, data: st.DataObject, noreplace: bool) -> None:
        src = self.some_path(data, "src")
        dst = self.some_path(data, "dst")
        cow = self.cow
        expected = self.parent_error(src) or self.parent_error(dst)
        source, victim = self.kind(src), self.kind(dst)
        if expected is None and source == "missing":
            expected = errno.ENOENT
        if expected is None and victim != "missing" and noreplace:
            expected = errno.EEXIST
        if expected is None and src != dst:
            if source == "directory" and is_strictly_under(dst, src):
                expected = errno.EINVAL
            elif victim == "directory" and is_strictly_under(src, dst):
                expected = errno.ENOTEMPTY
            elif victim != "missing":
                if source == "directory" and victim != "directory":
                    expected = errno.ENOTDIR
                elif source != "directory" and victim == "directory":
                    expected = errno.EISDIR
                elif victim == "directory" and self.children(dst):
                    expected = errno.ENOTEMPTY
        self.attempt(lambda: cow.rename(src, dst, noreplace=noreplace), expected)
        if expected is None and src != dst:
            moved = {p: v for p, v in self.model.items() if is_under(p, src)}
            for p in list(self.model):
                if is_under(p, src) or is_under(p, dst):
                    del self.model[p]
            for p, v in moved.items():
                self.model[dst + p[len(src) :]] = v

    @rule()
    def apply_into_a_copy(self) -> None:
        self.copies += 1
        if self.durable:
            host = write_host_tree(self.scratch / f"copy{self.copies}", SEED)
            target: vfs.PosixFileSystem = vfs.dir_fs(host)
        else:
            target = vfs.temp_fs(dict(SEED))
        cow = self.cow
        self.call(lambda: cow.apply(target=target))
        assert self.call(lambda: tree_state(target)) == self.model

    @precondition(lambda self: self.durable)
    @rule()
    def restart(self) -> None:
        self.cow = self.make_cow()

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def the_merged_tree_is_the_model(self) -> None:
        cow = self.cow
        assert self.call(lambda: tree_state(cow)) == self.model

    @invariant()
    def the_lower_is_untouched(self) -> None:
        lower = self.lower
        assert self.call(lambda: tree_state(lower)) == self.seed

    @invariant()
    def changes_say_how_the_model_differs_from_the_seed(self) -> None:
        cow = self.cow

        async def listing() -> list[vfs._cow_meta.TreeChange]:
            return [change async for change in cow.changes()]

        changes: list[vfs._cow_meta.TreeChange] = self.call(listing)  # type: ignore[assignment]
        assert [c.path for c in changes] == sorted({c.path for c in changes})
        reported = {c.path: c for c in changes}
        old_paths = {c.old_path for c in changes if c.kind == "renamed"}
        for path in sorted(set(self.model) | set(self.seed)):
            now, was = self.model.get(path), self.seed.get(path)
            change = reported.get(path)
            if was is None:
                assert change is not None and change.kind in ("added", "renamed"), path
                assert change.entry == now[0]  # type: ignore[index]
                if change.kind == "renamed":
                    assert change.old_path in self.seed and change.old_path not in self.model
                    assert self.seed[change.old_path][0] == now[0]  # type: ignore[index]
            elif now is None:
                assert (change is not None and change.kind == "deleted") or path in old_paths, path
            elif now[0] != was[0] or (now[0] == "file" and now[1] != was[1]):
                assert change is not None and change.kind == "modified", path
            elif now[-1] != was[-1]:
                assert change is not None and change.kind == "mode_changed", path
            else:
                assert change is None, path


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("durable", [False, True], ids=["temp_lower", "dir_lower"])
def test_cow_matches_a_model(backend: str, durable: bool) -> None:
    machine = type("CowModelRun", (CowModel,), {"backend": backend, "durable": durable})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=20 if durable else 30,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
