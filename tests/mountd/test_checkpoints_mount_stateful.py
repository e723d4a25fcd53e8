"""Checkpoints through a real mount, against a model that keeps full copies: random file
operations through the mount and through the served tree's API, interleaved with checkpoint,
rewind and fork steps, while descriptors opened through the mount are held across them.

Theory of operation
-------------------
Each example serves a fresh tree at a real FUSE mount from a thread of this process (a trio loop
running :func:`mountd.mounted` and the daemon's control channel), so a step can reach the tree
three ways: system calls on the mount (from the test's thread), the served tree's Python API
(``trio.from_thread``), and the control channel, by request and by the ``mountd checkpoint``
command line. Two trees: a ``temp_fs``, and what ``mountd mount`` serves by default (a turn root
over an audited cow over a host directory, its upper a session directory on disk).

The model of a tree is a dict ``path -> entry``: ``("dir",)``, ``("file", bytes, ident, ino,
upper)`` or ``("symlink", target, ident, ino, upper)``. ``ino`` is the file the mount's kernel
knows: a held descriptor follows it (writes in place show, renames through the mount carry it
along). ``ident`` changes with every change of the entry (a new node, a write, a rename), and
``upper`` says whether a cow's upper holds it (an untouched lower file does not): they are what
a checkpoint's summary counts from (``vfs._checkpoints``: a ``temp_fs`` counts the entries
whose frozen node changed; a durable cow the entries of its upper that changed, by kind, size,
modification time and bytes, which the model reads from the tree at each checkpoint).
Each checkpoint keeps a full copy of the model.

A held descriptor is *attached* (it reads what its file holds now), *kept* (its name was taken
away by a rename over it or an unlink through the mount, or by a rewind however asked for,
and it keeps the bytes it had, as on tmpfs) or *lost* (its name was taken away behind the
mount's back by another API change, where nothing gave it a keeper: it reads ``ESTALE``, as
``mountd._ops`` documents, or the pages the kernel still had). A rewind replaces a held file
whose bytes differ between the two states; where they are the same, the tree may keep the file
or replace it (a ``temp_fs`` replaces exactly the nodes that changed, which the model predicts;
a durable cow the upper's entries whose bytes or time differ), and the descriptor's link count
says which. Files are also overwritten with the bytes they hold, since such a file is replaced
by a rewind all the same.

After every step: the whole tree through the mount and through the API equals the model; every
held descriptor reads what the model says; every fork equals its model; the checkpoints listing
has the model's numbers, labels and summaries; and the lower host directory never changes.

Soak with e.g. ``CHECKPOINT_MOUNT_EXAMPLES=400``.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import vfs
from mountd import _control as control
from mountd import _registry as registry
from mountd import mounted
from mountd._daemon import _start_control
from vfs._paths import is_strictly_under, is_under, join_path, parent_path

from .sandbox_trees import default_mount
from .test_checkpoints_mount import checkpoint as checkpoint_command
from .test_cli import private_state

__all__ = ["private_state"]  # the autouse fixture: the control socket lives in a private directory

T = TypeVar("T")

EXAMPLES = int(os.environ.get("CHECKPOINT_MOUNT_EXAMPLES", "40"))
STEPS = int(os.environ.get("CHECKPOINT_MOUNT_STEPS", "30"))

# (generous: a step costs milliseconds here, a command-line step a Python start)
pytestmark = [pytest.mark.mount, pytest.mark.timeout(300 + EXAMPLES * STEPS // 4)]

SEED: dict[str, bytes] = {"/a": b"alpha\n", "/d/b": b"beta\n", "/d/e/c": b"gamma\n" * 900}
DIRS = ("/d", "/d/e", "/f")
NAMES = ("a", "b", "c")
FILES = tuple(join_path(d, n) for d in ("/", *DIRS) for n in NAMES)
# Symlinks live only at these names, which no other path goes through: a path's ancestors are
# always real directories or missing, never a link to follow.
LINKS = ("/l", "/d/l")
PATHS = (*DIRS, *FILES, *LINKS)
CONTENTS = (b"", b"x\n", b"alpha\n", b"beta\n", b"\x00\xffbinary", b"y" * 5000)
TARGETS = ("a", "../a", "missing")
SCRATCH = "/tmp"  # the default tree's turn scratch: never checkpointed, never compared

Entry = tuple[Any, ...]
Model = dict[str, Entry]


def kind(entry: Entry | None) -> str | None:
    return None if entry is None else str(entry[0])


# --- the mount, served from a thread of this process ------------------------------------------


class LiveMount:
    """``tree`` served at ``mnt`` by a trio loop in a thread, with the daemon's control channel."""

    def __init__(self, tree: Any, mnt: Path) -> None:
        self.tree = tree
        self.mnt = mnt
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._thread = threading.Thread(target=self._run, name="mount", daemon=True)
        self._thread.start()
        if not self._ready.wait(60) or self._token is None:
            raise RuntimeError(f"the mount at {mnt} did not come up: {self._error!r}")

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # reported by close()
            self._error = error
        finally:
            self._ready.set()

    async def _main(self) -> None:
        async with mounted(self.tree, str(self.mnt)) as mount, trio.open_nursery() as nursery:
            await _start_control(nursery, mount, None)
            self._scope = nursery.cancel_scope
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await trio.sleep_forever()

    def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()`` on the mount's loop (the served tree's API)."""
        return trio.from_thread.run(fn, trio_token=self._token)

    def close(self) -> None:
        if self._scope is not None:
            trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the mount did not stop"
        if self._error is not None:
            raise self._error


# --- reading a tree whole ----------------------------------------------------------------------


def mount_view(mnt: Path) -> dict[str, object]:
    """Every entry under ``mnt``: ``("dir",)``, ``("file", bytes)`` or ``("symlink", target)``."""
    found: dict[str, object] = {}

    def visit(directory: Path, path: str) -> None:
        for name in sorted(os.listdir(directory)):
            child, where = directory / name, join_path(path, name)
            if where == SCRATCH:
                continue
            mode = os.lstat(child).st_mode
            if stat.S_ISDIR(mode):
                found[where] = ("dir",)
                visit(child, where)
            elif stat.S_ISLNK(mode):
                found[where] = ("symlink", os.readlink(child))
            else:
                found[where] = ("file", child.read_bytes())

    visit(mnt, "/")
    return found


async def api_view(tree: Any) -> dict[str, object]:
    found: dict[str, object] = {}
    async for entry in vfs.walk(tree, "/"):
        if is_under(entry.path, SCRATCH):
            continue
        info = await tree.lstat(entry.path)
        if info.kind == "directory":
            found[entry.path] = ("dir",)
        elif info.kind == "symlink":
            found[entry.path] = ("symlink", await tree.readlink(entry.path))
        else:
            file = await tree.open(entry.path)
            try:
                found[entry.path] = ("file", await file.read(0, 1 << 20))
            finally:
                await file.close()
    return found


def shown(model: Model) -> dict[str, object]:
    return {path: entry[:2] for path, entry in model.items()}


async def mtimes(tree: Any, model: Model) -> dict[str, int]:
    """The modification time of each file and symlink of the tree (a durable checkpoint's
    manifest holds it: a file rewritten with the same bytes is a change when it moved)."""
    found = {}
    for path, entry in model.items():
        if entry[0] != "dir":
            found[path] = (await tree.lstat(path)).mtime_ns
    return found


def host_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
        digest.update(oct(path.lstat().st_mode).encode())
    return digest.hexdigest()


# --- the model ---------------------------------------------------------------------------------


@dataclass
class Kept:
    """One checkpoint in the model: a full copy, and the times the tree showed then."""

    model: Model
    times: dict[str, int]
    label: str | None
    summary: tuple[int, int, int, int]


@dataclass
class Held:
    """A descriptor opened through the mount and held (see the module docstring)."""

    fd: int
    ino: int
    state: str = "attached"  # attached | kept | lost
    data: bytes = b""


@dataclass
class Fork:
    tree: Any
    model: Model
    labels: list[str | None] = field(default_factory=list)


class MountCheckpointModel(RuleBasedStateMachine):
    durable = False

    def __init__(self) -> None:
        super().__init__()
        self.scratch = Path(tempfile.mkdtemp(prefix="checkpoints-mount-"))
        self.counter = itertools.count(len(SEED) + 1)
        self.model = seeded_model(self.durable)
        self.host: Path | None = None
        if self.durable:
            self.host = self.scratch / "project"
            for path, data in SEED.items():
                (self.host / path[1:]).parent.mkdir(parents=True, exist_ok=True)
                (self.host / path[1:]).write_bytes(data)
            self.host_hash = host_digest(self.host)
            upper = self.scratch / "session" / "upper"
            upper.mkdir(parents=True)
            tree: Any = default_mount(str(self.host), str(upper))
        else:
            tree = vfs.temp_fs(dict(SEED))
        mnt = self.scratch / "mnt"
        mnt.mkdir()
        self.canonical = registry.canonical(mnt)
        self.live = LiveMount(tree, mnt)
        self.mnt = mnt
        self.kept: dict[int, Kept] = {}
        self.base: Kept | None = None  # what a checkpoint counts from: taken or rewound to last
        self.held: list[Held] = []
        self.forks: list[Fork] = []

    def teardown(self) -> None:
        try:
            for held in self.held:
                os.close(held.fd)
            self.live.close()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    # -- helpers ----------------------------------------------------------------------------

    def api(self, fn: Callable[[], Awaitable[T]]) -> T:
        return self.live.call(fn)

    @property
    def tree(self) -> Any:
        return self.live.tree

    def fresh(self) -> int:
        return next(self.counter)

    def real(self, path: str) -> str:
        return str(self.mnt / path.lstrip("/"))

    @staticmethod
    def parent_is_dir(model: Model, path: str) -> bool:
        parent = parent_path(path)
        return parent == "/" or model.get(parent) == ("dir",)

    def attempt(self, change: Callable[[], object], expected: Model | None) -> bool:
        """Run ``change``; a refused one must be refused by the model too. True if it ran."""
        try:
            change()
        except OSError as error:
            assert expected is None, f"the tree refused what the model allows: {error!r}"
            return False
        assert expected is not None, "the tree allowed what the model refuses"
        self.model = expected
        return True

    def changed(self, model: Model, path: str, data: bytes) -> None:
        """The file at ``path`` now holds ``data``, written in place (the same file)."""
        entry = model.get(path)
        if entry is None:
            fresh = self.fresh()
            model[path] = ("file", data, fresh, fresh, True)
        else:
            model[path] = ("file", data, self.fresh(), entry[3], True)

    def taken(self, inos: set[int], how: str, model: Model) -> None:
        """The files ``inos`` of ``model`` lost their names: ``kept`` (a keeper) or ``lost``."""
        for held in self.held:
            if held.state == "attached" and held.ino in inos:
                held.state = how
                held.data = self.data_of(held.ino, model)

    def data_of(self, ino: int, model: Model | None = None) -> bytes:
        for entry in (self.model if model is None else model).values():
            if entry[0] == "file" and entry[3] == ino:
                data: bytes = entry[1]
                return data
        raise AssertionError(f"no file {ino} in the model")

    @staticmethod
    def inos(model: Model, paths: set[str] | None = None) -> set[int]:
        return {e[3] for p, e in model.items() if e[0] == "file" and (paths is None or p in paths)}

    # -- file operations --------------------------------------------------------------------

    def written(self, model: Model, path: str, data: bytes, *, parents: bool) -> Model | None:
        """``model`` after a write of ``data`` at ``path`` (``None``: refused); the API makes
        missing parents (``parents``), a write through the mount does not."""
        model = dict(model)
        parts = path[1:].split("/")
        for depth in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:depth])
            if kind(model.get(ancestor)) == "dir":
                continue
            if kind(model.get(ancestor)) is not None or not parents:
                return None
            model[ancestor] = ("dir",)
        if kind(model.get(path)) == "dir":
            return None
        self.changed(model, path, data)
        return model

    @rule(
        via=st.sampled_from(("mount", "api")),
        path=st.sampled_from(FILES),
        data=st.sampled_from(CONTENTS),
    )
    def write(self, via: str, path: str, data: bytes) -> None:
        expected = self.written(self.model, path, data, parents=via == "api")
        self.write_through(via, path, data, expected)

    @precondition(lambda self: bool(self.files()))
    @rule(
        via=st.sampled_from(("mount", "api")),
        pick=st.integers(0, 20),
        hold=st.booleans(),
        checkpoint_first=st.booleans(),
    )
    def overwrite(self, via: str, pick: int, hold: bool, checkpoint_first: bool) -> None:
        """Write a file with the bytes it holds: a change all the same (a new node for a
        ``temp_fs``, a copy in a cow's upper, a new modification time), maybe just after a
        checkpoint; then maybe hold it open, as an editor that saved it."""
        if checkpoint_first:
            self.checkpoint("api", None)
        path = self.files()[pick % len(self.files())]
        data = self.model[path][1]
        self.write_through(via, path, data, self.written(self.model, path, data, parents=False))
        if hold and len(self.held) < 4:
            self.hold(path, -1)

    def files(self) -> list[str]:
        return sorted(p for p, e in self.model.items() if e[0] == "file")

    def write_through(self, via: str, path: str, data: bytes, expected: Model | None) -> None:
        if via == "mount":

            def change() -> None:
                fd = os.open(self.real(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    assert os.write(fd, data) == len(data)
                finally:
                    os.close(fd)

            self.attempt(change, expected)
        else:
            self.attempt(lambda: self.api(lambda: self.tree.write(path, data)), expected)

    @rule(path=st.sampled_from(FILES), data=st.sampled_from(CONTENTS[1:]))
    def append(self, path: str, data: bytes) -> None:
        entry = self.model.get(path)
        expected: Model | None = None
        if kind(entry) == "file":
            assert entry is not None
            expected = dict(self.model)
            self.changed(expected, path, entry[1] + data)

        def change() -> None:
            fd = os.open(self.real(path), os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

        self.attempt(change, expected)

    @rule(
        via=st.sampled_from(("mount", "api")),
        path=st.sampled_from(FILES),
        size=st.sampled_from((0, 3, 9000)),
    )
    def truncate(self, via: str, path: str, size: int) -> None:
        entry = self.model.get(path)
        expected: Model | None = None
        if kind(entry) == "file":
            assert entry is not None
            expected = dict(self.model)
            self.changed(expected, path, entry[1][:size] + bytes(max(0, size - len(entry[1]))))
        if via == "mount":
            self.attempt(lambda: os.truncate(self.real(path), size), expected)
        else:
            self.attempt(lambda: self.api(lambda: self.tree.setattr(path, size=size)), expected)

    @rule(via=st.sampled_from(("mount", "api")), path=st.sampled_from(DIRS + FILES[:3]))
    def mkdir(self, via: str, path: str) -> None:
        expected: Model | None = None
        if path not in self.model and self.parent_is_dir(self.model, path):
            expected = {**self.model, path: ("dir",)}
        if via == "mount":
            self.attempt(lambda: os.mkdir(self.real(path)), expected)
        else:
            self.attempt(lambda: self.api(lambda: self.tree.mkdir(path)), expected)

    @rule(via=st.sampled_from(("mount", "api")), path=st.sampled_from(PATHS))
    def remove(self, via: str, path: str) -> None:
        model = self.model
        entry = model.get(path)
        expected: Model | None = None
        if entry is not None and not any(is_strictly_under(p, path) for p in model):
            expected = {p: e for p, e in model.items() if p != path}
        gone = self.inos(model, {path})
        if via == "mount":
            remove = os.rmdir if kind(entry) == "dir" else os.unlink
            if self.attempt(lambda: remove(self.real(path)), expected):
                self.taken(gone, "kept", model)  # an unlink through the mount takes a keeper
        elif self.attempt(lambda: self.api(lambda: self.tree.delete(path)), expected):
            self.taken(gone, "lost", model)

    @rule(
        via=st.sampled_from(("mount", "api")),
        src=st.sampled_from(PATHS),
        dst=st.sampled_from(PATHS),
    )
    def rename(self, via: str, src: str, dst: str) -> None:
        model = self.model
        source = model.get(src)
        if kind(source) == "symlink":  # symlinks stay at their names (see LINKS)
            dst = join_path(parent_path(dst), "l")
        victim = model.get(dst)
        expected: Model | None = None
        if source is None or not self.parent_is_dir(model, dst):
            expected = None
        elif src == dst:
            expected = dict(model)
        elif source[0] != "dir":
            if kind(victim) in (None, "file", "symlink"):
                expected = {p: e for p, e in model.items() if p != src}
                expected[dst] = (*source[:2], self.fresh(), source[3], True)
        elif not is_under(dst, src) and (
            victim is None
            or (victim[0] == "dir" and not any(is_strictly_under(p, dst) for p in model))
        ):
            expected = {}
            for p, e in model.items():
                if is_under(p, src):
                    moved = e if e[0] == "dir" else (*e[:4], True)
                    expected[dst + p[len(src) :]] = moved
                elif p != dst:
                    expected[p] = e
        before = self.inos(model)
        if via == "mount":
            if self.attempt(lambda: os.rename(self.real(src), self.real(dst)), expected):
                # A rename over a file the kernel knows takes a keeper of it.
                self.taken(before - self.inos(self.model), "kept", model)
        elif src != dst and self.attempt(
            lambda: self.api(lambda: self.tree.rename(src, dst)), expected
        ):
            # Behind the mount's back: the kernel's files at both names are gone (the next
            # lookup finds new ones).
            moved = {p for p in model if is_under(p, src) or p == dst}
            self.taken(self.inos(model, moved), "lost", model)
            for path, entry in list(self.model.items()):
                if entry[0] == "file" and is_under(path, dst):
                    self.model[path] = (*entry[:3], self.fresh(), entry[4])

    @rule(
        via=st.sampled_from(("mount", "api")),
        path=st.sampled_from(LINKS),
        to=st.sampled_from(TARGETS),
    )
    def symlink(self, via: str, path: str, to: str) -> None:
        expected: Model | None = None
        if path not in self.model and self.parent_is_dir(self.model, path):
            fresh = self.fresh()
            expected = {**self.model, path: ("symlink", to, fresh, fresh, True)}
        if via == "mount":
            self.attempt(lambda: os.symlink(to, self.real(path)), expected)
        else:
            self.attempt(lambda: self.api(lambda: self.tree.symlink(path, to)), expected)

    # -- held descriptors -------------------------------------------------------------------

    @precondition(lambda self: len(self.held) < 4)
    @rule(path=st.sampled_from(FILES), pick=st.integers(-20, 20))
    def hold(self, path: str, pick: int) -> None:
        """Open ``path``, or (``pick`` >= 0) one of the files there are, and hold it."""
        if pick >= 0 and self.files():
            path = self.files()[pick % len(self.files())]
        entry = self.model.get(path)
        try:
            fd = os.open(self.real(path), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as error:
            assert kind(entry) != "file", f"opening {path} failed: {error!r}"
            return
        if kind(entry) != "file":
            os.close(fd)
            assert kind(entry) == "dir", f"{path} opened, but the model has {entry}"
            return
        assert entry is not None
        self.held.append(Held(fd, entry[3]))

    @precondition(lambda self: bool(self.held))
    @rule(pick=st.integers(0, 10))
    def let_go(self, pick: int) -> None:
        held = self.held.pop(pick % len(self.held))
        os.close(held.fd)

    # -- checkpoints ------------------------------------------------------------------------

    def summary(
        self, old: Kept | None, new: Model, times: dict[str, int]
    ) -> tuple[int, int, int, int]:
        """What a checkpoint of ``new`` counts since ``old`` (see the module docstring)."""
        before: Model = old.model if old is not None else seeded_model(True) if self.durable else {}
        then_times = {} if old is None else old.times
        added = modified = deleted = size = 0
        for path in before.keys() | new.keys():
            a, b = before.get(path), new.get(path)
            if kind(a) == kind(b) == "dir" or a is b is None:
                continue
            if a is not None and b is not None and kind(a) == kind(b):
                if self.durable:
                    # (a manifest holds a file's time, not a symlink's)
                    same = (a[4], b[4]) == (False, False) or (
                        a[4] == b[4]
                        and a[1] == b[1]
                        and (a[0] == "symlink" or then_times.get(path) == times.get(path))
                    )
                else:
                    same = a[2] == b[2]
                if same:
                    continue
            if b is None:
                deleted += 1
                continue
            if a is None:
                added += 1
            else:
                modified += 1
            if b[0] == "file":
                size += len(b[1])
        return added, modified, deleted, size

    def take(self, via: str, label: str | None) -> dict[str, Any]:
        if via == "api":
            record = self.api(lambda: self.tree.checkpoint(label))
            return control.describe_checkpoint(record)
        if via == "control":
            payload: dict[str, Any] = {"op": "checkpoint", "action": "take"}
            if label is not None:
                payload["label"] = label
            reply = control.request(self.canonical, payload)
            assert reply["ok"], reply
            return dict(reply["checkpoint"])
        words = [self.canonical] + ([] if label is None else ["--label", label])
        return dict(checkpoint_command(*words, cwd=self.scratch)["checkpoint"])

    @rule(
        via=st.sampled_from(("api", "api", "control", "control", "cli")),
        label=st.sampled_from((None, "kept")),
    )
    def checkpoint(self, via: str, label: str | None) -> None:
        times = self.api(lambda: mtimes(self.tree, self.model))
        expected = self.summary(self.base, self.model, times)
        record = self.take(via, label)
        assert record["label"] == label
        assert record["number"] not in self.kept
        assert all(record["number"] > n for n in self.kept)
        self.kept[record["number"]] = self.base = Kept(dict(self.model), times, label, expected)

    @precondition(lambda self: bool(self.kept))
    @rule(via=st.sampled_from(("api", "control", "control", "cli")), pick=st.integers(-1, 50))
    def rewind(self, via: str, pick: int) -> None:
        """Rewind to a checkpoint (``pick`` -1: the newest)."""
        numbers = sorted(self.kept)
        number = numbers[pick % len(numbers)]
        before = dict(self.model)
        times = self.api(lambda: mtimes(self.tree, self.model))
        base = self.base
        if via == "api":
            self.api(lambda: self.tree.rewind(number))
        elif via == "control":
            reply = control.request(
                self.canonical, {"op": "checkpoint", "action": "rewind", "number": number}
            )
            assert reply["ok"], reply
            assert reply["checkpoint"]["number"] == number
        else:
            reply = checkpoint_command("rewind", self.canonical, str(number), cwd=self.scratch)
            assert reply["checkpoint"]["number"] == number
        listed = self.api(self.tree.checkpoints)
        recorded = [r for r in listed if r.number not in self.kept]
        if all(shown(k.model) != shown(before) for k in self.kept.values()):
            assert recorded, "the rewind lost the state before it"
        for record in recorded:  # the state before, recorded by the rewind
            assert record.label == f"before rewind to {number}"
            summary = self.summary(base, before, times)
            self.kept[record.number] = Kept(before, times, record.label, summary)
        target = self.kept[number].model
        self.base = self.kept[number]
        # Held descriptors: a file the rewind replaced keeps its old bytes through a keeper,
        # given by the control channel; one it left alone is the same file (only where the
        # bytes are the same can it be either: the descriptor says which). However the rewind
        # is asked for: the tree tells the mount before it changes (Checkpoints.on_rewind).
        after: Model = {}
        by_path = {p: e[3] for p, e in before.items() if e[0] == "file"}
        stays: dict[str, int] = {}
        for held in self.held:
            if held.state != "attached":
                continue
            path = next(p for p, ino in by_path.items() if ino == held.ino)
            then = target.get(path)
            if kind(then) == "file" and then is not None and then[1] == before[path][1]:
                links = os.fstat(held.fd).st_nlink
                if not self.durable:  # a temp_fs keeps exactly the nodes that did not change
                    assert bool(links) == (then[2] == before[path][2]), (path, links)
                if links:
                    stays[path] = held.ino
                    continue
            held.state = "kept"
            held.data = before[path][1]
        for path, entry in target.items():
            if entry[0] == "file":
                after[path] = (*entry[:3], stays.get(path, self.fresh()), entry[4])
            else:
                after[path] = entry
        self.model = after

    @precondition(lambda self: bool(self.kept) and len(self.forks) < 2)
    @rule(pick=st.integers(0, 50))
    def fork(self, pick: int) -> None:
        numbers = sorted(self.kept)
        number = numbers[pick % len(numbers)]
        tree = self.api(lambda: self.tree.fork(number))
        self.forks.append(Fork(tree, dict(self.kept[number].model), [f"fork of {number}"]))

    @precondition(lambda self: bool(self.forks))
    @rule(
        which=st.integers(0, 1),
        path=st.sampled_from(FILES),
        data=st.sampled_from(CONTENTS),
        then_checkpoint=st.booleans(),
    )
    def fork_write(self, which: int, path: str, data: bytes, then_checkpoint: bool) -> None:
        """A write into a fork, and a checkpoint of the fork after it."""
        fork = self.forks[which % len(self.forks)]
        expected = self.written(fork.model, path, data, parents=True)
        try:
            self.api(lambda: fork.tree.write(path, data))
        except OSError as error:
            assert expected is None, f"the fork refused what the model allows: {error!r}"
        else:
            assert expected is not None, "the fork allowed what the model refuses"
            fork.model = expected
        if then_checkpoint:
            record = self.api(lambda: fork.tree.checkpoint("in the fork"))
            assert record.label == "in the fork"
            fork.labels.append("in the fork")

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def the_mount_and_the_api_show_the_model(self) -> None:
        expected = shown(self.model)
        assert mount_view(self.mnt) == expected
        assert self.api(lambda: api_view(self.tree)) == expected

    @invariant()
    def held_descriptors_read_their_files(self) -> None:
        for held in list(self.held):
            if held.state == "lost":
                try:
                    data = os.pread(held.fd, 1 << 20, 0)
                except OSError as error:
                    assert error.errno == errno.ESTALE, error
                else:
                    assert data == held.data
                self.held.remove(held)  # nothing more to learn from it
                os.close(held.fd)
                continue
            expected = self.data_of(held.ino) if held.state == "attached" else held.data
            assert os.pread(held.fd, 1 << 20, 0) == expected, held
            links = os.fstat(held.fd).st_nlink
            assert links == (1 if held.state == "attached" else 0), held

    @invariant()
    def forks_are_their_models(self) -> None:
        for fork in self.forks:
            assert self.api(lambda fork=fork: api_view(fork.tree)) == shown(fork.model)  # type: ignore[misc]
            labels = [r.label for r in self.api(fork.tree.checkpoints)]
            assert labels == fork.labels

    @invariant()
    def the_listing_is_the_models(self) -> None:
        listed = self.api(self.tree.checkpoints)
        found = [
            (
                r.number,
                r.label,
                (r.summary.added, r.summary.modified, r.summary.deleted, r.summary.bytes),
            )
            for r in listed
        ]
        assert found == [(n, k.label, k.summary) for n, k in sorted(self.kept.items())]

    @invariant()
    def the_lower_host_directory_never_changes(self) -> None:
        if self.host is not None:
            assert host_digest(self.host) == self.host_hash


def seeded_model(durable: bool) -> Model:
    """The state before any checkpoint, as a summary sees it: the seed, untouched (a durable
    cow's lower files are in no upper; a ``temp_fs``'s seed files are nodes like any other)."""
    model: Model = {}
    for number, (path, data) in enumerate(SEED.items(), 1):
        probe = parent_path(path)
        while probe != "/":
            model[probe] = ("dir",)
            probe = parent_path(probe)
        model[path] = ("file", data, number, number, not durable)
    return model


class DefaultMountCheckpointModel(MountCheckpointModel):
    durable = True


SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize(
    "machine",
    [MountCheckpointModel, DefaultMountCheckpointModel],
    ids=["temp", "default"],
)
def test_checkpoints_through_a_mount_keep_what_a_full_copy_keeps(
    machine: type[MountCheckpointModel],
) -> None:
    run_state_machine_as_test(machine, settings=SETTINGS)
