"""A turn: the root a turn's tools run on, its ``/tmp`` scratch, and the spills it adopts.

Theory of operation
-------------------
A :class:`Turn` is made by whoever binds turns (:class:`vfs.turns.Session` for a library harness,
:class:`vfs.turns.TurnRoot` for a live mount) and lives until :meth:`Turn.end`. It holds:

- ``root``: the tree the turn's tools run on. After ``end`` it is gone (``RuntimeError``): the
  composed root is dropped with the turn, so a later turn never reads this turn's ``/tmp``.
- ``scratch``: the tree mounted at ``/tmp`` (``None`` on the host-default path, which has none,
  and under a root whose allowlist keeps no web tool, which binds none).
- ``spill_scope``: the harness ``cwd`` and the mode (:class:`vfs.turns.SpillScope`).
- ``checkpoint``: the checkpoint the turn's end took of the tree it ran on (``None`` until then,
  and for a tree that keeps none; :func:`checkpoint_turn`, which both binders call at the end).
- a snapshot of ``{cwd}/agent-tools`` taken when the turn began: the names present then and the
  time. A file "written by the native tool this turn" is one whose name was not there at the
  start, that is a regular file (not a symlink) and whose mtime is not older than the turn (less
  a small slack: the kernel stamps files with a coarse clock that may lag ``time_ns``).

:meth:`Turn.adopt_spill` is the overlay's one I/O step. For a ``webSearch``/``webFetch`` result
it takes the spill paths the result names (``vfs.turns._spill``), and for each one written this
turn writes the bytes to ``/tmp/{uuid}.txt`` through the turn's root (so into its scratch), then deletes
the host file; then it rewrites the result for exactly the adopted files. Paths the result names
that were not written this turn (older spills, other directories) are neither copied nor
rewritten. A file adopted earlier in the turn is rewritten again without copying (its host file
is gone), so adoption is idempotent. Other tools' results, results naming no spill (small ones)
and the host-default mode return the result object unchanged. Adoptions run one at a time.

:meth:`Turn.bind_tools` (what ``Toolset.bind(turn)`` calls) binds the file tools to the turn
itself (``vfs.turns._tools``): they stop working when it ends, and Read/Grep rewrite a host spill
path in their own input.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import anyio

from .._types import Checkpoint, Checkpoints, FileSystem
from ..tools import Tool
from ._spill import SpillScope, is_web_tool, rewrite_result, scratch_path, spill_references
from ._tools import bind_turn_tools

T = TypeVar("T")

# How far a fresh file's mtime may lag the turn's start (the kernel's coarse timestamp clock).
MTIME_SLACK_NS = 50_000_000


@dataclass(frozen=True)
class SpillSnapshot:
    """What ``{cwd}/agent-tools`` held when a turn began."""

    names: frozenset[str]
    started_ns: int

    @classmethod
    def take(cls, scope: SpillScope) -> SpillSnapshot:
        started = time.time_ns()
        try:
            names = frozenset(os.listdir(scope.spill_dir))
        except (FileNotFoundError, NotADirectoryError):
            names = frozenset()
        return cls(names, started)

    def written_since(self, name: str, info: os.stat_result) -> bool:
        """Whether the file ``name`` (``lstat``'d as ``info``) was written during the turn."""
        return (
            name not in self.names
            and stat.S_ISREG(info.st_mode)
            and info.st_mtime_ns >= self.started_ns - MTIME_SLACK_NS
        )


async def open_turn(
    root: FileSystem,
    scratch: FileSystem | None,
    scope: SpillScope,
    *,
    number: int = 1,
    on_end: Callable[[Turn], Awaitable[None]] | None = None,
) -> Turn:
    """A new :class:`Turn`, with ``{cwd}/agent-tools`` looked at (off the event loop) in overlay
    mode."""
    if scope.overlay:
        snapshot = await anyio.to_thread.run_sync(SpillSnapshot.take, scope)
    else:
        snapshot = SpillSnapshot(frozenset(), time.time_ns())
    return Turn(root, scratch, scope, snapshot, number=number, on_end=on_end)


async def checkpoint_turn(tree: FileSystem | None, turn: Turn, keep_last: int | None) -> None:
    """A turn's end: a checkpoint of ``tree`` (where it keeps them) for ``turn``, then a prune
    to the labelled ones and the last ``keep_last`` (``None``: keep all)."""
    if isinstance(tree, Checkpoints):
        turn.checkpoint = await tree.checkpoint(turn=turn.number)
        if keep_last is not None:
            await tree.prune_checkpoints(keep_last)


class TurnEndedError(RuntimeError):
    """The turn has ended: its root and scratch are gone."""


class Turn:
    """One turn of one agent (see the module docstring)."""

    def __init__(
        self,
        root: FileSystem,
        scratch: FileSystem | None,
        scope: SpillScope,
        snapshot: SpillSnapshot,
        *,
        number: int = 1,
        on_end: Callable[[Turn], Awaitable[None]] | None = None,
    ) -> None:
        self._root: FileSystem | None = root
        self._scratch = scratch
        self._scope = scope
        self._snapshot = snapshot
        self._adopted: dict[str, None] = {}
        self._lock = anyio.Lock()
        self._on_end = on_end
        self.number = number
        self.started = self._snapshot.started_ns / 1e9
        # The checkpoint its end took of the tree it ran on (see checkpoint_turn).
        self.checkpoint: Checkpoint | None = None

    def __repr__(self) -> str:
        state = "ended" if self._root is None else "active"
        return f"Turn(#{self.number}, {state}, cwd={self._scope.cwd!r})"

    @property
    def root(self) -> FileSystem:
        """The tree this turn's tools run on (``TurnEndedError`` after :meth:`end`)."""
        if self._root is None:
            raise TurnEndedError(f"turn {self.number} has ended; its root is gone")
        return self._root

    @property
    def scratch(self) -> FileSystem | None:
        """The tree at this turn's ``/tmp`` (``None`` on the host-default path)."""
        if self._root is None:
            raise TurnEndedError(f"turn {self.number} has ended; its /tmp is gone")
        return self._scratch

    @property
    def active(self) -> bool:
        return self._root is not None

    @property
    def spill_scope(self) -> SpillScope:
        return self._scope

    def bind_tools(self, names: Iterable[str]) -> dict[str, Tool]:
        """The file tools ``names`` bound to this turn (``Toolset.bind(turn)`` calls this): they
        raise ``TurnEndedError`` once the turn has ended, and Read/Grep take the host spill path
        for ``/tmp/{uuid}.txt`` (``vfs.turns._tools``)."""
        if self._root is None:
            raise TurnEndedError(f"turn {self.number} has ended; it binds no tools")
        return bind_turn_tools(self, names)

    @property
    def adopted(self) -> tuple[str, ...]:
        """The uuids of the spill files this turn adopted, in order."""
        return tuple(self._adopted)

    async def end(self) -> None:
        """Drop the root and the scratch; idempotent."""
        if self._root is None:
            return
        self._root = None
        self._scratch = None
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            await on_end(self)

    async def adopt_spill(self, result: T, *, tool_name: str) -> T:
        """``result`` of the native tool ``tool_name`` as the model sees it under this turn's root.

        Overlay mode, webSearch/webFetch only: copies each spill file the result names that was
        written this turn into ``/tmp/{uuid}.txt``, deletes the host file, and rewrites the paths
        and follow-up (see the module docstring). Raises ``TurnEndedError`` after :meth:`end`,
        and the ``OSError`` of a failed copy (the host file then stays where it is).
        """
        if not self._scope.overlay or not is_web_tool(tool_name) or self.scratch is None:
            return result  # (no /tmp: the allowlist has no web tool, so nothing spills here)
        wanted = spill_references(result, self._scope)
        if not wanted:
            return result
        async with self._lock:
            root = self.root
            for uuid in wanted:
                if uuid not in self._adopted and await self._copy(root, uuid):
                    self._adopted[uuid] = None
        return rewrite_result(result, self._scope, self._adopted.keys() & set(wanted))

    async def _copy(self, root: FileSystem, uuid: str) -> bool:
        """Move the host spill ``uuid`` to ``/tmp/{uuid}.txt``; False if it is not this turn's."""
        host = self._scope.host_path(uuid)
        data = await anyio.to_thread.run_sync(self._read_fresh, host, f"{uuid}.txt")
        if data is None:
            return False
        await root.write(scratch_path(uuid), data)
        with contextlib.suppress(FileNotFoundError):
            await anyio.to_thread.run_sync(os.unlink, host)
        return True

    def _read_fresh(self, host: str, name: str) -> bytes | None:
        """The bytes of ``host`` if the native tool wrote it this turn, else None."""
        try:
            fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                return None  # gone, or a symlink: not a file the tool wrote
            raise
        with os.fdopen(fd, "rb") as handle:
            if not self._snapshot.written_since(name, os.fstat(handle.fileno())):
                return None
            return handle.read()
