"""``TurnRoot``: one long-lived tree whose ``/tmp`` is the current turn's scratch (a live mount).

Theory of operation
-------------------
A mount serves one tree for its whole life, so it cannot be handed a freshly composed root each
turn the way :class:`vfs.turns.Session` does. :class:`TurnRoot` is that one tree: a
``union_fs({"/": authored, "/tmp": slot})`` whose ``/tmp`` mount is a *slot* that forwards every
call to the current turn's ``temp_fs``. Beginning or ending a turn swaps a new, empty ``temp_fs``
into the slot. Nothing else changes, so the union (built once) never re-subscribes to the
authored tree, and a turn's scratch is unreachable from the root once it is swapped out.

A swap is a change: the slot reports ``Change("/", "entry")``, which the union forwards as an
``entry`` change at ``/tmp``, and the swap awaits the subscribers. Under ``mountd`` the subscriber
is the mount's invalidator, so when ``end_turn`` returns the kernel has forgotten ``/tmp`` and
everything below it, and ``ls MNT/tmp`` is empty. The slot subscribes to the current scratch
only (unsubscribing from the one it drops), so writes into the current ``/tmp`` through the API
(a spill adopted by the turn) invalidate the kernel's view too, and late writes into a dropped
scratch are reported to nobody.

Turns here are strictly sequential: ``begin_turn`` while a turn is active and ``end_turn``
without one raise ``RuntimeError``. Between turns ``/tmp`` is still a writable, empty scratch
(what ``mountd mount`` always served); ``begin_turn`` swaps it too, so a turn starts empty even if
something wrote there in between. Files a process holds open in a swapped-out scratch keep
working (they hold their node), as with an unlinked file.

Checkpoints: the turn root has them where ``authored`` has them (a union's, so the scratch is
never in one), and ending a turn takes one after ``/tmp`` is swapped out
(:func:`vfs.turns._turn.checkpoint_turn`), unless told not to.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

from .._forward import ForwardingTree
from .._temp import TempFileSystem, temp_fs
from .._types import Change, ChangeCallback, FileSystem
from .._union import UnionFileSystem
from .._watch import Observers
from ._spill import SCRATCH, SpillScope
from ._turn import Turn, checkpoint_turn, open_turn


def turn_root(
    authored: FileSystem, *, checkpoint_turns: bool = True, keep_checkpoints: int | None = None
) -> TurnRoot:
    """``authored`` with a per-turn ``/tmp`` scratch over its own ``/tmp`` (see the module).

    Where ``authored`` keeps checkpoints, each turn's end takes one (``checkpoint_turns``) and
    then keeps the labelled ones and the last ``keep_checkpoints`` (``None``: all)."""
    return TurnRoot(authored, checkpoint_turns=checkpoint_turns, keep_checkpoints=keep_checkpoints)


class _ScratchSlot(ForwardingTree):
    """The ``/tmp`` mount of a :class:`TurnRoot`: every call goes to the current scratch (a
    ``temp_fs``, so the slot has its capabilities: hard links, nodes, listings that reuse what a
    mount knows, and ``buffers_writes = False``, without which a mount of a turn root would
    forward FLUSH at every close and keep a handle per open file)."""

    __slots__ = ("_observers", "_unsubscribe")

    _inner: TempFileSystem

    def __init__(self) -> None:
        self._forward_to(temp_fs())
        self._observers = Observers()
        self._unsubscribe: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"scratch({self._inner!r})"

    @property
    def current(self) -> TempFileSystem:
        return self._inner

    async def swap(self) -> TempFileSystem:
        """Put a new empty scratch in place; report it and wait for the subscribers."""
        fresh = temp_fs()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = fresh.watch(self._forward)
        self._inner = fresh
        await self._observers.emit("/", "entry")
        return fresh

    def _forward(self, change: Change) -> Awaitable[None] | None:
        return self._observers.notify(change)

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        """The current scratch's changes, and a swap as a change at ``/`` (its own: the slot
        reports to its subscribers whichever scratch it holds)."""
        if self._unsubscribe is None:
            self._unsubscribe = self._inner.watch(self._forward)
        return self._observers.subscribe(callback)


class TurnRoot(UnionFileSystem):
    """``authored`` at ``/`` and the current turn's scratch at ``/tmp`` (see the module)."""

    __slots__ = ("_authored", "_checkpoint_turns", "_keep", "_slot", "_turn", "_turns")

    def __init__(
        self,
        authored: FileSystem,
        *,
        checkpoint_turns: bool = True,
        keep_checkpoints: int | None = None,
    ) -> None:
        slot = _ScratchSlot()
        super().__init__({"/": authored, SCRATCH: slot})
        self._authored = authored
        self._slot = slot
        self._turn: Turn | None = None
        self._turns = 0
        self._checkpoint_turns = checkpoint_turns
        self._keep = keep_checkpoints

    def __repr__(self) -> str:
        return f"turn_root({self._authored!r})"

    @property
    def authored(self) -> FileSystem:
        return self._authored

    @property
    def scratch(self) -> FileSystem:
        """The tree at ``/tmp`` right now."""
        return self._slot.current

    @property
    def turn(self) -> Turn | None:
        """The active turn, if any."""
        return self._turn

    @property
    def turns(self) -> int:
        """How many turns have begun."""
        return self._turns

    async def begin_turn(self, *, cwd: str | os.PathLike[str] | None = None) -> Turn:
        """Start a turn with an empty ``/tmp``. ``cwd``: the harness's working directory, whose
        ``agent-tools`` spills the turn may adopt (default: this process's). ``RuntimeError`` if a
        turn is active."""
        if self._turn is not None:
            raise RuntimeError(f"turn {self._turn.number} is active; end it first")
        scope = SpillScope.of(cwd, overlay=True)
        scratch = await self._slot.swap()
        turn = await open_turn(self, scratch, scope, number=self._turns + 1, on_end=self._ended)
        self._turn = turn
        self._turns = turn.number
        return turn

    async def end_turn(self) -> Turn:
        """End the active turn: ``/tmp`` is empty (and the kernel told) when this returns.
        ``RuntimeError`` without an active turn."""
        turn = self._turn
        if turn is None:
            raise RuntimeError("no turn is active")
        await turn.end()
        return turn

    async def _ended(self, turn: Turn) -> None:
        if self._turn is turn:
            self._turn = None
            await self._slot.swap()
            if self._checkpoint_turns:
                await checkpoint_turn(self, turn, self._keep)
