"""Reading FUSE requests without two trips through trio's scheduler per request.

Theory of operation
-------------------
pyfuse3 (3.5) reads each request after ``_wait_fuse_readable``: it takes a ``trio.Lock`` (one
checkpoint) and awaits ``wait_readable`` on the device (a second checkpoint, plus an
``epoll_wait``), so every request, however cheap its handler, pays for two rounds of trio's run
loop: a large share of the ~60 us of daemon CPU a request costs. pyfuse3's session loop looks that
function up by name in the ``pyfuse3`` module on every iteration, so :func:`installed` puts
:meth:`Reader.wait` in its place for the life of one session:

- One task at a time holds the *read role*. While requests keep coming, the task that has just
  answered one polls the device (``poll`` with a zero timeout) and goes on to read the next at
  once, or after waiting for it: polling for an adaptive spin window (see
  :meth:`Reader._next_soon`), then up to :data:`IDLE_WAIT` in ``select`` (a client working
  through a tree sends its next request microseconds after our answer). It goes through trio
  (``wait_readable``, a full checkpoint) when the device stays idle longer and after every
  :data:`STREAK` requests, so the rest of the loop (invalidations, the control socket, signals)
  waits a few milliseconds at most. It waits outside trio only while no other worker is
  handling a request: a handler that awaits (a lock's checkpoint, a thread) lets trio run
  other tasks, and a worker that took the read role then and polled would hold that handler
  up with it, while the client waits for the handler's answer and sends nothing (measured on
  copy-on-write mounts, whose changes take a lock: 5,000 creates took 5.1-5.7 s, then
  2.1-3.3 s).
- A task leaving the read role to handle a request makes sure a spare worker is ready to take
  it (waking a parked one, or starting one up to :data:`MAX_TASKS`): a handler that awaits a
  thread (an S3 read, a big fsync) then does not hold up the requests behind it, as with
  pyfuse3's own loop. Spares wait on a parking lot, never on the device: trio refuses two
  tasks waiting on one fd, and reading a device that has nothing to read blocks the whole loop.
- The end: :meth:`Reader.terminate` ends the session and wakes every task; an unmount from
  outside leaves the device readable for good (``ENODEV``), and as each task wakes a spare before
  it reads, every task gets to see that and stop.

Workers beyond pyfuse3's first are pyfuse3's own ``_session_loop`` started in our nursery, with
``max_tasks=1`` so pyfuse3 itself never starts more. If this pyfuse3 lacks the two private names,
:func:`installed` yields ``None`` and pyfuse3's loop runs unchanged (slower, equally correct).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pyfuse3
import trio

log = logging.getLogger("mountd")

STREAK = 32
"""Requests read back to back before the reader lets the rest of the event loop run."""

IDLE_WAIT = 200e-6
"""Seconds the reader waits for the next request before handing the loop back to trio."""

MAX_TASKS = 32
"""Workers at most, counting pyfuse3's first: requests handled at once when handlers block."""

SPIN_START = 50e-6
"""Seconds of polling a reader that stopped spinning starts again with."""

_PRIVATE_NAMES = ("_wait_fuse_readable", "_session_loop")


class Reader:
    """The read role and the spare workers of one pyfuse3 session (see the module docstring)."""

    def __init__(
        self,
        fd: int,
        nursery: trio.Nursery,
        *,
        max_tasks: int = MAX_TASKS,
        spin: float = 0.0,
    ) -> None:
        self._fd = fd
        self._max_spin = spin
        self._spin = spin  # the current spin window, between 0 and _max_spin
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)
        self._nursery = nursery
        self._max_tasks = max_tasks
        self._tasks = 1  # pyfuse3.main's own worker
        self._spares = trio.lowlevel.ParkingLot()
        self._spare_count = 0  # parked, or woken and not yet running
        self._parked = 0  # parked and not yet woken (cheaper than ParkingLot.statistics())
        self._reading = False
        self._closed = False
        self._streak = 0
        # The workers handling a request (between a wait that returned True and their next
        # wait): while one is, waiting outside trio would hold it up (see the module docstring).
        self._handling: set[trio.lowlevel.Task] = set()

    async def wait(self) -> bool:
        """Return once a request can be read (True), or False when this worker must stop."""
        task = trio.lowlevel.current_task()
        handling = self._handling
        handling.discard(task)
        if self._reading:
            self._spare_count += 1
            try:
                while self._reading and not self._closed:
                    self._parked += 1  # the waker counts it down
                    await self._spares.park()
            finally:
                self._spare_count -= 1
        if self._closed:
            return False
        self._reading = True
        try:
            if self._streak < STREAK and (
                self._poller.poll(0) or (not handling and self._next_soon())
            ):
                self._streak += 1
            else:
                self._streak = 0
                await trio.lowlevel.wait_readable(self._fd)
        except trio.ClosedResourceError:  # pyfuse3.terminate() while we waited
            self.close()
            return False
        finally:
            self._reading = False
        handling.add(task)
        self._ready_spare()
        return True

    def _next_soon(self) -> bool:
        """Whether a request arrives soon, waited for outside trio: polled for the current spin
        window, then slept for in ``select`` up to :data:`IDLE_WAIT`.

        A client working through a tree sends its next request a few microseconds after our
        answer; waiting here for it is much cheaper than a round of trio's scheduler. Polling
        keeps the CPU awake, which matters on a virtual machine: a CPU that went idle takes
        tens of microseconds to wake, at every request (measured in same-run A/Bs: creating 5,000
        files took 17-35% less wall time). The window adapts as a hypervisor's halt polling does: a request
        that came only in ``select`` doubles it (up to the ``spin`` given), a wait that found
        nothing halves it, down to none, so a mount whose requests trickle in does not spin.
        """
        spin = self._spin
        if spin:
            poll = self._poller.poll
            deadline = time.perf_counter() + spin
            while time.perf_counter() < deadline:
                if poll(0):
                    return True
                os.sched_yield()  # a client on this CPU runs first
        if self._fd >= 1024:  # beyond select(2); only trio's wait then
            return False
        ready = bool(select.select([self._fd], [], [], IDLE_WAIT)[0])
        if ready:
            self._spin = min(self._max_spin, max(2 * spin, SPIN_START))
        else:
            self._spin = spin / 2 if spin > SPIN_START else 0.0
        return ready

    def _ready_spare(self) -> None:
        if self._spare_count:
            if self._parked:
                self._parked -= 1
                self._spares.unpark()
        elif self._tasks < self._max_tasks:
            self._tasks += 1
            loop: Callable[..., Awaitable[Any]]
            loop = pyfuse3._session_loop  # type: ignore[attr-defined]
            self._nursery.start_soon(loop, self._nursery, 1, 1)

    def close(self) -> None:
        """Make every worker stop at its next wait."""
        self._closed = True
        self._parked = 0
        self._spares.unpark_all()

    def terminate(self) -> None:
        """``pyfuse3.terminate()``, and wake the spares that would otherwise wait for ever."""
        pyfuse3.terminate()
        self.close()


def _device_fd() -> int | None:
    """The process's one open ``/dev/fuse`` descriptor (one mount per process), if exactly one."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") == "/dev/fuse":
                found.append(int(name))
    return found[0] if len(found) == 1 else None


@contextlib.contextmanager
def installed(
    nursery: trio.Nursery,
    *,
    enabled: bool = True,
    spin: float = 0.0,
) -> Iterator[Reader | None]:
    """Serve the current pyfuse3 session with a :class:`Reader` whose workers run in ``nursery``.

    Call after ``pyfuse3.init`` and around ``pyfuse3.main(max_tasks=1)``; yields ``None`` (and
    leaves pyfuse3 alone) when not ``enabled`` or when this pyfuse3 or process does not allow it.
    ``spin``: the longest the reader polls for the next request before it sleeps.
    """
    if not enabled:
        yield None
        return
    fd = _device_fd()
    if fd is None or not all(hasattr(pyfuse3, name) for name in _PRIVATE_NAMES):
        log.warning("pyfuse3's own request loop in use (slower): its internals are not as expected")
        yield None
        return
    reader = Reader(fd, nursery, spin=spin)
    original = pyfuse3._wait_fuse_readable  # type: ignore[attr-defined]
    pyfuse3._wait_fuse_readable = reader.wait  # type: ignore[attr-defined]
    try:
        yield reader
    finally:
        pyfuse3._wait_fuse_readable = original  # type: ignore[attr-defined]
