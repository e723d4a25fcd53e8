"""Checkpoints against a model that keeps full copies: random changes interleaved with
checkpoint, rewind and fork steps.

The model of a tree is a dict ``path -> ("file", bytes) | ("directory",)``; each checkpoint
keeps a full copy of it. Operations (write, mkdir, delete, rename, truncate) run on the tree and
the model alike, and a refused one must be refused by both. After every step each tree (the
first and every fork) equals its model, ``checkpoints()`` lists exactly the numbers the model
kept, and a rule compares ``checkpoint_changes(a, b)`` with the difference of the two copies.
Each checkpoint's summary counts from the state the tree grew from (the checkpoint taken or
rewound to last; a ``temp_fs`` grew from nothing, a cow from its lower): additions and deletions
exactly, modifications and bytes between what changed and what was touched (a file rewritten
with its own bytes counts as modified).

Four trees: a ``temp_fs``, a ``cow_fs`` over a ``dir_fs`` lower (whose host directory must
never change), a ``cow_fs`` over a ``temp_fs`` lower, and a ``cow_fs`` with a durable ``dir_fs``
upper, where a rule also restarts the tree from its upper (every checkpoint must come back).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import vfs
from vfs._paths import is_strictly_under, is_under, join_path, parent_path

from .eightverb import run
from .test_conformance import write_host_tree

T = TypeVar("T")

SEED: dict[str, bytes] = {"/a": b"alpha\n", "/d/b": b"beta\n", "/d/e/c": b"gamma\n"}
DIRS = ("/", "/d", "/d/e", "/f")
NAMES = ("a", "b", "e", "n")
PATHS = tuple(sorted({join_path(d, n) for d in DIRS for n in NAMES} | set(DIRS) - {"/"}))
CONTENTS = (b"", b"x\n", b"new\n", b"alpha\n", b"\x00\xffbinary", b"y" * 5000)

Entry = tuple[Any, ...]
Model = dict[str, Entry]


def seeded() -> Model:
    model: Model = {}
    for path, data in SEED.items():
        probe = parent_path(path)
        while probe != "/":
            model[probe] = ("directory",)
            probe = parent_path(probe)
        model[path] = ("file", data)
    return model


def call(fn: Callable[[], Awaitable[T]]) -> T:
    box: list[T] = []

    async def body() -> None:
        box.append(await fn())

    run("trio", body)
    return box[0]


async def tree_model(tree: vfs.PosixFileSystem) -> Model:
    found: Model = {}
    async for entry in vfs.walk(tree, "/"):
        info = await tree.lstat(entry.path)
        if info.kind == "directory":
            found[entry.path] = ("directory",)
        else:
            file = await tree.open(entry.path)
            try:
                found[entry.path] = ("file", await file.read(0, 1 << 20))
            finally:
                await file.close()
    return found


def model_changes(old: Model, new: Model) -> set[tuple[str, str, str]]:
    """What ``checkpoint_changes`` must say between two copies: (path, kind, entry)."""
    found = set()
    for path in old.keys() | new.keys():
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        if a is None:
            assert b is not None
            found.add((path, "added", b[0]))
        elif b is None:
            found.add((path, "deleted", a[0]))
        else:
            found.add((path, "modified", b[0]))
    return found


def check_summary(summary: vfs.Summary, old: Model, new: Model) -> None:
    """``summary`` of going from ``old`` to ``new`` (see the module docstring)."""
    both = [p for p in old.keys() & new.keys() if not old[p][0] == new[p][0] == "directory"]
    changed = [p for p in both if old[p] != new[p]]
    added = [p for p in new.keys() - old.keys()]
    assert summary.added == len(added)
    assert summary.deleted == len(old.keys() - new.keys())
    assert len(changed) <= summary.modified <= len(both), (summary, changed, both)

    def size(paths: list[str]) -> int:
        return sum(len(new[p][1]) for p in paths if new[p][0] == "file")

    assert size(added + changed) <= summary.bytes <= size(added + both), summary


class _Tree:
    """One live tree of the machine, with its model and its checkpoints' copies."""

    def __init__(self, fs: Any, model: Model, base: Model | None) -> None:
        self.fs = fs
        self.model = model
        self.kept: dict[int, Model] = {}
        self.base = base  # what the next checkpoint's summary counts from (None: unknown)
        self.based: int | None = None  # the checkpoint that is
        self.highest = 0  # numbers are never given twice, pruned or not


class CheckpointModel(RuleBasedStateMachine):
    kind = "temp"

    def __init__(self) -> None:
        super().__init__()
        self.scratch = Path(tempfile.mkdtemp(prefix="checkpoints-model-"))
        self.host: Path | None = None
        if self.kind == "temp":
            fs: Any = vfs.temp_fs(dict(SEED))
        elif self.kind == "cow-dir":
            self.host = write_host_tree(self.scratch / "lower", dict(SEED))
            fs = vfs.cow_fs(vfs.dir_fs(str(self.host), read_only=True))
        elif self.kind == "cow-durable":
            self.host = write_host_tree(self.scratch / "lower", dict(SEED))
            (self.scratch / "upper").mkdir()
            fs = self._durable_cow()
        else:
            fs = vfs.cow_fs(vfs.temp_fs(dict(SEED)))
        self.trees = [_Tree(fs, seeded(), {} if self.kind == "temp" else seeded())]

    def _durable_cow(self) -> Any:
        lower = vfs.dir_fs(str(self.host), read_only=True)
        return vfs.cow_fs(lower, vfs.dir_fs(str(self.scratch / "upper")))

    @precondition(lambda self: self.kind == "cow-durable")
    @rule()
    def restart(self) -> None:
        """A new process over the same upper: every checkpoint, and the tree, come back (and
        the state it grew from, if a checkpoint still holds it)."""
        tree = self.trees[0]
        tree.fs = self._durable_cow()
        if tree.based not in tree.kept:
            tree.base = None

    def teardown(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    # -- the model's rules ------------------------------------------------------------------

    @staticmethod
    def _parent_is_dir(model: Model, path: str) -> bool:
        parent = parent_path(path)
        return parent == "/" or model.get(parent) == ("directory",)

    def _attempt(
        self, tree: _Tree, change: Callable[[], Awaitable[object]], expected: Model | None
    ) -> None:
        try:
            call(change)
        except OSError:
            assert expected is None, "the tree refused what the model allows"
            return
        assert expected is not None, "the tree allowed what the model refuses"
        tree.model = expected

    # -- operations -------------------------------------------------------------------------

    @rule(which=st.integers(0, 2), path=st.sampled_from(PATHS), data=st.sampled_from(CONTENTS))
    def write(self, which: int, path: str, data: bytes) -> None:
        tree = self.trees[which % len(self.trees)]
        model = dict(tree.model)
        expected: Model | None = model
        parts = path[1:].split("/")
        for depth in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:depth])
            if model.get(ancestor, ("directory",)) != ("directory",):
                expected = None
                break
            model[ancestor] = ("directory",)
        if model.get(path) == ("directory",):
            expected = None
        if expected is not None:
            model[path] = ("file", data)
        self._attempt(tree, lambda: tree.fs.write(path, data), expected)

    @rule(which=st.integers(0, 2), path=st.sampled_from(PATHS))
    def mkdir(self, which: int, path: str) -> None:
        tree = self.trees[which % len(self.trees)]
        expected: Model | None = None
        if path not in tree.model and self._parent_is_dir(tree.model, path):
            expected = {**tree.model, path: ("directory",)}
        self._attempt(tree, lambda: tree.fs.mkdir(path), expected)

    @rule(which=st.integers(0, 2), path=st.sampled_from(PATHS))
    def delete(self, which: int, path: str) -> None:
        tree = self.trees[which % len(self.trees)]
        model = tree.model
        expected: Model | None = None
        if path in model and not any(is_strictly_under(p, path) for p in model):
            expected = {p: e for p, e in model.items() if p != path}
        self._attempt(tree, lambda: tree.fs.delete(path), expected)

    @rule(which=st.integers(0, 2), src=st.sampled_from(PATHS), dst=st.sampled_from(PATHS))
    def rename(self, which: int, src: str, dst: str) -> None:
        tree = self.trees[which % len(self.trees)]
        model = tree.model
        source, victim = model.get(src), model.get(dst)
        expected: Model | None = None
        if source is None or not self._parent_is_dir(model, dst):
            expected = None
        elif src == dst:
            expected = dict(model)
        elif source[0] == "file":
            if victim is None or victim[0] == "file":
                expected = {p: e for p, e in model.items() if p != src}
                expected[dst] = source
        elif not is_under(dst, src) and (
            victim is None
            or (victim[0] == "directory" and not any(is_strictly_under(p, dst) for p in model))
        ):
            expected = {}
            for p, e in model.items():
                if is_under(p, src):
                    expected[dst + p[len(src) :]] = e
                elif p != dst:
                    expected[p] = e
        self._attempt(tree, lambda: tree.fs.rename(src, dst), expected)

    @rule(which=st.integers(0, 2), path=st.sampled_from(PATHS), size=st.sampled_from((0, 3, 9000)))
    def truncate(self, which: int, path: str, size: int) -> None:
        tree = self.trees[which % len(self.trees)]
        entry = tree.model.get(path)
        expected: Model | None = None
        if entry is not None and entry[0] == "file":
            data = entry[1][:size] + bytes(max(0, size - len(entry[1])))
            expected = {**tree.model, path: ("file", data)}
        self._attempt(tree, lambda: tree.fs.setattr(path, size=size), expected)

    # -- checkpoints ------------------------------------------------------------------------

    @rule(which=st.integers(0, 2), label=st.sampled_from((None, "kept")))
    def checkpoint(self, which: int, label: str | None) -> None:
        tree = self.trees[which % len(self.trees)]
        record = call(lambda: tree.fs.checkpoint(label))
        assert record.label == label
        assert record.number > tree.highest
        tree.highest = record.number
        if tree.base is not None:
            check_summary(record.summary, tree.base, tree.model)
        tree.kept[record.number] = dict(tree.model)
        tree.base, tree.based = tree.kept[record.number], record.number

    @precondition(lambda self: any(tree.kept for tree in self.trees))
    @rule(which=st.integers(0, 2), pick=st.integers(0, 50))
    def rewind(self, which: int, pick: int) -> None:
        tree = next(t for t in self.trees[which % len(self.trees) :] + self.trees if t.kept)
        numbers = sorted(tree.kept)
        number = numbers[pick % len(numbers)]
        before = dict(tree.model)
        shown = call(lambda: tree.fs.rewind(number))
        assert shown.number == number
        listed = [record.number for record in call(tree.fs.checkpoints)]
        for new in set(listed) - set(tree.kept):  # the state before, recorded by the rewind
            record = call(tree.fs.checkpoints)[-1]
            assert record.label == f"before rewind to {number}"
            assert record.number > tree.highest
            tree.highest = record.number
            if tree.base is not None:
                check_summary(record.summary, tree.base, before)
            tree.kept[new] = before
        tree.model = dict(tree.kept[number])
        tree.base, tree.based = tree.kept[number], number

    @precondition(lambda self: len(self.trees) < 3 and any(tree.kept for tree in self.trees))
    @rule(pick=st.integers(0, 50))
    def fork(self, pick: int) -> None:
        tree = next(t for t in self.trees if t.kept)
        numbers = sorted(tree.kept)
        number = numbers[pick % len(numbers)]
        forked = _Tree(call(lambda: tree.fs.fork(number)), dict(tree.kept[number]), None)
        (first,) = call(forked.fs.checkpoints)
        forked.kept[first.number] = dict(forked.model)
        forked.highest = first.number
        forked.base, forked.based = forked.kept[first.number], first.number
        self.trees.append(forked)

    @precondition(lambda self: any(tree.kept for tree in self.trees))
    @rule(which=st.integers(0, 2), a=st.integers(0, 50), b=st.integers(-1, 50))
    def compare(self, which: int, a: int, b: int) -> None:
        tree = next(t for t in self.trees[which % len(self.trees) :] + self.trees if t.kept)
        numbers = sorted(tree.kept)
        first = numbers[a % len(numbers)]
        second = None if b < 0 else numbers[b % len(numbers)]
        found = call(lambda: tree.fs.checkpoint_changes(first, second))
        then = tree.model if second is None else tree.kept[second]
        assert {(c.path, c.kind, c.entry) for c in found} == model_changes(tree.kept[first], then)

    @precondition(lambda self: any(len(tree.kept) > 2 for tree in self.trees))
    @rule(keep=st.integers(0, 2))
    def prune(self, keep: int) -> None:
        tree = next(t for t in self.trees if len(t.kept) > 2)
        labelled = {r.number for r in call(tree.fs.checkpoints) if r.label is not None}
        gone = call(lambda: tree.fs.prune_checkpoints(keep))
        assert not set(gone) & labelled
        for number in gone:
            del tree.kept[number]

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def trees_equal_their_models(self) -> None:
        for tree in self.trees:
            assert call(lambda fs=tree.fs: tree_model(fs)) == tree.model  # type: ignore[misc]
            assert [r.number for r in call(tree.fs.checkpoints)] == sorted(tree.kept)

    @invariant()
    def the_lower_host_directory_never_changes(self) -> None:
        if self.host is None:
            return
        found = {
            "/" + str(path.relative_to(self.host)): path.read_bytes()
            for path in self.host.rglob("*")
            if path.is_file()
        }
        assert found == SEED


class CowDirCheckpointModel(CheckpointModel):
    kind = "cow-dir"


class CowTempCheckpointModel(CheckpointModel):
    kind = "cow-temp"


class CowDurableCheckpointModel(CheckpointModel):
    kind = "cow-durable"


SETTINGS = settings(
    max_examples=int(os.environ.get("CHECKPOINT_EXAMPLES", "25")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize(
    "machine",
    [CheckpointModel, CowDirCheckpointModel, CowTempCheckpointModel, CowDurableCheckpointModel],
    ids=lambda machine: machine.kind,
)
def test_checkpoints_keep_what_a_full_copy_keeps(machine: type[CheckpointModel]) -> None:
    run_state_machine_as_test(machine, settings=SETTINGS)
