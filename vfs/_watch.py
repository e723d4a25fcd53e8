"""Fan-out of :class:`vfs.Change` notifications to subscribers.

A tree owns one :class:`Observers`; it calls :meth:`Observers.emit` after each change made through
it. Callbacks run synchronously and must be cheap (a mount only queues the change). With no
subscriber, ``emit`` costs one attribute test, so unwatched trees pay nothing measurable.
"""

from __future__ import annotations

from collections.abc import Callable

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

    def emit(self, path: str, kind: ChangeKind) -> None:
        if not self._callbacks:
            return
        change = Change(path, kind)
        for callback in list(self._callbacks):
            callback(change)

    def forward(self, change: Change) -> None:
        """Pass on a change that already carries its origin (a composer re-emitting a child's)."""
        for callback in list(self._callbacks):
            callback(change)
