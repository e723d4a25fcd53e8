"""``TurnRoot``: the live-mount form of turn binding (trio and asyncio, no mount).

One tree for the life of a mount; each turn swaps an empty scratch in at ``/tmp`` and reports the
swap as an ``entry`` change at ``/tmp`` (what lets ``mountd`` drop the kernel's cached view).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

import vfs
from vfs.turns import TurnEndedError, TurnRoot, turn_root

from .spills import BACKENDS, exactly, fetch_result, spill


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


async def names(fs: vfs.FileSystem, path: str) -> list[str]:
    return [entry.path async for entry in fs.list(path)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tmp_is_the_turn_scratch_over_the_authored_tmp(backend: str) -> None:
    async def body() -> None:
        authored = vfs.temp_fs({"/a.txt": "a", "/tmp/authored.txt": "shadowed"})
        root = turn_root(authored)
        assert isinstance(root, TurnRoot) and isinstance(root, vfs.PosixFileSystem)
        assert isinstance(root, vfs.Watchable)
        assert root.authored is authored and root.turn is None and root.turns == 0
        assert await names(root, "/tmp") == []  # between turns: an empty, writable scratch
        await root.write("/tmp/between.txt", "x")
        turn = await root.begin_turn(cwd="/harness")
        assert turn.root is root and turn.scratch is root.scratch
        assert (turn.number, root.turns, root.turn) == (1, 1, turn)
        assert turn.spill_scope.cwd == "/harness" and turn.spill_scope.overlay
        assert await names(root, "/tmp") == []  # a turn starts empty
        await root.write("/tmp/t.txt", "turn")
        await root.mkdir("/tmp/d")
        assert await names(root, "/tmp") == ["/tmp/d", "/tmp/t.txt"]
        assert await root.read("/a.txt") == "a"
        ended = await root.end_turn()
        assert ended is turn and not turn.active and root.turn is None
        assert await names(root, "/tmp") == []
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /tmp/t.txt")):
            await root.read("/tmp/t.txt")
        with pytest.raises(TurnEndedError):
            _ = turn.root
        assert await authored.read("/tmp/authored.txt") == "shadowed"

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_turns_are_sequential(backend: str) -> None:
    async def body() -> None:
        root = turn_root(vfs.temp_fs())
        with pytest.raises(RuntimeError, match=exactly("no turn is active")):
            await root.end_turn()
        await root.begin_turn()
        with pytest.raises(RuntimeError, match=exactly("turn 1 is active; end it first")):
            await root.begin_turn()
        await root.end_turn()
        turn = await root.begin_turn()
        assert turn.number == 2
        await turn.end()  # ending the Turn itself ends it on the root too
        assert root.turn is None

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_swap_is_an_entry_change_at_tmp_and_scratch_writes_are_reported(backend: str) -> None:
    async def body() -> None:
        root = turn_root(vfs.temp_fs({"/a.txt": "a"}))
        seen: list[tuple[str, str]] = []
        root.watch(lambda change: seen.append((change.path, change.kind)))
        turn = await root.begin_turn()
        assert seen == [("/tmp", "entry")]
        old = turn.scratch
        await root.write("/tmp/x.txt", "x")
        await root.write("/a.txt", "b")
        assert seen[1:] == [("/tmp/x.txt", "entry"), ("/a.txt", "content")]
        seen.clear()
        await root.end_turn()
        assert seen == [("/tmp", "entry")]
        seen.clear()
        assert old is not None
        await old.write("/late.txt", "nobody hears")  # a dropped scratch reports to nobody
        assert seen == []

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_subscriptions_do_not_pile_up_over_turns(backend: str) -> None:
    async def body() -> None:
        authored = vfs.temp_fs()
        root = turn_root(authored)
        root.watch(lambda change: None)
        for _ in range(20):
            await root.begin_turn()
            await root.end_turn()
        assert len(authored._observers._callbacks) == 1  # the union subscribed once
        assert len(root._slot.current._observers._callbacks) == 1

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_spill_adopted_in_a_live_turn(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        root = turn_root(vfs.temp_fs())
        seen: list[str] = []
        root.watch(lambda change: seen.append(change.path))
        turn = await root.begin_turn(cwd=tmp_path)
        uuid, host = spill(tmp_path, "fetched\n")
        adopted = await turn.adopt_spill(fetch_result(host), tool_name="webFetch")
        assert adopted["output_location"] == f"/tmp/{uuid}.txt"
        assert await root.read(f"/tmp/{uuid}.txt") == "fetched\n"
        assert f"/tmp/{uuid}.txt" in seen  # a mount would invalidate that name
        await root.end_turn()
        assert await names(root, "/tmp") == []

    run(backend, body)
