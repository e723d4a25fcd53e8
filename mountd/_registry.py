"""Which ``mountd`` mounts exist on this host, whether they are alive, and what serves them.

Theory of operation
-------------------
The kernel is the source of truth for *which* mounts exist: ``/proc/self/mountinfo`` lists every
mount, and ours carry fstype ``fuse.mountd`` (the daemon mounts with ``subtype=mountd``). Paths
there are canonical (no symlinks) with space, tab, newline and backslash escaped as ``\\040`` etc.
(parsed by ``vfs._mounts``). A path a user names is matched against that text without touching
the mount itself (:func:`canonical`): a hung daemon makes every ``stat`` of its mountpoint block
once the kernel's cached attributes expire, and ``unmount`` must still find and detach it.

Whether a mount is alive is probed with ``statvfs``, never ``stat``: after the daemon dies,
``stat`` can still succeed from the kernel's attribute cache, while ``statvfs`` always reaches the
daemon and fails with ``ENOTCONN``. A stopped (``SIGSTOP``) daemon makes the probe block, so it
runs in a daemon thread with a timeout and such a mount is reported as ``hung``.

What the kernel does not know (spec, pid, operation counters) lives in a per-mount *state file*
that the daemon writes into a private state directory (mode 0700, owned by the user):
``$XDG_RUNTIME_DIR/agentroot-mountd``, else ``/run/agentroot-mountd`` for root, else
``/tmp/agentroot-mountd-$UID``. A file is keyed by the sha256 of the canonical mountpoint, written
atomically (temp file + rename), refreshed about once a second and removed on clean exit; one left
behind by a killed daemon is removed by whoever clears the dead mount. A pid in a state file is
trusted only together with the process start time recorded next to it, so a reused pid is never
signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from vfs.lowlevel import MountEntry, read_mountinfo

FSTYPE = "fuse.mountd"
MNT_DETACH = 2

Health = Literal["live", "dead", "hung", "unreachable"]


@dataclass(frozen=True)
class MountState:
    """What a daemon records about its mount; JSON in the state directory."""

    mountpoint: str
    spec: str
    description: str
    pid: int
    pid_start: int | None
    started: float
    counters: Mapping[str, int] = field(default_factory=dict)
    session: str = ""  # the directory keeping the default tree's changes (mountd._sessions)

    def to_json(self) -> str:
        return json.dumps(
            {
                "mountpoint": self.mountpoint,
                "spec": self.spec,
                "description": self.description,
                "pid": self.pid,
                "pid_start": self.pid_start,
                "started": self.started,
                "counters": dict(sorted(self.counters.items())),
                "session": self.session,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> MountState:
        data = json.loads(text)
        return cls(
            mountpoint=str(data["mountpoint"]),
            spec=str(data["spec"]),
            description=str(data.get("description", "")),
            pid=int(data["pid"]),
            pid_start=None if data.get("pid_start") is None else int(data["pid_start"]),
            started=float(data["started"]),
            counters={str(k): int(v) for k, v in dict(data.get("counters", {})).items()},
            session=str(data.get("session", "")),
        )


# --- mountinfo ---------------------------------------------------------------------------------


def our_mounts() -> list[MountEntry]:
    """This mount namespace's ``mountd`` mounts, in mount order."""
    return [entry for entry in read_mountinfo() if entry.fstype == FSTYPE]


def mount_at(mountpoint: str) -> MountEntry | None:
    """Our mount on top at ``mountpoint`` (a canonical path), if any."""
    found = None
    for entry in read_mountinfo():
        if entry.mountpoint == mountpoint:
            found = entry  # the last one is on top, whoever's it is
    return found if found is not None and found.fstype == FSTYPE else None


_MAX_LINKS = 40


def canonical(path: str | os.PathLike[str]) -> str:
    """The absolute, symlink-free form the kernel lists a mountpoint under, found without
    touching the final component, so it works on a dead or hung mount: the real path of the
    parent directory plus the name, taken as it is when mountinfo lists it; otherwise a final
    symlink is read (``readlink`` does not reach into a mount) and its target canonicalized
    the same way."""
    listed = {entry.mountpoint for entry in read_mountinfo()}
    path = os.path.abspath(os.fspath(path))
    for _ in range(_MAX_LINKS):
        head, name = os.path.split(path)
        if not name:
            return path  # "/"
        candidate = os.path.join(os.path.realpath(head), name)
        if candidate in listed:
            return candidate
        try:
            target = os.readlink(candidate)
        except OSError:
            return candidate  # not a symlink (nor a mountpoint), or missing
        path = os.path.normpath(os.path.join(os.path.dirname(candidate), target))
    return os.path.realpath(path)  # a symlink loop: let realpath say what it makes of it


def untrusted_link(path: str | os.PathLike[str]) -> str | None:
    """The first symlink on the way to ``path`` that the kernel's ``protected_symlinks`` rule
    would not let this user follow: one in a sticky directory anyone can write (``/tmp``),
    owned by neither this user nor that directory's owner. Mounting there would mount (and
    make directories) where another user chose: root's ``mountd mount /tmp/x`` over a planted
    ``/tmp/x -> /etc/cron.d``. The rule is checked here whatever the sysctl says, since
    :func:`canonical` reads the final symlink itself."""
    pending = [name for name in os.path.abspath(os.fspath(path)).split("/") if name]
    current = "/"
    hops = 0
    while pending:
        name = pending.pop(0)
        here = os.path.join(current, name)
        try:
            target = os.readlink(here)  # (not lstat: that would ask a hung mount there)
        except OSError as error:
            if error.errno != errno.EINVAL:
                return None  # missing from here on: mountd makes it
            current = here  # not a symlink
            continue
        info = os.lstat(here)  # a symlink: never a mountpoint
        parent = os.lstat(current)
        shared = parent.st_mode & stat.S_ISVTX and parent.st_mode & stat.S_IWOTH
        if shared and info.st_uid not in (os.geteuid(), parent.st_uid):
            return here
        hops += 1
        if hops > _MAX_LINKS:
            return None  # a loop: the mount fails on its own
        if target.startswith("/"):
            current = "/"
        pending[:0] = [part for part in target.split("/") if part]
    return None


# ENOTCONN once the daemon's /dev/fuse descriptor is gone; ECONNABORTED when the connection was
# aborted (fusectl ``abort``, or the kernel tearing it down while requests were queued).
_DEAD = frozenset({errno.ENOTCONN, errno.ECONNABORTED})


def probe(mountpoint: str, timeout: float = 2.0) -> Health:
    """``live`` if the daemon answers ``statvfs``, ``dead`` on ``ENOTCONN``/``ECONNABORTED``, ``hung`` if it does
    not answer within ``timeout``, ``unreachable`` on any other error (e.g. another user's mount
    without ``allow_other``)."""
    outcome: list[Health] = []

    def run() -> None:
        try:
            os.statvfs(mountpoint)
            outcome.append("live")
        except OSError as error:
            outcome.append("dead" if error.errno in _DEAD else "unreachable")

    # A daemon thread: if the mount hangs, the thread stays blocked but cannot keep us alive.
    thread = threading.Thread(target=run, name=f"probe {mountpoint}", daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0] if outcome else "hung"


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; whether it held."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --- detaching ---------------------------------------------------------------------------------


class DetachError(Exception):
    """Neither umount2 nor fusermount3 could remove a mount."""


def detach(mountpoint: str) -> None:
    """Lazily detach the mount at ``mountpoint`` (works on dead and busy mounts): ``umount2``
    with ``MNT_DETACH`` as root, else ``fusermount3 -u -z``. Raises :class:`DetachError`."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(mountpoint), MNT_DETACH) == 0:
        return
    code = ctypes.get_errno()
    if code not in (errno.EPERM, errno.EACCES):
        raise DetachError(f"umount2 {mountpoint}: {os.strerror(code)}")
    fusermount("-u", "-z", mountpoint)


def fusermount(*args: str) -> None:
    """Run ``fusermount3`` (or ``fusermount``) with ``args``; :class:`DetachError` on failure."""
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    if tool is None:
        raise DetachError("fusermount3 not found (install the fuse3 package)")
    result = subprocess.run([tool, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DetachError(
            result.stderr.strip() or f"{tool} {' '.join(args)} failed ({result.returncode})"
        )


# --- processes ---------------------------------------------------------------------------------


def process_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (proc(5) stat field 22), or ``None``
    if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is parenthesized and may hold spaces; split after its ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[19])


def process_alive(pid: int, start: int | None) -> bool:
    """Whether ``pid`` still runs and is the same process (same start time) as recorded."""
    now = process_start(pid)
    if now is None:
        return False
    if start is not None and now != start:
        return False
    # A zombie has exited; it only waits for its parent to reap it.
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_bytes()
        if state[state.rindex(b")") + 2 : state.rindex(b")") + 3] == b"Z":
            return False
    return True


# --- state files -------------------------------------------------------------------------------


def state_dir(*, create: bool = False) -> Path:
    """The private per-user state directory (see the module docstring). With ``create``, make it
    (mode 0700) and refuse one that another user owns or others can read."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        path = Path(runtime) / "agentroot-mountd"
    elif os.geteuid() == 0:
        path = Path("/run/agentroot-mountd")
    else:
        path = Path(tempfile.gettempdir()) / f"agentroot-mountd-{os.geteuid()}"
    if create:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700, parents=False)
    try:
        info = path.lstat()
    except FileNotFoundError:
        return path  # (nothing to read from yet)
    # Also when only reading: in /tmp another user may have made it first, to plant state.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(
            f"state directory {path} is not a directory owned by uid {os.geteuid()}"
        )
    if create and info.st_mode & 0o077:
        path.chmod(0o700)
    return path


def state_key(mountpoint: str) -> str:
    return hashlib.sha256(os.fsencode(mountpoint)).hexdigest()[:24]


def state_path(mountpoint: str) -> Path:
    return state_dir() / f"{state_key(mountpoint)}.json"


def log_path(mountpoint: str) -> Path:
    return state_dir() / f"{state_key(mountpoint)}.log"


def write_state(state: MountState) -> None:
    """Atomically replace the state file for ``state.mountpoint``."""
    directory = state_dir(create=True)
    target = directory / f"{state_key(state.mountpoint)}.json"
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".state-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(state.to_json())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def read_state(mountpoint: str) -> MountState | None:
    try:
        text = state_path(mountpoint).read_text()
    except FileNotFoundError:
        return None
    try:
        return MountState.from_json(text)
    except (ValueError, KeyError, TypeError):
        return None  # a torn or foreign file tells us nothing


def remove_state(mountpoint: str, pid: int | None = None) -> None:
    """Remove the state file of ``mountpoint`` (only if it belongs to ``pid``, when given)."""
    if pid is not None:
        state = read_state(mountpoint)
        if state is not None and state.pid != pid:
            return
    with contextlib.suppress(FileNotFoundError):
        state_path(mountpoint).unlink()


def all_states() -> Iterator[MountState]:
    directory = state_dir()
    try:
        names = sorted(directory.glob("*.json"))
    except OSError:
        return
    for name in names:
        try:
            state = MountState.from_json(name.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        yield state
