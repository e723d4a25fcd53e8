"""Adopting native web-tool spills into a turn's /tmp, with real files (trio and asyncio).

The Overlay table, row by row: Native tool (its result still comes through), Small results
(inline, no disk, no rewrite), Copy (only a file the native tool wrote this turn under
``{cwd}/agent-tools/``), Dest (``/tmp/{uuid}.txt``, same uuid), Host file (deleted after the
copy), Other paths (ignored); and the model's follow path: synthesized Read / Grep on
``/tmp/{uuid}.txt``, also when the model still holds the host path.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

import vfs
from vfs.tools import synthesize_tools
from vfs.turns import RootContext, Session, Turn, TurnEndedError, rewrite_tool_input

from .spills import BACKENDS, BIG, exactly, fetch_result, new_uuid, search_chunk, spill

CTX = RootContext("s1")


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


def in_turn(
    backend: str, cwd: Path, body: Callable[[Turn], Awaitable[None]], root: object = "temp"
) -> None:
    async def main() -> None:
        authored = vfs.temp_fs({"/notes.md": "hello\n"}) if root == "temp" else None
        async with Session(authored, CTX, cwd=cwd).turn() as turn:
            await body(turn)

    run(backend, main)


async def tmp_names(turn: Turn) -> list[str]:
    return [entry.path async for entry in turn.root.list("/tmp")]


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "harness"
    path.mkdir()
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_web_fetch_spill_moves_into_tmp(backend: str, cwd: Path) -> None:
    async def body(turn: Turn) -> None:
        uuid, host = spill(cwd)
        result = fetch_result(host)
        adopted = await turn.adopt_spill(result, tool_name="webFetch")
        # Dest: /tmp/{uuid}.txt, same uuid, same bytes.
        assert adopted["output_location"] == f"/tmp/{uuid}.txt"
        assert str(host) not in adopted["content"]
        assert f"Use Read or Grep on /tmp/{uuid}.txt." in adopted["content"]
        assert await turn.root.read(f"/tmp/{uuid}.txt") == BIG
        assert await tmp_names(turn) == [f"/tmp/{uuid}.txt"]
        # Host file: deleted after the copy.
        assert not host.exists()
        assert turn.adopted == (uuid,)
        # Native tool: the rest of its result comes through as it was.
        assert adopted["url"] == result["url"]
        assert adopted["content"].startswith("The page is long; here is the start.\n")

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_web_search_chunk_spill_moves_into_tmp(backend: str, cwd: Path) -> None:
    async def body(turn: Turn) -> None:
        uuid, host = spill(cwd, "search results\n")
        adopted = await turn.adopt_spill(search_chunk(host), tool_name="WebSearch")
        assert adopted == search_chunk(f"/tmp/{uuid}.txt").replace(
            "Run `rg` in the shell to search them.", f"Use Read or Grep on /tmp/{uuid}.txt."
        )
        assert await turn.root.read(f"/tmp/{uuid}.txt") == "search results\n"
        assert not host.exists()

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_results_stay_inline(backend: str, cwd: Path) -> None:
    async def body(turn: Turn) -> None:
        result = {"url": "https://example.com", "content": "a short page"}
        assert await turn.adopt_spill(result, tool_name="webFetch") is result
        assert await turn.adopt_spill("three hits", tool_name="webSearch") == "three hits"
        assert await tmp_names(turn) == []
        assert not (cwd / "agent-tools").exists()

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_spill_from_before_the_turn_is_not_copied(backend: str, cwd: Path) -> None:
    _uuid, host = spill(cwd, "an older turn's spill\n")

    async def body(turn: Turn) -> None:
        result = fetch_result(host)
        assert await turn.adopt_spill(result, tool_name="webFetch") is result
        assert host.read_text() == "an older turn's spill\n"
        assert await tmp_names(turn) == []

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_name_with_an_old_mtime_is_not_copied(backend: str, cwd: Path) -> None:
    async def body(turn: Turn) -> None:
        _uuid, host = spill(cwd)
        os.utime(host, (1_000_000_000, 1_000_000_000))  # moved in, not written this turn
        result = fetch_result(host)
        assert await turn.adopt_spill(result, tool_name="webFetch") is result
        assert host.exists()

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_symlink_in_agent_tools_is_not_followed(backend: str, cwd: Path) -> None:
    secret = cwd.parent / "secret.txt"
    secret.write_text("do not copy me")

    async def body(turn: Turn) -> None:
        uuid = new_uuid()
        (cwd / "agent-tools").mkdir()
        link = cwd / "agent-tools" / f"{uuid}.txt"
        link.symlink_to(secret)
        result = fetch_result(link)
        assert await turn.adopt_spill(result, tool_name="webFetch") is result
        assert link.is_symlink() and secret.read_text() == "do not copy me"
        assert await tmp_names(turn) == []

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_other_paths_in_the_text_are_ignored(backend: str, cwd: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "agent-tools"
    elsewhere.mkdir(parents=True)

    async def body(turn: Turn) -> None:
        uuid, host = spill(cwd)
        stray = elsewhere / f"{new_uuid()}.txt"
        stray.write_text("not the harness's")
        notes = cwd / "agent-tools" / "notes.txt"
        notes.write_text("not a spill name")
        text = f"See {stray} and {notes}. Saved to {host}."
        adopted = await turn.adopt_spill(text, tool_name="webFetch")
        assert adopted == (
            f"See {stray} and {notes}. Saved to /tmp/{uuid}.txt. Use Read or Grep on /tmp/{uuid}.txt."
        )
        assert stray.exists() and notes.exists()
        assert await tmp_names(turn) == [f"/tmp/{uuid}.txt"]

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tool", ["mcp", "Read", "shell", "semSearch"])
def test_other_tools_results_are_untouched(backend: str, tool: str, cwd: Path) -> None:
    async def body(turn: Turn) -> None:
        _uuid, host = spill(cwd)
        result = fetch_result(host)
        assert await turn.adopt_spill(result, tool_name=tool) is result
        assert host.exists()
        assert await tmp_names(turn) == []

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adopting_twice_rewrites_without_copying_again(backend: str, cwd: Path) -> None:
    async def body(turn: Turn) -> None:
        uuid, host = spill(cwd)
        first = await turn.adopt_spill(fetch_result(host), tool_name="webFetch")
        await turn.root.write(f"/tmp/{uuid}.txt", "edited in the turn")
        again = await turn.adopt_spill(fetch_result(host), tool_name="web_fetch")
        assert again == first
        assert await turn.root.read(f"/tmp/{uuid}.txt") == "edited in the turn"

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_spills_in_one_turn(backend: str, cwd: Path) -> None:
    async def body(turn: Turn) -> None:
        one, host_one = spill(cwd, "one\n")
        two, host_two = spill(cwd, "two\n")
        await turn.adopt_spill(fetch_result(host_one), tool_name="webFetch")
        await turn.adopt_spill(search_chunk(host_two), tool_name="webSearch")
        assert await tmp_names(turn) == sorted([f"/tmp/{one}.txt", f"/tmp/{two}.txt"])
        assert turn.adopted == (one, two)

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_next_turn_does_not_see_the_spill(backend: str, cwd: Path) -> None:
    async def body() -> None:
        session = Session(vfs.temp_fs(), CTX, cwd=cwd)
        async with session.turn() as turn:
            uuid, host = spill(cwd)
            await turn.adopt_spill(fetch_result(host), tool_name="webFetch")
        with pytest.raises(TurnEndedError):
            await turn.adopt_spill(fetch_result(host), tool_name="webFetch")
        async with session.turn() as turn:
            assert await tmp_names(turn) == []
            read = synthesize_tools(turn.root, ["Read"])["Read"]
            arguments = rewrite_tool_input("Read", {"path": str(host)}, turn)
            result = await read.invoke(arguments)
            assert (result.ok, result.error) == (False, f"not found: /tmp/{uuid}.txt")

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_default_leaves_the_spill_where_the_native_tool_put_it(
    backend: str, cwd: Path
) -> None:
    async def body(turn: Turn) -> None:
        _uuid, host = spill(cwd)
        result = fetch_result(host)
        assert await turn.adopt_spill(result, tool_name="webFetch") is result
        assert host.exists()
        arguments = {"path": str(host)}
        assert rewrite_tool_input("Read", arguments, turn) is arguments
        read = synthesize_tools(turn.root, ["Read"])["Read"]
        assert (await read.invoke({"path": str(host), "limit": 1})).content == (
            "     1\tline 1: the fetched page says hay"
        )

    in_turn(backend, cwd, body, root=None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_and_grep_follow_the_spill_also_from_the_host_path(backend: str, cwd: Path) -> None:
    async def body(turn: Turn) -> None:
        uuid, host = spill(cwd)
        await turn.adopt_spill(fetch_result(host), tool_name="webFetch")
        tools = synthesize_tools(turn.root, ["Read", "Grep"])
        for path in (f"/tmp/{uuid}.txt", str(host)):
            read_args = rewrite_tool_input("Read", {"path": path, "offset": 777, "limit": 1}, turn)
            read = await tools["Read"].invoke(read_args)
            assert read.ok, read.error
            assert read.content == "   777\tline 777: the fetched page says needle"
            grep_args = rewrite_tool_input("Grep", {"pattern": "needle", "path": path}, turn)
            grep = await tools["Grep"].invoke(grep_args)
            assert grep.ok, grep.error
            assert f"/tmp/{uuid}.txt" in str(grep.content)
            assert "line 777: the fetched page says needle" in str(grep.content)
        # Without the input rewrite the host path means nothing in the root.
        unrewritten = await tools["Read"].invoke({"path": str(host)})
        assert (unrewritten.ok, unrewritten.error) == (False, f"not found: {host}")

    in_turn(backend, cwd, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_copy_keeps_the_host_file(backend: str, cwd: Path) -> None:
    async def body() -> None:
        authored = vfs.temp_fs()
        session = Session(authored, CTX, cwd=cwd)
        async with session.turn() as turn:
            uuid, host = spill(cwd)
            await turn.root.write(f"/tmp/{uuid}.txt/x", "")  # a directory where the copy goes
            with pytest.raises(
                vfs.IsADirectoryError, match=exactly(f"is a directory: /tmp/{uuid}.txt")
            ):
                await turn.adopt_spill(fetch_result(host), tool_name="webFetch")
            assert host.exists()
            assert turn.adopted == ()

    run(backend, body)


def test_messages_are_exact() -> None:
    assert exactly("a.b") == r"^a\.b$"
