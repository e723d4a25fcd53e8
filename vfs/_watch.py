"""Fan-out of :class:`vfs.Change` notifications to subscribers.

A tree owns one :class:`Observers` and awaits :meth:`Observers.emit` after each change made through
it, *before* the changing call returns. A subscriber may return an awaitable, and the change is not
complete until it is done: that is how a mount invalidates the kernel's cache before an API write
returns, so nobody reads stale data through the mount afterwards. Callbacks must otherwise be
cheap. With no subscriber, ``emit`` costs one truth test, so unwatched trees pay nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from ._types import Change, ChangeCallback, ChangeKind


class Observers:
    __slots__ = ("_callbacks",)

    def __init__(self) -> None:
        self._callbacks: list[ChangeCallback] = []

    def __bool__(self) -> bool:
        return bool(self._callbacks)

    def subscribe(self, callback: ChangeCallback) -> Callable[[], None]:
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return unsubscribe

    async def emit(self, path: str, kind: ChangeKind) -> None:
        """Tell every subscriber; call after the change is made, await before returning."""
        if self._callbacks:
            pending = self.notify(Change(path, kind))
            if pending is not None:
                await pending

    async def emit_all(self, changes: Iterable[tuple[str, ChangeKind]]) -> None:
        """:meth:`emit` of many changes at once (a rewind's): every subscriber hears of each
        before any is awaited, so one that batches its work (a mount's invalidations) does it
        once, not once a change."""
        if self._callbacks:
            pending = [self.notify(Change(path, kind)) for path, kind in changes]
            await _await_all([awaitable for awaitable in pending if awaitable is not None])

    def notify(self, change: Change) -> Awaitable[None] | None:
        """Call every subscriber; an awaitable when any of them has asynchronous work left.

        A composer forwards a child's (re-pathed) change with this and returns the result from
        its own subscription callback, so the child's ``emit`` waits for the whole chain.
        """
        pending = [result for cb in list(self._callbacks) if (result := cb(change)) is not None]
        if not pending:
            return None
        return _await_all(pending)


async def _await_all(pending: list[Awaitable[None]]) -> None:
    for awaitable in pending:
        await awaitable
