"""The mounts this process sees: ``/proc/self/mountinfo``, parsed, and kept fresh cheaply.

Theory of operation
-------------------
The kernel lists every mount of the process's mount namespace in ``/proc/self/mountinfo``: one
line a mount, later lines mounted later (the last line for a path is the mount on top), paths
canonical (no symlinks) with space, tab, newline and backslash escaped as ``\\040`` etc.
:func:`parse_mountinfo` is the one parser (``mountd`` lists its own mounts with it).

:func:`mountpoints` answers "where are mounts right now" for trees that must not cross into one
(``dir_fs``, see ``vfs._dir``), which ask on every operation, so it must cost no syscall there.
It keeps a snapshot (a tuple, the same object until the table changes) and an open descriptor of
``/proc/self/mountinfo``, which the kernel marks ``POLLPRI | POLLERR`` once after each change of
the namespace's mounts. At most every :data:`FRESH_FOR` seconds a call polls that descriptor
(timeout 0) and rereads the table only when it changed; the calls in between read the clock
(the vDSO: no syscall) and return the snapshot. So a mount made or removed is seen at most
``FRESH_FOR`` seconds late, and a busy process pays one ``poll`` per interval, not per call.

No thread is started, ever: ``mountd run`` enters a mount namespace of its own
(``unshare(CLONE_NEWNS)``) after building its tree, which a multi-threaded process must not do.
The descriptor is opened at the first call, not at import. It watches the namespace it was opened
in, so each poll also compares the namespace's identity (``/proc/self/ns/mnt``) and reopens after
a change of namespace; a forked child reopens too (parent and child would otherwise share one
open file, and whichever polled first would take the other's change notice).

Process-wide state, like the mountpoint guard in ``vfs._disk``: a process has one mount table.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import threading
from dataclasses import dataclass
from time import monotonic

MOUNTINFO = "/proc/self/mountinfo"
FRESH_FOR = 0.01
"""Seconds a snapshot of the mount table is trusted without asking the kernel again."""


@dataclass(frozen=True, slots=True)
class MountEntry:
    """One line of ``/proc/self/mountinfo`` (the fields this project uses)."""

    mount_id: int
    device: str  # "major:minor"; for FUSE the minor names the fusectl connection
    mountpoint: str
    fstype: str
    source: str
    options: str


_ESCAPE = re.compile(rb"\\([0-7]{3})")


def unescape(field: bytes) -> str:
    """Undo mountinfo's octal escapes (``\\040`` is a space); bytes that are not UTF-8 survive
    as surrogates, as everywhere in ``os``."""
    return os.fsdecode(_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]), field))


def parse_mountinfo(data: bytes) -> list[MountEntry]:
    """Parse the text of ``/proc/<pid>/mountinfo`` (see proc(5)), in mount order."""
    entries = []
    for line in data.splitlines():
        left, sep, right = line.partition(b" - ")
        if not sep:
            continue
        fields = left.split(b" ")
        tail = right.split(b" ", 2)
        if len(fields) < 6 or len(tail) < 2:
            continue
        entries.append(
            MountEntry(
                mount_id=int(fields[0]),
                device=fields[2].decode("ascii", "replace"),
                mountpoint=unescape(fields[4]),
                fstype=unescape(tail[0]),
                source=unescape(tail[1]),
                options=unescape(tail[2]) if len(tail) > 2 else "",
            )
        )
    return entries


def read_mountinfo() -> list[MountEntry]:
    """This process's mounts now, in mount order (reads the file; no snapshot)."""
    with open(MOUNTINFO, "rb") as handle:
        return parse_mountinfo(handle.read())


class _MountTable:
    """The snapshot behind :func:`mountpoints` (see the module docstring)."""

    __slots__ = ("fd", "lock", "namespace", "next_look", "poller", "snapshot")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fd = -1
        self.poller: select.poll | None = None
        self.namespace = -1
        self.next_look = float("-inf")  # monotonic time after which the kernel is asked again
        self.snapshot: tuple[str, ...] = ()

    def current(self) -> tuple[str, ...]:
        # Kept to a clock read and a comparison: trees call this on every operation.
        if monotonic() < self.next_look:
            return self.snapshot
        with self.lock:
            if monotonic() >= self.next_look:
                self._refresh()
            return self.snapshot

    def _refresh(self) -> None:
        with contextlib.suppress(OSError):  # no /proc to ask: the snapshot stays as it was
            self._look()
        self.next_look = monotonic() + FRESH_FOR

    def _look(self) -> None:
        namespace = os.stat("/proc/self/ns/mnt").st_ino
        changed = namespace != self.namespace or self.poller is None
        if changed:
            self._close()
            self.fd = os.open(MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
            self.poller = select.poll()
            self.poller.register(self.fd, select.POLLPRI | select.POLLERR)
            self.namespace = namespace
        else:
            assert self.poller is not None
            changed = any(
                events & (select.POLLPRI | select.POLLERR) for _, events in self.poller.poll(0)
            )
        if changed:
            # Read after the poll: a change made while we read is noticed at the next poll.
            paths = sorted({entry.mountpoint for entry in read_mountinfo()})
            if tuple(paths) != self.snapshot:
                self.snapshot = tuple(paths)

    def _close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = -1
        self.poller = None

    def forget(self) -> None:
        """In a forked child: the descriptor is shared with the parent; start afresh."""
        self.lock = threading.Lock()
        self._close()
        self.next_look = float("-inf")


_TABLE = _MountTable()
os.register_at_fork(after_in_child=_TABLE.forget)


mountpoints = _TABLE.current
"""``mountpoints()``: every path something is mounted on in this process's mount namespace,
canonical, sorted, at most :data:`FRESH_FOR` seconds old; the same tuple object while nothing
changes."""
