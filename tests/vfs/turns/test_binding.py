"""Turn binding: a turn's root, its /tmp, the session's cached handle, factories (trio and asyncio).

The Overlay table's binding rows: "Bind" (per turn, ``unionFs({"/": authored, "/tmp":
tempFs()})``, ``/tmp`` is a mount), "Session cache" (the handle may stay cached, the composed root
does not) and "Drop" (end of turn; the next turn gets a new empty ``/tmp``), plus the Live root
section (a factory re-resolves before each turn; a static root is shared by every session).
"""

from __future__ import annotations

import collections
import gc
import types
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import vfs
from vfs._union import UnionFileSystem
from vfs.turns import HostContext, RootContext, Session, TurnEndedError, scratch_root

from .spills import BACKENDS, exactly

CTX = RootContext("s1", agent_name="notes")


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


async def names(fs: vfs.FileSystem, path: str) -> list[str]:
    return [entry.path async for entry in fs.list(path)]


def reachable(start: object, target: object, limit: int = 10_000) -> bool:
    """Whether ``target`` can be reached from ``start`` through object references."""
    seen = {id(start)}
    queue = collections.deque([start])
    while queue:
        item = queue.popleft()
        if item is target:
            return True
        for ref in _references(item):
            # Classes and modules lead to everything; nothing of a turn hides behind them.
            if isinstance(ref, (type, types.ModuleType)) or id(ref) in seen:
                continue
            seen.add(id(ref))
            queue.append(ref)
        assert len(seen) < limit, "the object graph is too large to search"
    return False


def _references(item: object) -> list[object]:
    refs = list(gc.get_referents(item))
    if not isinstance(item, type) and hasattr(item, "__dict__"):
        refs.append(vars(item))  # instance dicts that gc does not materialize
    for cls in type(item).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(item, name):
                refs.append(getattr(item, name))
    return refs


def test_root_context_is_a_frozen_value() -> None:
    host = HostContext(vfs.InMemoryHostFiles({}))
    ctx = RootContext("s", agent_name="a", continuation_key="k", host=host)
    assert (ctx.session_id, ctx.agent_name, ctx.continuation_key, ctx.host) == ("s", "a", "k", host)
    assert RootContext("s") == RootContext("s", None, None, None)
    with pytest.raises(AttributeError):
        ctx.session_id = "t"  # type: ignore[misc]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bind_composes_authored_and_a_tmp_mount(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        authored = vfs.temp_fs({"/a.txt": "a"})
        session = Session(authored, CTX, cwd=tmp_path)
        turn = await session.begin_turn()
        root = turn.root
        assert isinstance(root, UnionFileSystem)
        assert root.mounts == {"/": authored, "/tmp": turn.scratch}
        assert await root.read("/a.txt") == "a"
        assert await names(root, "/") == ["/a.txt", "/tmp"]
        await root.write("/tmp/x.txt", "scratch")
        assert turn.scratch is not None
        assert await turn.scratch.read("/x.txt") == "scratch"
        assert (await authored.stat("/tmp")).kind == "missing"  # /tmp is a mount, not authored
        await turn.end()

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_authored_tmp_is_shadowed(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        authored = vfs.temp_fs({"/tmp/durable.txt": "kept?", "/a.txt": "a"})
        async with Session(authored, CTX, cwd=tmp_path).turn() as turn:
            with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /tmp/durable.txt")):
                await turn.root.read("/tmp/durable.txt")
            assert await names(turn.root, "/tmp") == []
            assert [e.path async for e in turn.root.glob("**/*.txt")] == ["/a.txt"]
            hits = turn.root.grep(vfs.GrepQuery("kept"))
            assert [hit async for hit in hits] == []
            await turn.root.write("/tmp/durable.txt", "scratch")
        assert await authored.read("/tmp/durable.txt") == "kept?"  # the authored file survives

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_drop_at_end_and_the_next_turn_starts_empty(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        authored = vfs.temp_fs({"/a.txt": "a"})
        session = Session(authored, CTX, cwd=tmp_path)
        first = await session.begin_turn()
        assert first.number == 1 and first.active
        await first.root.write("/tmp/one.txt", "1")
        await first.root.write("/kept.txt", "durable")
        scratch = weakref.ref(first.scratch)
        await first.end()
        assert not first.active
        with pytest.raises(TurnEndedError, match="turn 1 has ended"):
            _ = first.root
        with pytest.raises(TurnEndedError):
            _ = first.scratch
        gc.collect()
        assert scratch() is None  # nothing keeps the dropped /tmp alive, the turn object included
        second = await session.begin_turn()
        assert second.number == 2
        assert await names(second.root, "/tmp") == []
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /tmp/one.txt")):
            await second.root.read("/tmp/one.txt")
        assert await second.root.read("/kept.txt") == "durable"  # authored writes persist
        await second.end()
        await second.end()  # idempotent

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_session_caches_the_handle_never_the_composed_root(
    backend: str, tmp_path: Path
) -> None:
    async def body() -> None:
        authored = vfs.temp_fs({"/a.txt": "a"})
        session = Session(authored, CTX, cwd=tmp_path)
        assert session.handle is authored
        turn = await session.begin_turn()
        assert session.handle is authored
        assert reachable(turn, turn.scratch)  # the check can see it where it is...
        assert not reachable(session, turn.root)  # ...and the session holds no composed root
        assert not reachable(session, turn.scratch)
        assert not any(isinstance(v, UnionFileSystem) for v in vars(session).values())
        await turn.end()

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_turn_at_a_time(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        session = Session(vfs.temp_fs(), CTX, cwd=tmp_path)
        turn = await session.begin_turn()
        with pytest.raises(RuntimeError, match="session s1 already has an active turn"):
            await session.begin_turn()
        await turn.end()
        await (await session.begin_turn()).end()

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_static_root_is_shared_by_every_session(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        authored = vfs.temp_fs()
        one = Session(authored, RootContext("one"), cwd=tmp_path)
        two = Session(authored, RootContext("two"), cwd=tmp_path)
        async with one.turn() as a, two.turn() as b:
            await a.root.write("/shared.txt", "from one")
            await a.root.write("/tmp/private.txt", "one's scratch")
            assert await b.root.read("/shared.txt") == "from one"
            assert await names(b.root, "/tmp") == []  # concurrent turns: separate /tmp
            assert a.scratch is not b.scratch

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_factory_is_re_resolved_before_each_turn(
    backend: str, is_async: bool, tmp_path: Path
) -> None:
    async def body() -> None:
        calls: list[RootContext] = []

        def make(ctx: RootContext) -> vfs.FileSystem:
            calls.append(ctx)
            return vfs.temp_fs({"/n.txt": str(len(calls))})

        async def make_async(ctx: RootContext) -> vfs.FileSystem:
            await anyio.lowlevel.checkpoint()
            return make(ctx)

        ctx = RootContext("s9", agent_name="notes", continuation_key="c")
        session = Session(make_async if is_async else make, ctx, cwd=tmp_path)
        assert session.handle is None and calls == []
        async with session.turn() as turn:
            assert await turn.root.read("/n.txt") == "1"
            first = session.handle
            await turn.root.write("/written.txt", "x")
        async with session.turn() as turn:
            assert await turn.root.read("/n.txt") == "2"  # a new handle: the old tree is gone
            assert (await turn.root.stat("/written.txt")).kind == "missing"
            assert session.handle is not first
        assert calls == [ctx, ctx]

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_factory_returning_the_same_object_shares_it(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        shared = vfs.temp_fs()
        one = Session(lambda ctx: shared, RootContext("one"), cwd=tmp_path)
        two = Session(lambda ctx: shared, RootContext("two"), cwd=tmp_path)
        async with one.turn() as turn:
            await turn.root.write("/note.txt", "shared")
        async with two.turn() as turn:
            assert await turn.root.read("/note.txt") == "shared"

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_factory_must_return_a_filesystem(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        session = Session(lambda ctx: "not a tree", CTX, cwd=tmp_path)  # type: ignore[arg-type,return-value]
        with pytest.raises(TypeError, match="the root factory returned str, not a FileSystem"):
            await session.begin_turn()
        session._root = lambda ctx: vfs.temp_fs()  # the failed turn left no active turn behind
        await (await session.begin_turn()).end()

    run(backend, body)


def test_a_root_must_be_a_tree_a_factory_or_none(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="root must be a FileSystem, a factory"):
        Session("/srv/root", CTX, cwd=tmp_path)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_default_runs_on_the_host_disk_without_tmp(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        (tmp_path / "a.txt").write_text("host")
        session = Session(None, CTX, cwd=tmp_path)
        assert not session.overlay and session.handle is None
        async with session.turn() as turn:
            assert isinstance(turn.root, vfs.local_file_system(tmp_path).__class__)
            assert turn.scratch is None
            assert await turn.root.read("a.txt") == "host"
            assert not turn.spill_scope.overlay

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scratch_root_is_the_union_of_the_contract(backend: str) -> None:
    async def body() -> None:
        authored, scratch = vfs.temp_fs({"/tmp/a": "x"}), vfs.temp_fs({"/b": "y"})
        root = scratch_root(authored, scratch)
        assert await names(root, "/tmp") == ["/tmp/b"]

    run(backend, body)
