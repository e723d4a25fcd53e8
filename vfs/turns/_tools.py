"""The file tools of one turn: bound to the turn, not to a tree that outlives it.

Theory of operation
-------------------
:func:`bind_turn_tools` synthesizes the file tools over a :class:`TurnTree`, a FileSystem that
forwards every call to the turn's root *at the time of the call*: once the turn has ended there
is no root, so a tool kept past its turn raises :class:`vfs.turns.TurnEndedError` instead of
reaching a ``/tmp`` that belongs to no turn any more (the error propagates out of ``invoke``: a
tool called after its turn is the harness's mistake, not the model's). Paths resolve as the
root reads them (host paths on the host default).

Read and Grep rewrite their own path argument: in overlay mode the host spill path
``{cwd}/agent-tools/{uuid}.txt`` (which a model may still hold from a native result) means
``/tmp/{uuid}.txt`` (:func:`vfs.turns.rewrite_input_path`), so a harness needs no extra step
between the model's call and ``invoke``. Other tools, and other paths, are left as they are.

A :class:`TurnTree` says where a path lives (``mount_for``: the root), so the edit locks of the
tools (``vfs.tools._edit``) are the root's, shared with every other turn over that root.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Protocol

from .._reading import open_for_reading
from .._types import (
    DirEntry,
    FileInfo,
    FileSystem,
    GrepQuery,
    GrepResult,
    OpenFile,
    SearchQuery,
    SearchResult,
)
from ..tools import Tool, path_resolver, synthesize_tools
from ..tools._names import GREP, READ
from ._spill import SpillScope, rewrite_input_path

REWRITTEN = (READ, GREP)
"""The tools whose path argument may name a host spill (the contract's Result rewrite table)."""


class _Turn(Protocol):
    @property
    def root(self) -> FileSystem: ...

    @property
    def spill_scope(self) -> SpillScope: ...


class TurnTree:
    """The eight verbs of a turn's root, looked up at each call (see the module docstring)."""

    __slots__ = ("_turn",)

    def __init__(self, turn: _Turn) -> None:
        self._turn = turn

    def __repr__(self) -> str:
        return f"TurnTree({self._turn!r})"

    def mount_for(self, path: str) -> tuple[FileSystem, str]:
        return self._turn.root, path

    def list(self, prefix: str = "") -> AsyncIterator[DirEntry]:
        return self._turn.root.list(prefix)

    async def stat(self, path: str) -> FileInfo:
        return await self._turn.root.stat(path)

    def glob(self, pattern: str, dir: str = "") -> AsyncIterator[DirEntry]:
        return self._turn.root.glob(pattern, dir)

    async def read(self, path: str) -> str | bytes:
        return await self._turn.root.read(path)

    def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        return self._turn.root.grep(query)

    async def write(self, path: str, contents: str | bytes) -> None:
        await self._turn.root.write(path, contents)

    async def delete(self, path: str) -> None:
        await self._turn.root.delete(path)

    def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        return self._turn.root.search(query)

    async def open_for_reading(self, path: str) -> OpenFile:
        return await open_for_reading(self._turn.root, path)


def bind_turn_tools(turn: _Turn, names: Iterable[str]) -> dict[str, Tool]:
    """The file tools ``names`` bound to ``turn`` (see the module docstring)."""
    names = tuple(names)
    tree = TurnTree(turn)
    resolve = path_resolver(turn.root)
    scope = turn.spill_scope

    def spill_aware(path: str) -> str:
        return resolve(rewrite_input_path(path, scope))

    tools = synthesize_tools(tree, names, resolve_path=resolve)
    rewriting = synthesize_tools(
        tree, [name for name in names if name in REWRITTEN], resolve_path=spill_aware
    )
    return {name: rewriting.get(name, tool) for name, tool in tools.items()}
