"""A staged session held by a live process: heartbeats, and the process-exit backstop.

Theory of operation
-------------------
:class:`Session` is what a long-running harness keeps for one Cursor session. It stages on
:meth:`Session.open`, then a daemon thread heartbeats the lease every ``interval`` seconds
(independently of the harness's turns, so a long turn never looks dead to a peer on another
host), and :meth:`Session.close` stops the thread and disposes through the full protocol.

If the process exits without closing (an exception, ``sys.exit``), the ``atexit`` backstop makes
one attempt at the free main lock (``dispose(..., once=True)``): it never bootstraps, never
reclaims a stale lock and never writes when a peer owns the lock. Whatever it cannot do,
``mcpstage reconcile`` does later (the lease's owner is then dead). A ``SIGKILL`` skips both;
reconciliation reaps the lease.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from types import TracebackType

from . import _staging
from ._errors import StageError
from ._manifest import Lease, ServerEntry

log = logging.getLogger(__name__)


class Session:
    """One staged lease, heartbeating until closed (see the module docstring)."""

    def __init__(self, worktree: str, lease: Lease, *, interval: float, wait: float) -> None:
        self.worktree = worktree
        self.lease = lease
        self._interval = interval
        self._wait = wait
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"heartbeat {lease.key}", daemon=True
        )
        self._closed = False

    @classmethod
    def open(
        cls,
        worktree: str | os.PathLike[str],
        entry: ServerEntry,
        *,
        interval: float | None = None,
        lease_ttl: float = _staging.DEFAULT_LEASE_TTL,
        wait: float = 10.0,
    ) -> Session:
        """Stage ``entry`` (owned by this process) and start heartbeating."""
        outcome = _staging.stage(worktree, entry, lease_ttl=lease_ttl, wait=wait)
        assert outcome.lease is not None
        session = cls(
            outcome.shape.worktree,
            outcome.lease,
            interval=lease_ttl / 4 if interval is None else interval,
            wait=wait,
        )
        atexit.register(session.backstop)
        session._thread.start()
        return session

    @property
    def key(self) -> str:
        return self.lease.key

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                _staging.heartbeat(self.worktree, self.key, wait=min(self._wait, self._interval))
            except StageError as error:  # busy or gone: the next beat tries again
                log.warning("heartbeat of %s failed: %s", self.key, error)
            except OSError as error:
                log.warning("heartbeat of %s failed: %s", self.key, error)

    def _stop_beating(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def close(self) -> _staging.Outcome:
        """Stop heartbeating and dispose the lease (the full protocol, with retries)."""
        self._stop_beating()
        atexit.unregister(self.backstop)
        self._closed = True
        return _staging.dispose(self.worktree, self.key, wait=self._wait)

    def backstop(self) -> bool:
        """The process-exit backstop: one free-lock attempt; whether the lease was disposed."""
        if self._closed:
            return True
        self._stop_beating()
        self._closed = True
        try:
            return _staging.dispose(self.worktree, self.key, wait=self._wait, once=True).done
        except (StageError, OSError) as error:
            log.warning("exit backstop for %s left it to reconciliation: %s", self.key, error)
            return False

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
