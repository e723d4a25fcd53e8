"""Who a lock or a lease belongs to, and whether that process still lives.

Theory of operation
-------------------
A :class:`Process` names a process across hosts: ``pid`` and ``hostname`` (what the protocol
persists), plus the kernel's ``boot_id`` and the process's start time (``/proc/PID/stat`` field
22), which make the record immune to pid reuse and to reboots.

Liveness is decidable only on the owner's own host (same ``hostname``): there a process is alive
when the pid exists, is not a zombie, and started at the recorded time during the current boot.
For another host :func:`is_alive` answers ``None`` (unknown): callers fall back to time (a lock's
critical-section TTL, a lease's heartbeat). A host whose ``boot_id`` changed has rebooted, so
every process recorded under the old one is dead.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Process:
    """A process, as recorded by lock owners and leases."""

    pid: int
    hostname: str
    boot_id: str = ""  # "" when unknown (no /proc)
    start: int = 0  # clock ticks after boot; 0 when unknown


def boot_id() -> str:
    """This boot's id, or ``""`` off Linux."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` fields from field 3 (state) on, or ``None``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            data = file.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; it ends at the last ')'.
    return data[data.rfind(b")") + 2 :].decode("ascii", "replace").split()


def start_time(pid: int) -> int:
    """The start time of ``pid`` in clock ticks after boot, or 0 when unknown."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return 0
    return int(fields[19])


def process(pid: int | None = None) -> Process:
    """The record of ``pid`` (default: this process) on this host."""
    pid = os.getpid() if pid is None else pid
    return Process(pid=pid, hostname=socket.gethostname(), boot_id=boot_id(), start=start_time(pid))


def same_host(owner: Process) -> bool:
    """Whether ``owner`` was recorded on this host (by hostname, as the protocol persists it)."""
    return owner.hostname == socket.gethostname()


def is_alive(owner: Process) -> bool | None:
    """Whether ``owner`` still runs; ``None`` for another host's process (cannot tell)."""
    if not same_host(owner):
        return None
    current_boot = boot_id()
    if owner.boot_id and current_boot and owner.boot_id != current_boot:
        return False  # the host rebooted since
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    fields = _stat_fields(owner.pid)
    if fields is None:
        return True  # no /proc to look closer: the pid exists
    if fields[0] in ("Z", "X"):
        return False  # exited, not yet reaped
    return not (owner.start and len(fields) >= 20 and int(fields[19]) != owner.start)
