"""The tools of a turn: bound to it, they rewrite their own spill input and end with it; the
session binds ``/tmp`` exactly when the allowlist says so.

The README's flow is ``session.toolset.bind(turn)``: no ``rewrite_tool_input`` step between the
model's call and ``invoke``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

import vfs
from vfs.tools import ToolResult, resolve_toolset
from vfs.tools._edit import edit_target
from vfs.turns import RootContext, Session, Turn, TurnEndedError

from ..tools.trees import YieldingTree
from .spills import BACKENDS, exactly, fetch_result, spill

CTX = RootContext("s1")


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "harness"
    path.mkdir()
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_bound_read_and_grep_follow_the_host_spill_path(backend: str, cwd: Path) -> None:
    """After ``adopt_spill`` the model may still hold ``{cwd}/agent-tools/{uuid}.txt``: the
    turn's own Read and Grep take it for ``/tmp/{uuid}.txt``."""

    async def main() -> None:
        session = Session(vfs.temp_fs({"/notes.md": "hello\n"}), CTX, cwd=cwd)
        async with session.turn() as turn:
            tools = session.toolset.bind(turn)
            uuid, host = spill(cwd, "alpha\nneedle here\n")
            await turn.adopt_spill(fetch_result(host), tool_name="webFetch")
            assert await tools["Read"].invoke({"path": str(host)}) == ToolResult.success(
                "     1\talpha\n     2\tneedle here"
            )
            assert await tools["Read"].invoke({"target_file": str(host), "offset": 2}) == (
                ToolResult.success("     2\tneedle here")
            )
            grep = await tools["Grep"].invoke({"pattern": "needle", "path": str(host)})
            assert grep == ToolResult.success(f"/tmp/{uuid}.txt:2:needle here")
            # Other tools and other paths are as they were.
            assert await tools["Read"].invoke({"path": "/notes.md"}) == ToolResult.success(
                "     1\thello"
            )
            other = f"{cwd}/agent-tools/not-a-uuid.txt"
            assert await tools["Read"].invoke({"path": other}) == ToolResult.failure(
                f"not found: {other}"
            )
            assert await tools["LS"].invoke({"path": str(host)}) == ToolResult.failure(
                f"not found: {host}"
            )

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_host_default_does_not_rewrite(backend: str, cwd: Path) -> None:
    async def main() -> None:
        session = Session(None, CTX, cwd=cwd)
        async with session.turn() as turn:
            tools = session.toolset.bind(turn)
            _, host = spill(cwd, "native\n")
            assert await turn.adopt_spill(fetch_result(host), tool_name="webFetch") == (
                fetch_result(host)
            )
            assert await tools["Read"].invoke({"path": str(host)}) == ToolResult.success(
                "     1\tnative"
            )
            assert await tools["Read"].invoke({"path": "agent-tools/" + host.name}) == (
                ToolResult.success("     1\tnative")  # relative to the cwd, as the host does
            )

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tools_of_an_ended_turn_see_nothing(backend: str, cwd: Path) -> None:
    """Kept past its turn, a tool raises ``TurnEndedError``: it never reaches that turn's
    ``/tmp`` (nor the next turn's)."""

    async def main() -> None:
        session = Session(vfs.temp_fs({"/notes.md": "hello\n"}), CTX, cwd=cwd)
        turn = await session.begin_turn()
        tools = session.toolset.bind(turn)
        assert (await tools["Write"].invoke({"path": "/tmp/t.txt", "fileText": "one"})).ok
        await turn.end()
        for name, arguments in [
            ("Read", {"path": "/tmp/t.txt"}),
            ("LS", {"path": "/tmp"}),
            ("Grep", {"pattern": "one", "path": "/tmp"}),
            ("Glob", {"pattern": "*", "path": "/tmp"}),
            ("Write", {"path": "/tmp/u.txt", "fileText": "x"}),
            ("StrReplace", {"path": "/tmp/t.txt", "oldText": "one", "newText": "two"}),
            ("Delete", {"path": "/tmp/t.txt"}),
        ]:
            with pytest.raises(TurnEndedError, match=exactly("turn 1 has ended; its root is gone")):
                await tools[name].invoke(arguments)
        with pytest.raises(TurnEndedError, match=exactly("turn 1 has ended; it binds no tools")):
            session.toolset.bind(turn)
        async with session.turn() as second:
            fresh = session.toolset.bind(second)
            assert await fresh["LS"].invoke({"path": "/tmp"}) == ToolResult.success("/tmp/")

    run(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("tools", "scratch"),
    [
        (None, True),
        (["webSearch"], True),
        (["webFetch", "read"], True),
        (["updateTodos"], False),
        (["semSearch"], False),
        (["read", "edit"], False),
        ([], False),
    ],
)
def test_the_allowlist_decides_the_tmp_scratch(
    backend: str, cwd: Path, tools: list[str] | None, scratch: bool
) -> None:
    """``/tmp`` is bound only when webSearch or webFetch stays (the Allowlist table); without
    it ``/tmp`` is the authored tree's own path."""

    async def main() -> None:
        authored = vfs.temp_fs({"/tmp/authored.txt": "mine\n"})
        toolset = resolve_toolset(root=authored, tools=tools)
        session = Session(authored, CTX, cwd=cwd, toolset=toolset)
        assert session.toolset is toolset
        async with session.turn() as turn:
            assert (turn.scratch is not None) is scratch
            listed = [entry.path async for entry in turn.root.list("/tmp")]
            assert listed == ([] if scratch else ["/tmp/authored.txt"])
            _, host = spill(cwd, "spilled\n")
            adopted = await turn.adopt_spill(fetch_result(host), tool_name="webFetch")
            assert (adopted != fetch_result(host)) is scratch  # no /tmp: nothing is adopted
            assert host.exists() is not scratch
            assert (await authored.stat("/tmp/authored.txt")).kind == "file"
            assert [entry.path async for entry in authored.list("/tmp")] == ["/tmp/authored.txt"]

    run(backend, main)


def test_a_toolset_of_another_root_kind_is_refused(cwd: Path) -> None:
    host_default = resolve_toolset(root=None, tools=None)
    with pytest.raises(
        ValueError,
        match=exactly("the toolset was resolved for the host default, not for this root"),
    ):
        Session(vfs.temp_fs(), CTX, cwd=cwd, toolset=host_default)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bound_edits_share_the_root_s_locks_across_sessions(backend: str, cwd: Path) -> None:
    """Two sessions over one static root, each turn's tools bound to its turn: parallel edits of
    one file through both all land (the lock is the root's file's, not the turn's)."""

    shared = YieldingTree({"/p.txt": "".join(f"line{i}\n" for i in range(8))})

    async def main() -> None:
        sessions = [Session(shared, RootContext(f"s{n}"), cwd=cwd) for n in range(2)]
        turns: list[Turn] = [await session.begin_turn() for session in sessions]
        bound = [session.toolset.bind(turn) for session, turn in zip(sessions, turns, strict=True)]
        results: list[ToolResult] = []

        async def one(i: int) -> None:
            arguments = {"path": "/p.txt", "oldText": f"line{i}\n", "newText": f"L{i}\n"}
            results.append(await bound[i % 2]["StrReplace"].invoke(arguments))

        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(one, i)
        assert all(result.ok for result in results)
        assert shared.files["/p.txt"] == "".join(f"L{i}\n" for i in range(8)).encode()
        for tools in bound:  # the lock is keyed by the root's own file
            assert edit_target(tools["StrReplace"].fs, "/p.txt") == (shared, "/p.txt")
        for turn in turns:
            await turn.end()

    run(backend, main)
