"""Turn binding: which tree a session's turn runs on, and the ``/tmp`` it gets.

Theory of operation
-------------------
An agent's ``root`` is one of three things, and a :class:`Session` binds every turn from it:

- ``None``: the host default. Each turn runs on ``local_file_system(cwd)``; there is no ``/tmp``
  scratch and nothing is rewritten (:class:`vfs.turns.SpillScope` with ``overlay=False``).
- a :class:`vfs.FileSystem` (a *static* root): the same object for every session and every turn,
  so writes made in one session are seen by all of them.
- a *factory* ``(RootContext) -> FileSystem | Awaitable[FileSystem]``: called again before each
  turn. Whatever it returns is the session's handle for that turn; a factory that returns the
  same object each time shares it, one that returns a new object does not.

The session caches only the handle (:attr:`Session.handle`). The tree a turn runs on is composed
per turn, ``union_fs({"/": handle, "/tmp": temp_fs()})``, handed out in the :class:`Turn` and never
stored on the session, so it is dropped when the turn ends and the next turn starts with an empty
``/tmp``. An authored ``/tmp`` is shadowed by that mount (the union's longest prefix wins).

Whether a turn gets that ``/tmp`` is the allowlist's decision (:attr:`vfs.tools.Toolset.scratch_tmp`):
the session's :attr:`Session.toolset` (given, or :func:`vfs.tools.resolve_toolset` of the root with
``tools`` omitted) binds it only when webSearch or webFetch stays; otherwise the turn runs on the
handle itself, with no scratch (rows ``["updateTodos"]``, ``["semSearch"]``, ``[]``). The turn's
file tools are ``session.toolset.bind(turn)``: bound to the turn, they end with it.

A session runs one turn at a time: :meth:`Session.begin_turn` while a turn is active raises
``RuntimeError``. That is all the session remembers about the turn (a flag), not the turn itself.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from .._host import HostFilesApi
from .._local import local_file_system
from .._temp import temp_fs
from .._types import FileSystem
from .._union import union_fs
from ..tools import Toolset, resolve_toolset
from ._spill import SCRATCH, SpillScope
from ._turn import Turn, checkpoint_turn, open_turn


@dataclass(frozen=True)
class HostContext:
    """What the host lends a root factory: its files API (and reminders, when it has them)."""

    files: HostFilesApi
    reminders: object | None = None


@dataclass(frozen=True)
class RootContext:
    """What a root factory is told about the session it builds a tree for."""

    session_id: str
    agent_name: str | None = None
    continuation_key: str | None = None
    host: HostContext | None = None


RootFactory = Callable[[RootContext], FileSystem | Awaitable[FileSystem]]
Root = FileSystem | RootFactory | None


def scratch_root(authored: FileSystem, scratch: FileSystem) -> FileSystem:
    """A turn's root: ``authored`` at ``/`` with ``scratch`` over its ``/tmp``."""
    return union_fs({"/": authored, SCRATCH: scratch})


class Session:
    """Binds the turns of one session to its root (see the module docstring).

    ``root``: ``None`` (host default), a FileSystem, or a factory. ``context`` is what a factory
    is called with. ``cwd``: the harness's working directory, where native tools spill
    (``{cwd}/agent-tools``) and what the host default resolves relative paths against.
    ``toolset``: the agent's resolved allowlist (default: ``tools`` omitted), which decides the
    ``/tmp`` scratch and the file tools ``toolset.bind(turn)`` gives. Where the root keeps
    checkpoints (:class:`vfs.Checkpoints`), each turn's end takes one (``checkpoint_turns``).
    """

    def __init__(
        self,
        root: Root,
        context: RootContext,
        *,
        cwd: str | os.PathLike[str],
        toolset: Toolset | None = None,
        checkpoint_turns: bool = True,
    ) -> None:
        if root is not None and not isinstance(root, FileSystem) and not callable(root):
            raise TypeError(
                f"root must be a FileSystem, a factory (ctx) -> FileSystem, or None; "
                f"got {type(root).__name__}"
            )
        if toolset is None:
            toolset = resolve_toolset(root=root, tools=None)
        elif toolset.authored_root != (root is not None):
            raise ValueError(
                "the toolset was resolved for "
                + ("an authored root" if toolset.authored_root else "the host default")
                + ", not for this root"
            )
        self.toolset = toolset
        self._root = root
        self.context = context
        self.cwd = os.path.abspath(os.fspath(cwd))
        self._handle: FileSystem | None = root if isinstance(root, FileSystem) else None
        self._turns = 0
        self._in_turn = False
        self._checkpoint_turns = checkpoint_turns

    def __repr__(self) -> str:
        return f"Session({self.context.session_id!r}, turns={self._turns})"

    @property
    def overlay(self) -> bool:
        """Whether the agent has an authored root (else it runs on the host disk)."""
        return self._root is not None

    @property
    def handle(self) -> FileSystem | None:
        """The cached handle: the static root, or what the factory returned last (``None``
        before a factory's first turn and on the host-default path)."""
        return self._handle

    async def resolve(self) -> FileSystem | None:
        """Re-resolve the handle (call the factory; a static root is itself) and cache it."""
        root = self._root
        if root is None or isinstance(root, FileSystem):
            return root
        made = root(self.context)
        if inspect.isawaitable(made):
            made = await made
        if not isinstance(made, FileSystem):
            raise TypeError(f"the root factory returned {type(made).__name__}, not a FileSystem")
        self._handle = made
        return made

    async def begin_turn(self) -> Turn:
        """Start the next turn: re-resolve a factory, compose the turn's root with a new empty
        ``/tmp``. ``RuntimeError`` if a turn is active."""
        if self._in_turn:
            raise RuntimeError(f"session {self.context.session_id} already has an active turn")
        self._in_turn = True
        try:
            handle = await self.resolve()
            number = self._turns + 1
            if handle is None:
                scope = SpillScope(self.cwd, overlay=False)
                turn = await open_turn(
                    local_file_system(self.cwd), None, scope, number=number, on_end=self._ended
                )
            elif self.toolset.scratch_tmp:
                scratch = temp_fs()
                scope = SpillScope(self.cwd, overlay=True)
                root = scratch_root(handle, scratch)
                turn = await open_turn(root, scratch, scope, number=number, on_end=self._ended)
            else:  # no web tool stays: nothing spills, and the allowlist binds no /tmp
                scope = SpillScope(self.cwd, overlay=True)
                turn = await open_turn(handle, None, scope, number=number, on_end=self._ended)
        except BaseException:
            self._in_turn = False
            raise
        self._turns = number
        return turn

    async def _ended(self, turn: Turn) -> None:
        self._in_turn = False
        if self._checkpoint_turns and self.overlay:
            await checkpoint_turn(self._handle, turn, None)

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[Turn]:
        """``async with session.turn() as turn:`` begins a turn and ends it on the way out."""
        turn = await self.begin_turn()
        try:
            yield turn
        finally:
            await turn.end()
